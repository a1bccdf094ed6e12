//! A Kerberos 5 security context through GSSAPI, for the SASL GSSAPI mechanism
//! (RFC 4752) of services other than HDFS: a Kerberized Hive Metastore
//! (`hive.metastore.sasl.enabled`).
//!
//! The context is the client's (the initiator's), with the process's default
//! credentials, as the HDFS client uses them: the ticket cache `KRB5CCNAME`
//! (`kinit`), or a keytab login ([`super::kerberos::login_with_keytab`], which
//! also renews). MIT Kerberos (`libgssapi_krb5.so.2`) is loaded at run time, as
//! for HDFS; failures say why in the same words as HDFS's
//! ([`KerberosError`]).

use std::ffi::{c_int, c_void};

use super::kerberos::{self, KerberosError, GSSAPI_LIBRARY};

/// `gss_buffer_desc`.
#[repr(C)]
struct Buffer {
    length: usize,
    value: *mut c_void,
}

impl Buffer {
    fn empty() -> Buffer {
        Buffer {
            length: 0,
            value: std::ptr::null_mut(),
        }
    }

    /// A buffer the library only reads, over `bytes`.
    fn over(bytes: &[u8]) -> Buffer {
        Buffer {
            length: bytes.len(),
            value: bytes.as_ptr() as *mut c_void,
        }
    }
}

/// `gss_OID_desc`.
#[repr(C)]
struct Oid {
    length: u32,
    elements: *mut c_void,
}

impl Oid {
    /// An OID the library only reads, over its DER bytes.
    fn of(der: &'static [u8]) -> Oid {
        Oid {
            length: der.len() as u32,
            elements: der.as_ptr() as *mut c_void,
        }
    }
}

/// The Kerberos 5 mechanism, 1.2.840.113554.1.2.2.
const KRB5_MECHANISM: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];
/// A Kerberos principal name (`GSS_KRB5_NT_PRINCIPAL_NAME`), 1.2.840.113554.1.2.2.1.
const KRB5_PRINCIPAL_NAME: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02, 0x01];

const GSS_C_MUTUAL_FLAG: u32 = 2;
const GSS_C_SEQUENCE_FLAG: u32 = 8;
const GSS_C_CONF_FLAG: u32 = 16;
const GSS_C_INTEG_FLAG: u32 = 32;
/// The calling and routine error bits of a major status.
const ERROR_MASK: u32 = 0xffff_0000;
const GSS_S_CONTINUE_NEEDED: u32 = 1;

type ImportName = unsafe extern "C" fn(*mut u32, *mut Buffer, *mut Oid, *mut *mut c_void) -> u32;
type DisplayName = unsafe extern "C" fn(*mut u32, *mut c_void, *mut Buffer, *mut *mut Oid) -> u32;
type ReleaseName = unsafe extern "C" fn(*mut u32, *mut *mut c_void) -> u32;
type CanonicalizeName =
    unsafe extern "C" fn(*mut u32, *mut c_void, *mut Oid, *mut *mut c_void) -> u32;
type InitSecContext = unsafe extern "C" fn(
    *mut u32,
    *mut c_void,
    *mut *mut c_void,
    *mut c_void,
    *mut Oid,
    u32,
    u32,
    *mut c_void,
    *mut Buffer,
    *mut *mut Oid,
    *mut Buffer,
    *mut u32,
    *mut u32,
) -> u32;
type Wrap = unsafe extern "C" fn(
    *mut u32,
    *mut c_void,
    c_int,
    u32,
    *mut Buffer,
    *mut c_int,
    *mut Buffer,
) -> u32;
type Unwrap = unsafe extern "C" fn(
    *mut u32,
    *mut c_void,
    *mut Buffer,
    *mut Buffer,
    *mut c_int,
    *mut u32,
) -> u32;
type DeleteSecContext = unsafe extern "C" fn(*mut u32, *mut *mut c_void, *mut Buffer) -> u32;
type ReleaseBuffer = unsafe extern "C" fn(*mut u32, *mut Buffer) -> u32;

/// The functions of the library a context uses.
struct Functions {
    _library: libloading::Library,
    import_name: ImportName,
    display_name: DisplayName,
    release_name: ReleaseName,
    canonicalize_name: CanonicalizeName,
    init_sec_context: InitSecContext,
    wrap: Wrap,
    unwrap: Unwrap,
    delete_sec_context: DeleteSecContext,
    release_buffer: ReleaseBuffer,
}

