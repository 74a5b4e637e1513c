//! The accept loop of `grantid serve`, plaintext and TLS alike: every
//! socket is admitted by [`Conns`] (or refused) before anything is read
//! from it, wrapped in [`Held`], handshaken on a task of its own when the
//! server serves TLS, then handed to tonic. Also the open-files limit the
//! connection cap is derived from (docs/SERVICE.md, "Connections").

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grantid::{Error, ErrorKind};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

use crate::conns::{ConnCaps, ConnInfo, Conns, Held, Reason};
use crate::secure::Tls;

/// Accepted connections waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 128;
/// Pause after a failed accept (out of file descriptors and the like).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// Least time between two warnings about refused connections.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// File descriptors the default connection cap leaves to the rest of the
/// server: the authority's sessions (at most 65 sockets), the files the
/// file authority and the reloads read, the metrics listener and its
/// scrapes, the runtime's own, and the sockets of connections closed but
/// not yet dropped.
pub const RESERVED_FDS: u64 = 256;
/// Most connections the default cap allows, whatever the open-files limit:
/// an idle TLS connection holds about 60 KiB of buffers (measured with
/// 1,000 of them), so 10,000 hold about 600 MiB.
pub const MAX_DEFAULT_CONNECTIONS: usize = 10_000;
/// How long a new connection has to make a call (with `--token-file`, an
/// authenticated one), its TLS handshake included.
pub const FIRST_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection tonic serves, of either kind.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    fn info(&self) -> ConnInfo;
}

impl Io for Held<TcpStream> {
    fn info(&self) -> ConnInfo {
        Held::info(self).clone()
    }
}

impl Io for TlsStream<Held<TcpStream>> {
    fn info(&self) -> ConnInfo {
        self.get_ref().0.info().clone()
    }
}

impl Connected for Box<dyn Io> {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info()
    }
}

/// The soft limit on open files now in force (`None`: unlimited).
fn open_files() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the soft limit on open files to the hard one, and logs both.
pub(crate) fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let was = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: was.maximum,
        maximum: was.maximum,
    };
    let shown = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    if was.current != was.maximum
        && let Err(e) = setrlimit(Resource::Nofile, raised)
    {
        log::warn!(
            target: "grantid_server",
            "event=open_files_limit soft={} hard={} error=\"cannot raise the soft limit: {e}\"",
            shown(was.current), shown(was.maximum)
        );
        return;
    }
    log::info!(
        target: "grantid_server",
        "event=open_files_limit soft={} hard={} was={}",
        shown(open_files()), shown(was.maximum), shown(was.current)
    );
}

/// The connection cap for an open-files limit of `open_files`: the limit
/// less [`RESERVED_FDS`] (half the limit when that leaves less than half),
/// at most [`MAX_DEFAULT_CONNECTIONS`].
fn default_connections(open_files: Option<u64>) -> usize {
    let Some(n) = open_files else {
        return MAX_DEFAULT_CONNECTIONS;
    };
    let cap = if n > 2 * RESERVED_FDS {
        n - RESERVED_FDS
    } else {
        n / 2
    };
    usize::try_from(cap)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_DEFAULT_CONNECTIONS)
}

/// The connection caps of a server: `connections` and `per_peer` as configured
/// (`None`: derived from the open-files limit, and half of the cap),
/// handshakes in flight at most half the cap.
pub(crate) fn conn_caps(
    connections: Option<usize>,
    per_peer: Option<usize>,
    first_call: Duration,
) -> Result<ConnCaps, Error> {
    let invalid = |why: &str| Err(Error::new(ErrorKind::InvalidArgument, why.to_owned()));
    if connections == Some(0) {
        return invalid("--max-connections must be at least 1");
    }
    if per_peer == Some(0) {
        return invalid("--max-connections-per-peer must be at least 1");
    }
    if first_call.is_zero() {
        return invalid("--first-call-timeout-ms must be at least 1");
    }
    let connections = connections.unwrap_or_else(|| default_connections(open_files()));
    Ok(ConnCaps {
        connections,
        per_peer: per_peer.unwrap_or(connections.div_ceil(2)).min(connections),
        handshakes: connections.div_ceil(2),
        first_call,
    })
}

