//! The test harness's own checks.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;

/// A socket bound to `port` and connected to `port` on 127.0.0.1, with
/// nothing listening: Linux connects it to itself (what a readiness loop
/// meets when the ephemeral source port it draws is the one it asks).
fn self_connected(port: u16) -> std::io::Result<TcpStream> {
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns; `addr`
    // is a valid sockaddr_in of `len` bytes.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let sa = (&raw const addr).cast::<libc::sockaddr>();
        if libc::bind(fd, sa, len) != 0 || libc::connect(fd, sa, len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

#[test]
fn a_socket_connected_to_itself_is_no_server() {
    let port = common::free_port();
    let stream = self_connected(port).expect("a self-connected socket");
    // The connection succeeded with nothing listening on `port`.
    assert_eq!(
        stream.peer_addr().unwrap(),
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into()
    );
    assert!(!common::is_a_server(&stream));
    // A listener is one.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(common::listening(listener.local_addr().unwrap().port()));
}
