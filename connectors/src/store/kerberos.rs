//! Kerberos for the HDFS store: logging in from a keytab, and saying in one line
//! why a Kerberized namenode refused us.
//!
//! The HDFS client authenticates through MIT Kerberos' GSSAPI
//! (`libgssapi_krb5.so.2`, loaded at run time) with the process's default
//! credentials: the ticket cache `KRB5CCNAME` (what `kinit` fills), or, where
//! the credentials come from a Hadoop delegation token file,
//! `HADOOP_TOKEN_FILE_LOCATION`.
//!
//! # Keytab login and renewal
//! [`login_with_keytab`] copies the principal's keys out of the keytab into a
//! private directory and points MIT Kerberos at them as the *client keytab*
//! (`KRB5_CLIENT_KTNAME`), with a private, empty ticket cache (`KRB5CCNAME`):
//! GSSAPI then gets the first ticket from the keytab itself, and, because the
//! ticket came from a client keytab, gets a fresh one from it whenever a
//! credential is used past half its lifetime. Every new connection to a
//! namenode uses the credential, so a job that outlives its tickets keeps
//! authenticating without a renewal thread, a `kinit` binary or a second copy of
//! the keytab's secrets in memory. The login is checked at once (one initial
//! ticket), so a wrong realm or an unreachable KDC fails before any work starts.
//!
//! The environment is process-wide state, which only a process with a single
//! thread may change: the login is refused once other threads run (the CLI logs
//! in before it starts its runtime, for a job file too).

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};

pub use crate::error::{KerberosError, GSSAPI_LIBRARY};

/// The environment variable naming a Hadoop delegation token file.
pub const TOKEN_FILE_ENV: &str = "HADOOP_TOKEN_FILE_LOCATION";

/// A keytab login: the environment points MIT Kerberos at a private copy of the
/// principal's keys and a private ticket cache, both removed when this is dropped.
#[derive(Debug)]
pub struct KeytabLogin {
    /// The principal logged in.
    pub principal: String,
    _dir: tempfile::TempDir,
}

/// Logs in as `principal` with the keys `keytab` holds for it (see the module
/// documentation for how tickets are renewed). Sets `KRB5_CLIENT_KTNAME` and
/// `KRB5CCNAME` for this process: call it before other threads start (it fails
/// with [`KerberosError::ThreadsRunning`] otherwise, changing nothing).
pub fn login_with_keytab(keytab: &Path, principal: &str) -> Result<KeytabLogin, KerberosError> {
    let shown = keytab.display().to_string();
    let bytes = std::fs::read(keytab).map_err(|source| KerberosError::KeytabUnreadable {
        path: shown.clone(),
        cause: source,
    })?;
    let entries = keytab_entries(&bytes).map_err(|reason| KerberosError::KeytabInvalid {
        path: shown.clone(),
        reason,
    })?;
    let mine: Vec<&KeytabEntry> = entries.iter().filter(|e| e.is(principal)).collect();
    if mine.is_empty() {
        let mut holds: Vec<&str> = entries.iter().map(|e| e.principal.as_str()).collect();
        holds.dedup();
        return Err(KerberosError::PrincipalNotInKeytab {
            path: shown,
            principal: principal.to_string(),
            holds: if holds.is_empty() {
                "nothing".to_string()
            } else {
                holds.join(", ")
            },
        });
    }
    let dir = tempfile::Builder::new()
        .prefix("sluice-krb5-")
        .tempdir()
        .map_err(|source| KerberosError::Private {
            path: std::env::temp_dir().display().to_string(),
            cause: source,
        })?;
    let private = |source| KerberosError::Private {
        path: dir.path().display().to_string(),
        cause: source,
    };
    // Only this principal's keys: with an empty cache, MIT Kerberos logs in as
    // the first principal of the client keytab.
    let mut filtered = vec![0x05, 0x02];
    for entry in &mine {
        let record = &bytes[entry.record.clone()];
        filtered.extend_from_slice(&(record.len() as i32).to_be_bytes());
        filtered.extend_from_slice(record);
    }
    let client_keytab = dir.path().join("client.keytab");
    write_private(&client_keytab, &filtered).map_err(private)?;
    let ccache: PathBuf = dir.path().join("ccache");
    // Changing the environment is only sound while no other thread may read it.
    if let Some(threads) = threads().filter(|&n| n > 1) {
        return Err(KerberosError::ThreadsRunning { threads });
    }
    std::env::set_var(
        "KRB5_CLIENT_KTNAME",
        format!("FILE:{}", client_keytab.display()),
    );
    std::env::set_var("KRB5CCNAME", format!("FILE:{}", ccache.display()));
    let gss = gss::Gssapi::load().map_err(|_| KerberosError::LibraryMissing {
        url: "the keytab login".to_string(),
    })?;
    match gss.default_credential() {
        Ok(_) => Ok(KeytabLogin {
            principal: mine[0].principal.clone(),
            _dir: dir,
        }),
        Err(status) => Err(status.into_error(gss::Asked::Login(principal))),
    }
}