/// The connections of `listener` (TLS ones handshaken with `tls`), for
/// tonic's `serve_with_incoming_shutdown`. The listener closes when the
/// stream is dropped (tonic drops it when the drain begins).
pub(crate) fn incoming(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    conns: Arc<Conns>,
    keepalive: Duration,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Box<dyn Io>>> {
    let (tx, rx) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(accept_loop(listener, tls, conns, keepalive, tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

type Sender = mpsc::Sender<io::Result<Box<dyn Io>>>;

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<Tls>>,
    conns: Arc<Conns>,
    keepalive: Duration,
    tx: Sender,
) {
    let mut refusals = Refusals::default();
    loop {
        let accepted = tokio::select! {
            _ = tx.closed() => return,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                log::warn!(target: "grantid_server", "event=accept_failed error={e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let conn = match conns.admit(peer.ip(), tls.is_some()) {
            Ok(conn) => conn,
            Err(reason) => {
                // Dropped: closed at once, before any byte is read.
                refusals.count(peer, reason);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&tcp)
            .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(keepalive));
        let held = Held::new(tcp, conn, Arc::clone(&conns));
        match &tls {
            None => {
                let _ = tx.send(Ok(Box::new(held))).await;
            }
            Some(tls) => {
                conns.handshake_slot(held.conn());
                tokio::spawn(handshake(
                    tls.acceptor(),
                    held,
                    peer,
                    Arc::clone(&conns),
                    tx.clone(),
                ));
            }
        }
    }
}

/// Runs `held`'s TLS handshake and hands the connection to the server;
/// no timeout of its own: the first-call timeout covers the handshake.
async fn handshake(
    acceptor: tokio_rustls::TlsAcceptor,
    held: Held<TcpStream>,
    peer: SocketAddr,
    conns: Arc<Conns>,
    tx: Sender,
) {
    let conn = Arc::clone(held.conn());
    match acceptor.accept(held).await {
        Ok(stream) => {
            conns.handshaken(&conn);
            let _ = tx.send(Ok(Box::new(stream))).await;
        }
        // Closed by the registry: counted there.
        Err(_) if conn.killed() => {}
        Err(e) => crate::secure::refused(peer, &e.to_string()),
    }
}

/// Counts connections refused at accept, and warns of them at most every
/// [`WARNING_INTERVAL`] (a flood would fill the log).
#[derive(Debug, Default)]
struct Refusals {
    unreported: u64,
    next_warning: Option<Instant>,
}

impl Refusals {
    fn count(&mut self, peer: SocketAddr, reason: Reason) {
        crate::telemetry::connection_refused(reason.label());
        self.unreported += 1;
        let now = Instant::now();
        if self.next_warning.is_some_and(|t| now < t) {
            return;
        }
        log::warn!(
            target: "grantid_server",
            "event=connection_refused peer={peer} reason={} refused={} note=\"every connection \
             the cap counts is authenticated: raise the cap (docs/SERVICE.md, Connections)\"",
            reason.label(), self.unreported
        );
        self.unreported = 0;
        self.next_warning = Some(now + WARNING_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_a_reserve() {
        assert_eq!(default_connections(Some(1024)), 768);
        assert_eq!(default_connections(Some(256)), 128);
        assert_eq!(default_connections(Some(1)), 1);
        assert_eq!(default_connections(Some(1 << 20)), MAX_DEFAULT_CONNECTIONS);
        assert_eq!(default_connections(None), MAX_DEFAULT_CONNECTIONS);
    }

    #[test]
    fn caps_follow_the_open_files_cap() {
        let l = conn_caps(Some(100), None, FIRST_CALL_TIMEOUT).unwrap();
        assert_eq!((l.connections, l.per_peer, l.handshakes), (100, 50, 50));
        let l = conn_caps(Some(10), Some(50), FIRST_CALL_TIMEOUT).unwrap();
        assert_eq!(l.per_peer, 10);
        for (c, p, t) in [
            (Some(0), None, FIRST_CALL_TIMEOUT),
            (None, Some(0), FIRST_CALL_TIMEOUT),
            (None, None, Duration::ZERO),
        ] {
            let e = conn_caps(c, p, t).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
    }
}
