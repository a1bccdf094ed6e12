//! A host's canonical name: what its address is called by reverse lookup
//! (`getnameinfo`, glibc 2.17), as Java's `InetAddress.getCanonicalHostName`
//! and Hadoop's `_HOST` substitution name it.

use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};

/// The name `addr` resolves back to (`/etc/hosts`, DNS), lower-cased; `None`
/// when it has none.
pub fn canonical_name(addr: IpAddr) -> Option<String> {
    let socket = sockaddr_of(SocketAddr::new(addr, 0));
    let mut host = [0 as libc::c_char; 1025];
    // SAFETY: the address is a live local of the length given; `host` is a
    // live buffer of the length given, which getnameinfo NUL-terminates.
    let rc = unsafe {
        libc::getnameinfo(
            &socket.0 as *const libc::sockaddr_storage as *const libc::sockaddr,
            socket.1,
            host.as_mut_ptr(),
            host.len() as libc::socklen_t,
            std::ptr::null_mut(),
            0,
            libc::NI_NAMEREQD,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: getnameinfo succeeded, so `host` holds a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(host.as_ptr()) };
    let name = name
        .to_string_lossy()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

/// `addr` as a `sockaddr_storage` and its length.
fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            unsafe {
                std::ptr::write(
                    &mut storage as *mut libc::sockaddr_storage as *mut libc::sockaddr_in,
                    sin,
                )
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in6.
            unsafe {
                std::ptr::write(
                    &mut storage as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6,
                    sin6,
                )
            };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_address_is_called_localhost() {
        // /etc/hosts names 127.0.0.1 localhost on every Linux this runs on.
        let name = canonical_name(IpAddr::from([127, 0, 0, 1]));
        assert_eq!(name.as_deref(), Some("localhost"));
    }
}