/// The threads of this process (Linux: the entries of `/proc/self/task`), where
/// they can be counted.
fn threads() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/task").ok()?.count())
}

/// Why the HDFS client's Kerberos authentication to `url` failed, asked of
/// MIT Kerberos itself (the client's own error keeps only the GSSAPI major
/// status). `detail` is the client's message, for failures Kerberos cannot
/// explain (a ticket that is valid, yet refused).
pub(crate) fn diagnose(url: &str, detail: &str) -> KerberosError {
    diagnose_credential(url, gss::Asked::Store(url), |_| KerberosError::Other {
        url: url.to_string(),
        detail: detail.to_string(),
    })
}

/// Why a GSSAPI security context with a service other than HDFS (`url`: a
/// Hive Metastore's `thrift://HOST:PORT`) could not be set up, the failed
/// call's status being `major` and `minor`: no ticket, an expired one, an
/// unreachable KDC (as for HDFS, without the delegation-token note), else
/// MIT's words for the status.
pub(crate) fn diagnose_service(url: &str, major: u32, minor: u32) -> KerberosError {
    diagnose_credential(url, gss::Asked::Catalog(url), |gss| {
        gss.status(major, minor)
            .into_error(gss::Asked::Service(url))
    })
}

/// What is wrong with this process's default credential for `url`: no
/// library, an expired ticket, what MIT says about the credential asked for
/// as `asked`, or, when it is valid, what `valid` makes of it.
fn diagnose_credential(
    url: &str,
    asked: gss::Asked<'_>,
    valid: impl FnOnce(&gss::Gssapi) -> KerberosError,
) -> KerberosError {
    let Ok(gss) = gss::Gssapi::load() else {
        return KerberosError::LibraryMissing {
            url: url.to_string(),
        };
    };
    match gss.default_credential() {
        Ok(0) => KerberosError::Expired {
            url: url.to_string(),
        },
        Ok(_) => valid(&gss),
        Err(status) => status.into_error(asked),
    }
}

/// MIT's words for a GSSAPI status (the mechanism's message when there is one).
pub(crate) fn status_text(major: u32, minor: u32) -> String {
    match gss::Gssapi::load() {
        Ok(gss) => gss.status(major, minor).text,
        Err(_) => format!("GSSAPI major status {major:#x}, minor {minor}"),
    }
}

/// ", and no usable delegation token ..." when a token file is configured.
fn token_note() -> String {
    match std::env::var(TOKEN_FILE_ENV) {
        Ok(path) if !path.is_empty() => {
            format!(", and no unexpired delegation token for it in {TOKEN_FILE_ENV}={path}")
        }
        _ => String::new(),
    }
}

/// Writes `bytes` to a new file only its owner can read.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// One key of a keytab: whose it is and where its record lies in the file.
#[derive(Debug)]
struct KeytabEntry {
    /// `name/instance@REALM`.
    principal: String,
    /// The record's bytes (after its length), to copy verbatim.
    record: std::ops::Range<usize>,
}

impl KeytabEntry {
    /// Whether this is a key of `principal` (`name@REALM`, or `name` in any realm).
    fn is(&self, principal: &str) -> bool {
        if principal.contains('@') {
            self.principal == principal
        } else {
            self.principal
                .rsplit_once('@')
                .is_some_and(|(name, _)| name == principal)
        }
    }
}

/// The keys of an MIT keytab (format 0x502: big-endian, counted strings).
fn keytab_entries(bytes: &[u8]) -> Result<Vec<KeytabEntry>, String> {
    if bytes.get(..2) != Some(&[0x05, 0x02][..]) {
        return Err("not an MIT keytab of version 0x502".to_string());
    }
    let mut entries = Vec::new();
    let mut at = 2;
    while at < bytes.len() {
        let size = read_u32(bytes, at)? as i32;
        at += 4;
        let len = size.unsigned_abs() as usize;
        let end = at
            .checked_add(len)
            .filter(|&end| end <= bytes.len())
            .ok_or("an entry runs past the end of the file")?;
        if size > 0 {
            entries.push(KeytabEntry {
                principal: entry_principal(&bytes[at..end])?,
                record: at..end,
            });
        }
        at = end;
    }
    Ok(entries)
}