impl Functions {
    fn load() -> Result<Functions, libloading::Error> {
        // SAFETY: loading MIT Kerberos runs only its initialisers, and every
        // symbol is given the type of its declaration in <gssapi/gssapi.h>.
        unsafe {
            let library = libloading::Library::new(GSSAPI_LIBRARY)?;
            Ok(Functions {
                import_name: *library.get::<ImportName>(b"gss_import_name\0")?,
                display_name: *library.get::<DisplayName>(b"gss_display_name\0")?,
                release_name: *library.get::<ReleaseName>(b"gss_release_name\0")?,
                canonicalize_name: *library.get::<CanonicalizeName>(b"gss_canonicalize_name\0")?,
                init_sec_context: *library.get::<InitSecContext>(b"gss_init_sec_context\0")?,
                wrap: *library.get::<Wrap>(b"gss_wrap\0")?,
                unwrap: *library.get::<Unwrap>(b"gss_unwrap\0")?,
                delete_sec_context: *library
                    .get::<DeleteSecContext>(b"gss_delete_sec_context\0")?,
                release_buffer: *library.get::<ReleaseBuffer>(b"gss_release_buffer\0")?,
                _library: library,
            })
        }
    }

    /// The bytes of a buffer the library filled, which it then releases.
    fn take(&self, buffer: &mut Buffer) -> Vec<u8> {
        if buffer.value.is_null() {
            return Vec::new();
        }
        // SAFETY: the library wrote `length` bytes at `value`.
        let bytes = unsafe { std::slice::from_raw_parts(buffer.value as *const u8, buffer.length) }
            .to_vec();
        let mut minor = 0u32;
        // SAFETY: a buffer the library allocated, released once.
        unsafe { (self.release_buffer)(&mut minor, buffer) };
        bytes
    }
}

/// The client's side of a Kerberos security context with one service, set up
/// token by token ([`Initiator::step`]), then protecting messages
/// ([`Initiator::wrap`], [`Initiator::unwrap`]). Not for use by several
/// threads at once (it is neither `Send` nor `Sync`).
pub struct Initiator {
    gss: Functions,
    /// The service's `thrift://HOST:PORT`, for messages.
    url: String,
    /// The service's principal as Kerberos reads it (its realm filled in).
    target: String,
    name: *mut c_void,
    context: *mut c_void,
    established: bool,
}

impl Initiator {
    /// A context with the service `principal` (`service/host@REALM`, or
    /// `service/host` in the default realm) at `url`. Nothing is sent or
    /// asked of the KDC yet.
    pub fn new(url: &str, principal: &str) -> Result<Initiator, KerberosError> {
        let gss = Functions::load().map_err(|_| KerberosError::LibraryMissing {
            url: url.to_string(),
        })?;
        let mut minor = 0u32;
        let mut name: *mut c_void = std::ptr::null_mut();
        let mut input = Buffer::over(principal.as_bytes());
        let mut kind = Oid::of(KRB5_PRINCIPAL_NAME);
        // SAFETY: the input buffer and OID outlive the call, which only reads
        // them; `name` is an out-pointer to a live local, released in Drop.
        let major = unsafe { (gss.import_name)(&mut minor, &mut input, &mut kind, &mut name) };
        if major & ERROR_MASK != 0 {
            return Err(KerberosError::Other {
                url: url.to_string(),
                detail: format!(
                    "the service principal {principal}: {}",
                    kerberos::status_text(major, minor)
                ),
            });
        }
        let mut initiator = Initiator {
            gss,
            url: url.to_string(),
            target: principal.to_string(),
            name,
            context: std::ptr::null_mut(),
            established: false,
        };
        if let Some(shown) = initiator.display_name() {
            initiator.target = shown;
        }
        Ok(initiator)
    }

    /// The service's principal, its realm filled in as Kerberos reads it.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The name as Kerberos reads it: canonicalized for the mechanism (the
    /// default realm filled in), then displayed.
    fn display_name(&self) -> Option<String> {
        let mut minor = 0u32;
        let mut mechanism = Oid::of(KRB5_MECHANISM);
        let mut canonical: *mut c_void = std::ptr::null_mut();
        // SAFETY: `name` is a live name handle; the mechanism is only read;
        // `canonical` is an out-pointer to a live local, released below.
        let major = unsafe {
            (self.gss.canonicalize_name)(&mut minor, self.name, &mut mechanism, &mut canonical)
        };
        if major & ERROR_MASK != 0 {
            return None;
        }
        let mut out = Buffer::empty();
        // SAFETY: `canonical` is a live name handle; `out` a live local the
        // library fills, released by `take`.
        let major = unsafe {
            (self.gss.display_name)(&mut minor, canonical, &mut out, std::ptr::null_mut())
        };
        let shown = self.gss.take(&mut out);
        // SAFETY: the canonical name is this function's own, released once.
        unsafe { (self.gss.release_name)(&mut minor, &mut canonical) };
        (major & ERROR_MASK == 0).then(|| String::from_utf8_lossy(&shown).into_owned())
    }