/// The principal an entry record names: its components, then `@` and the realm.
fn entry_principal(record: &[u8]) -> Result<String, String> {
    let components = read_u16(record, 0)?;
    let mut at = 2;
    let string = |at: &mut usize| -> Result<String, String> {
        let len = read_u16(record, *at)? as usize;
        let text = record
            .get(*at + 2..*at + 2 + len)
            .ok_or("a name runs past its entry")?;
        *at += 2 + len;
        Ok(String::from_utf8_lossy(text).into_owned())
    };
    let realm = string(&mut at)?;
    let mut names = Vec::new();
    for _ in 0..components {
        names.push(string(&mut at)?);
    }
    Ok(format!("{}@{realm}", names.join("/")))
}

fn read_u16(bytes: &[u8], at: usize) -> Result<u16, String> {
    let b = bytes.get(at..at + 2).ok_or("truncated")?;
    Ok(u16::from_be_bytes([b[0], b[1]]))
}

fn read_u32(bytes: &[u8], at: usize) -> Result<u32, String> {
    let b = bytes.get(at..at + 4).ok_or("truncated")?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The few GSSAPI calls that tell why credentials are missing, through the same
/// library the HDFS client loads.
mod gss {
    use super::*;

    /// `gss_buffer_desc`.
    #[repr(C)]
    struct Buffer {
        length: usize,
        value: *mut c_void,
    }

    type AcquireCred = unsafe extern "C" fn(
        *mut u32,
        *mut c_void,
        u32,
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut *mut c_void,
        *mut u32,
    ) -> u32;
    type InquireCred = unsafe extern "C" fn(
        *mut u32,
        *mut c_void,
        *mut *mut c_void,
        *mut u32,
        *mut c_int,
        *mut *mut c_void,
    ) -> u32;
    type ReleaseCred = unsafe extern "C" fn(*mut u32, *mut *mut c_void) -> u32;
    type DisplayStatus =
        unsafe extern "C" fn(*mut u32, u32, c_int, *mut c_void, *mut u32, *mut Buffer) -> u32;
    type ReleaseBuffer = unsafe extern "C" fn(*mut u32, *mut Buffer) -> u32;

    const GSS_C_INITIATE: c_int = 1;
    const GSS_C_INDEFINITE: u32 = 0xffff_ffff;
    const GSS_C_GSS_CODE: c_int = 1;
    const GSS_C_MECH_CODE: c_int = 2;
    /// The routine-error bits of a major status.
    const ROUTINE_ERROR_MASK: u32 = 0xff << 16;
    const GSS_S_CREDENTIALS_EXPIRED: u32 = 11 << 16;

    // MIT krb5 error codes (com_err table krb5, base -1765328384).
    const KRB5KRB_AP_ERR_TKT_EXPIRED: i32 = -1765328352;
    const KRB5_REALM_UNKNOWN: i32 = -1765328230;
    const KRB5_KDC_UNREACH: i32 = -1765328228;
    const KRB5_REALM_CANT_RESOLVE: i32 = -1765328164;

    /// What the credential was for: a store's namenode, or a keytab login.
    pub(super) enum Asked<'a> {
        /// The `hdfs://authority` of a store.
        Store(&'a str),
        /// A principal logging in from its keytab.
        Login(&'a str),
        /// Another service (`thrift://`): no credential.
        Catalog(&'a str),
        /// Another service, whose security context failed with a credential.
        Service(&'a str),
    }

    /// A failed GSSAPI call: its status codes and MIT's words for them.
    pub(super) struct Status {
        major: u32,
        minor: i32,
        pub(super) text: String,
    }

    impl Status {
        /// The error this status means.
        pub(super) fn into_error(self, asked: Asked<'_>) -> KerberosError {
            // The note after "no Kerberos ticket for URL", where no ticket is the cause.
            let (url, no_ticket) = match asked {
                Asked::Store(url) => (url.to_string(), Some(token_note())),
                Asked::Catalog(url) => (url.to_string(), Some(String::new())),
                Asked::Login(url) | Asked::Service(url) => (url.to_string(), None),
            };
            if self.major & ROUTINE_ERROR_MASK == GSS_S_CREDENTIALS_EXPIRED
                || self.minor == KRB5KRB_AP_ERR_TKT_EXPIRED
            {
                return KerberosError::Expired { url };
            }
            match self.minor {
                KRB5_KDC_UNREACH | KRB5_REALM_UNKNOWN | KRB5_REALM_CANT_RESOLVE => {
                    KerberosError::Kdc {
                        what: format!(" for {url}"),
                        detail: self.text,
                    }
                }
                _ => match no_ticket {
                    Some(token) => KerberosError::NoTicket {
                        url,
                        token,
                        detail: self.text,
                    },
                    None => KerberosError::Other {
                        url,
                        detail: self.text,
                    },
                },
            }
        }
    }

    /// The loaded library and the functions used.
    pub(super) struct Gssapi {
        _library: libloading::Library,
        acquire_cred: AcquireCred,
        inquire_cred: InquireCred,
        release_cred: ReleaseCred,
        display_status: DisplayStatus,
        release_buffer: ReleaseBuffer,
    }

    impl Gssapi {
        /// Loads `libgssapi_krb5.so.2` as the HDFS client does.
        pub(super) fn load() -> Result<Gssapi, libloading::Error> {
            // SAFETY: loading MIT Kerberos runs only its initialisers, and every
            // symbol is given the type of its declaration in <gssapi/gssapi.h>.
            unsafe {
                let library = libloading::Library::new(GSSAPI_LIBRARY)?;
                let acquire_cred = *library.get::<AcquireCred>(b"gss_acquire_cred\0")?;
                let inquire_cred = *library.get::<InquireCred>(b"gss_inquire_cred\0")?;
                let release_cred = *library.get::<ReleaseCred>(b"gss_release_cred\0")?;
                let display_status = *library.get::<DisplayStatus>(b"gss_display_status\0")?;
                let release_buffer = *library.get::<ReleaseBuffer>(b"gss_release_buffer\0")?;
                Ok(Gssapi {
                    _library: library,
                    acquire_cred,
                    inquire_cred,
                    release_cred,
                    display_status,
                    release_buffer,
                })
            }
        }

        /// Acquires the default initiator credential (from the ticket cache, or
        /// logging in from the client keytab); its remaining lifetime in seconds,
        /// 0 when it has expired.
        pub(super) fn default_credential(&self) -> Result<u32, Status> {
            let mut minor = 0u32;
            let mut cred: *mut c_void = std::ptr::null_mut();
            // Asking for the lifetime makes MIT Kerberos get the ticket now (from
            // the client keytab, when the cache is empty) instead of at first use.
            let mut acquired_lifetime = 0u32;
            // SAFETY: out-pointers to live locals; null for the optional ones.
            let major = unsafe {
                (self.acquire_cred)(
                    &mut minor,
                    std::ptr::null_mut(),
                    GSS_C_INDEFINITE,
                    std::ptr::null_mut(),
                    GSS_C_INITIATE,
                    &mut cred,
                    std::ptr::null_mut(),
                    &mut acquired_lifetime,
                )
            };
            if major & ROUTINE_ERROR_MASK != 0 {
                return Err(self.status(major, minor));
            }
            let mut lifetime = 0u32;
            let mut minor = 0u32;
            // SAFETY: `cred` was returned by gss_acquire_cred and is released below.
            let major = unsafe {
                (self.inquire_cred)(
                    &mut minor,
                    cred,
                    std::ptr::null_mut(),
                    &mut lifetime,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            let mut ignored = 0u32;
            // SAFETY: as above; the handle is not used afterwards.
            unsafe { (self.release_cred)(&mut ignored, &mut cred) };
            if major & ROUTINE_ERROR_MASK == GSS_S_CREDENTIALS_EXPIRED {
                return Ok(0);
            }
            if major & ROUTINE_ERROR_MASK != 0 {
                return Err(self.status(major, minor));
            }
            Ok(lifetime)
        }

        /// MIT's words for a status: the mechanism's message when there is one.
        pub(super) fn status(&self, major: u32, minor: u32) -> Status {
            let mech = self.display(minor, GSS_C_MECH_CODE);
            // Minor codes outside krb5's tables print as "Success" or "Unknown error".
            let known = (minor as i32) < 0 && !mech.is_empty();
            let text = if !known {
                self.display(major, GSS_C_GSS_CODE)
            } else {
                mech
            };
            Status {
                major,
                minor: minor as i32,
                text,
            }
        }

        fn display(&self, code: u32, kind: c_int) -> String {
            let mut parts = Vec::new();
            let mut context = 0u32;
            loop {
                let mut minor = 0u32;
                let mut buffer = Buffer {
                    length: 0,
                    value: std::ptr::null_mut(),
                };
                // SAFETY: out-pointers to live locals; the buffer is released below.
                let major = unsafe {
                    (self.display_status)(
                        &mut minor,
                        code,
                        kind,
                        std::ptr::null_mut(),
                        &mut context,
                        &mut buffer,
                    )
                };
                if major != 0 {
                    break;
                }
                if !buffer.value.is_null() {
                    // SAFETY: the library wrote `length` bytes at `value`.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(buffer.value as *const u8, buffer.length)
                    };
                    parts.push(String::from_utf8_lossy(bytes).trim().to_string());
                    // SAFETY: a buffer the library allocated, released once.
                    unsafe { (self.release_buffer)(&mut minor, &mut buffer) };
                }
                if context == 0 || parts.len() > 8 {
                    break;
                }
            }
            parts.join("; ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A keytab of two entries, written as `ktutil` writes them.
    fn keytab(principals: &[(&[&str], &str)]) -> Vec<u8> {
        let mut out = vec![0x05, 0x02];
        for (names, realm) in principals {
            let mut record = Vec::new();
            record.extend_from_slice(&(names.len() as u16).to_be_bytes());
            for part in std::iter::once(realm).chain(names.iter()) {
                record.extend_from_slice(&(part.len() as u16).to_be_bytes());
                record.extend_from_slice(part.as_bytes());
            }
            record.extend_from_slice(&1u32.to_be_bytes()); // name type
            record.extend_from_slice(&0u32.to_be_bytes()); // timestamp
            record.push(1); // kvno
            record.extend_from_slice(&18u16.to_be_bytes()); // aes256
            record.extend_from_slice(&4u16.to_be_bytes());
            record.extend_from_slice(&[1, 2, 3, 4]);
            out.extend_from_slice(&(record.len() as i32).to_be_bytes());
            out.extend_from_slice(&record);
        }
        out
    }

    #[test]
    fn keytab_entries_name_their_principals() {
        let bytes = keytab(&[
            (&["hdfs", "localhost"], "EXAMPLE.COM"),
            (&["sluice"], "EXAMPLE.COM"),
        ]);
        let entries = keytab_entries(&bytes).expect("valid");
        let names: Vec<&str> = entries.iter().map(|e| e.principal.as_str()).collect();
        assert_eq!(names, ["hdfs/localhost@EXAMPLE.COM", "sluice@EXAMPLE.COM"]);
        assert!(entries[1].is("sluice"));
        assert!(entries[1].is("sluice@EXAMPLE.COM"));
        assert!(!entries[1].is("sluice@OTHER.ORG"));
        assert!(!entries[0].is("hdfs"));
    }

    #[test]
    fn truncated_or_foreign_files_are_not_keytabs() {
        let mut bytes = keytab(&[(&["sluice"], "EXAMPLE.COM")]);
        bytes.truncate(bytes.len() - 3);
        assert!(keytab_entries(&bytes).is_err());
        assert!(keytab_entries(b"[libdefaults]").is_err());
    }

    #[test]
    fn a_keytab_without_the_principal_names_what_it_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("other.keytab");
        std::fs::write(&path, keytab(&[(&["etl"], "EXAMPLE.COM")])).expect("write");
        let err = login_with_keytab(&path, "sluice@EXAMPLE.COM").expect_err("not in it");
        let text = err.to_string();
        assert!(
            text.contains("holds no key for principal sluice@EXAMPLE.COM")
                && text.contains("etl@EXAMPLE.COM"),
            "{text}"
        );
    }

    #[test]
    fn no_login_changes_the_environment_while_other_threads_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sluice.keytab");
        std::fs::write(&path, keytab(&[(&["sluice"], "EXAMPLE.COM")])).expect("write");
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || stopped.recv());
        let err = login_with_keytab(&path, "sluice@EXAMPLE.COM").expect_err("refused");
        drop(stop);
        let _ = other.join();
        assert!(
            matches!(err, KerberosError::ThreadsRunning { threads } if threads > 1),
            "{err}"
        );
        assert!(std::env::var_os("KRB5_CLIENT_KTNAME").is_none());
    }
}