    /// One step of setting the context up: the service's last token in (none
    /// at first), the token to send it out (empty when there is none).
    /// Mutual authentication, integrity and confidentiality are asked for.
    pub fn step(&mut self, token: Option<&[u8]>) -> Result<Vec<u8>, KerberosError> {
        let mut minor = 0u32;
        let mut mechanism = Oid::of(KRB5_MECHANISM);
        let mut input = token.map(Buffer::over);
        let input_ptr = input
            .as_mut()
            .map_or(std::ptr::null_mut(), |b| b as *mut Buffer);
        let mut output = Buffer::empty();
        let flags = GSS_C_MUTUAL_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_CONF_FLAG | GSS_C_INTEG_FLAG;
        // SAFETY: every pointer is to a live local or to this context's own
        // handles; the library only reads the input token and the mechanism;
        // the output token is released by `take`.
        let major = unsafe {
            (self.gss.init_sec_context)(
                &mut minor,
                std::ptr::null_mut(),
                &mut self.context,
                self.name,
                &mut mechanism,
                flags,
                0,
                std::ptr::null_mut(),
                input_ptr,
                std::ptr::null_mut(),
                &mut output,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let out = self.gss.take(&mut output);
        if major & ERROR_MASK != 0 {
            return Err(kerberos::diagnose_service(&self.url, major, minor));
        }
        self.established = major & GSS_S_CONTINUE_NEEDED == 0;
        Ok(out)
    }

    /// Whether the context is set up (the service proved who it is).
    pub fn is_established(&self) -> bool {
        self.established
    }

    /// `message` signed, and encrypted too when `confidential`.
    pub fn wrap(&self, message: &[u8], confidential: bool) -> Result<Vec<u8>, KerberosError> {
        let mut minor = 0u32;
        let mut input = Buffer::over(message);
        let mut output = Buffer::empty();
        let mut conf_state: c_int = 0;
        // SAFETY: an established context; live locals; the output is released by `take`.
        let major = unsafe {
            (self.gss.wrap)(
                &mut minor,
                self.context,
                c_int::from(confidential),
                0,
                &mut input,
                &mut conf_state,
                &mut output,
            )
        };
        let out = self.gss.take(&mut output);
        if major & ERROR_MASK != 0 {
            return Err(self.failed("protecting a message", major, minor));
        }
        if confidential && conf_state == 0 {
            return Err(KerberosError::Other {
                url: self.url.clone(),
                detail: "the security context offers no confidentiality".to_string(),
            });
        }
        Ok(out)
    }

    /// The message `token` carries, its signature checked (and decrypted when
    /// it was encrypted).
    pub fn unwrap(&self, token: &[u8]) -> Result<Vec<u8>, KerberosError> {
        let mut minor = 0u32;
        let mut input = Buffer::over(token);
        let mut output = Buffer::empty();
        let mut conf_state: c_int = 0;
        let mut qop = 0u32;
        // SAFETY: an established context; live locals; the output is released by `take`.
        let major = unsafe {
            (self.gss.unwrap)(
                &mut minor,
                self.context,
                &mut input,
                &mut output,
                &mut conf_state,
                &mut qop,
            )
        };
        let out = self.gss.take(&mut output);
        if major & ERROR_MASK != 0 {
            return Err(self.failed("reading a protected message", major, minor));
        }
        Ok(out)
    }

    fn failed(&self, doing: &str, major: u32, minor: u32) -> KerberosError {
        KerberosError::Other {
            url: self.url.clone(),
            detail: format!("{doing}: {}", kerberos::status_text(major, minor)),
        }
    }
}

impl Drop for Initiator {
    fn drop(&mut self) {
        let mut minor = 0u32;
        if !self.context.is_null() {
            // SAFETY: the context handle is this one's own, deleted once.
            unsafe {
                (self.gss.delete_sec_context)(&mut minor, &mut self.context, std::ptr::null_mut())
            };
        }
        if !self.name.is_null() {
            // SAFETY: the name handle is this one's own, released once.
            unsafe { (self.gss.release_name)(&mut minor, &mut self.name) };
        }
    }
}
