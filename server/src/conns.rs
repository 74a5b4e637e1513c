//! The connections `grantid serve` holds, and the rule that bounds them
//! (docs/SERVICE.md, "Connections").
//!
//! Every accepted TCP connection, plaintext or TLS, is registered here
//! before anything is read from it, and leaves when its stream is dropped.
//! A connection is **trusted** once a call on it passed the guard
//! (`auth::Guard`): with a token file, a call whose bearer token is one of
//! the file's; without one, any call.
//!
//! * Caps: connections held, connections of one peer (IP address), TLS
//!   handshakes in flight ([`ConnCaps`]).
//! * A connection not trusted within [`ConnCaps::first_call`] of its accept
//!   (the handshake included) is closed ([`Conns::sweep`]).
//! * At a cap, the oldest untrusted connection (of the peer, for the peer
//!   cap) is closed to make room: untrusted peers can never starve trusted
//!   ones. Only when everything the cap counts is trusted is the new
//!   connection refused.
//! * Closing is a flag and a wake-up: [`Held`], the stream every accepted
//!   socket is wrapped in, answers its next read and write with an error,
//!   so the connection's task (hyper's, or the handshake's) ends and drops
//!   the socket.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The bounds of [`Conns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnCaps {
    /// Connections held at once.
    pub connections: usize,
    /// Connections of one peer address held at once.
    pub per_peer: usize,
    /// TLS handshakes in flight at once.
    pub handshakes: usize,
    /// How long a new connection has to become trusted.
    pub first_call: Duration,
}

/// Why a connection was closed or refused: the `reason` label of the
/// metrics and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The cap on connections held.
    Connections,
    /// The cap on one peer's connections.
    Peer,
    /// The cap on handshakes in flight.
    Handshakes,
    /// No trusted call within the first-call timeout.
    NoCall,
}

impl Reason {
    pub fn label(self) -> &'static str {
        match self {
            Reason::Connections => "connections",
            Reason::Peer => "peer",
            Reason::Handshakes => "handshakes",
            Reason::NoCall => "no_call",
        }
    }
}

const HANDSHAKE: u8 = 0;
const OPEN: u8 = 1;
const TRUSTED: u8 = 2;

/// One accepted connection's state, shared by its stream, the registry and
/// the calls made on it (through [`ConnInfo`]).
#[derive(Debug)]
pub(crate) struct Conn {
    /// Accept order: the oldest connection has the lowest.
    id: u64,
    peer: IpAddr,
    accepted: Instant,
    stage: AtomicU8,
    /// Trusted once, until a token was revoked ([`Conns::distrust_all`]):
    /// not closed for its age.
    demoted: AtomicBool,
    killed: AtomicBool,
    /// The task that reads the connection, woken when it is killed.
    reader: AtomicWaker,
}

impl Conn {
    fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.reader.wake();
    }

    /// Whether the registry closed the connection.
    pub fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }
}

/// What the calls of a connection see of it (tonic's connect info, in each
/// request's extensions; it replaces tonic's `TcpConnectInfo`, so
/// `Request::remote_addr` is `None`).
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    conn: Arc<Conn>,
    conns: Arc<Conns>,
}

impl ConnInfo {
    /// Marks the connection trusted: it no longer times out and is never
    /// closed to make room.
    pub fn trust(&self) {
        if self.conn.stage.swap(TRUSTED, Ordering::AcqRel) != TRUSTED {
            self.conns.trusted(&self.conn);
        }
    }
}

/// Marks the connection of a call trusted (see [`ConnInfo::trust`]); a
/// request without connect info (an in-process call) has none to mark.
pub(crate) fn trust(extensions: &tonic::Extensions) {
    if let Some(info) = extensions.get::<ConnInfo>() {
        info.trust();
    }
}

/// The connections of one peer address.
#[derive(Debug, Default)]
struct Peer {
    held: usize,
    untrusted: BTreeSet<u64>,
}

/// What the registry's lock guards.
#[derive(Debug, Default)]
struct Registry {
    next: u64,
    /// Every connection held, by accept order.
    held: BTreeMap<u64, Arc<Conn>>,
    /// The ones not trusted yet, by accept order.
    untrusted: BTreeSet<u64>,
    /// The ones still in their TLS handshake, by accept order.
    handshaking: BTreeSet<u64>,
    peers: HashMap<IpAddr, Peer>,
}

impl Registry {
    /// Removes `id` from every index; false if it was not held.
    fn remove(&mut self, id: u64) -> bool {
        let Some(conn) = self.held.remove(&id) else {
            return false;
        };
        self.untrusted.remove(&id);
        self.handshaking.remove(&id);
        if let Some(peer) = self.peers.get_mut(&conn.peer) {
            peer.held -= 1;
            peer.untrusted.remove(&id);
            if peer.held == 0 {
                self.peers.remove(&conn.peer);
            }
        }
        crate::telemetry::connections_held(self.held.len());
        true
    }

    /// Closes `id` (if held) for `reason`.
    fn evict(&mut self, id: u64, reason: Reason) {
        if let Some(conn) = self.held.get(&id).cloned() {
            self.remove(id);
            conn.kill();
            closed(&conn, reason);
        }
    }

    fn peer_held(&self, peer: IpAddr) -> usize {
        self.peers.get(&peer).map_or(0, |p| p.held)
    }

    /// Makes room for one more connection of `peer` under `limits`:
    /// closes the oldest untrusted connection of the peer, then of all,
    /// where a cap is reached; `Err` names the cap that only trusted
    /// connections fill.
    fn make_room(&mut self, peer: IpAddr, limits: &ConnCaps) -> Result<(), Reason> {
        if self.peer_held(peer) >= limits.per_peer {
            let oldest = self.peers.get(&peer).and_then(|p| p.untrusted.first());
            let id = *oldest.ok_or(Reason::Peer)?;
            self.evict(id, Reason::Peer);
        }
        if self.held.len() >= limits.connections {
            let id = *self.untrusted.first().ok_or(Reason::Connections)?;
            self.evict(id, Reason::Connections);
        }
        Ok(())
    }
}

/// The registry of the connections one server holds.
#[derive(Debug)]
pub(crate) struct Conns {
    limits: ConnCaps,
    registry: Mutex<Registry>,
}

impl Conns {
    pub fn new(limits: ConnCaps) -> Conns {
        Conns {
            limits,
            registry: Mutex::new(Registry::default()),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // The registry's invariants hold between statements: a panic
        // elsewhere leaves it usable.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection of `peer` just accepted (`tls`: its handshake
    /// is to come), making room under the caps; `Err` is the cap that
    /// refuses it.
    pub fn admit(&self, peer: IpAddr, tls: bool) -> Result<Arc<Conn>, Reason> {
        let peer = peer.to_canonical();
        let mut r = self.registry();
        r.make_room(peer, &self.limits)?;
        r.next += 1;
        let conn = Arc::new(Conn {
            id: r.next,
            peer,
            accepted: Instant::now(),
            stage: AtomicU8::new(if tls { HANDSHAKE } else { OPEN }),
            demoted: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            reader: AtomicWaker::new(),
        });
        r.held.insert(conn.id, Arc::clone(&conn));
        r.untrusted.insert(conn.id);
        let entry = r.peers.entry(peer).or_default();
        entry.held += 1;
        entry.untrusted.insert(conn.id);
        if tls {
            r.handshaking.insert(conn.id);
        }
        crate::telemetry::connections_held(r.held.len());
        Ok(conn)
    }

    /// Takes a slot for `conn`'s handshake: at the cap, the oldest
    /// handshake in flight is closed.
    pub fn handshake_slot(&self, conn: &Conn) {
        let mut r = self.registry();
        while r.handshaking.len() > self.limits.handshakes {
            match r.handshaking.first().copied() {
                Some(id) if id != conn.id => r.evict(id, Reason::Handshakes),
                _ => break,
            }
        }
    }

    /// `conn`'s handshake is done.
    pub fn handshaken(&self, conn: &Conn) {
        let _ = conn
            .stage
            .compare_exchange(HANDSHAKE, OPEN, Ordering::AcqRel, Ordering::Acquire);
        self.registry().handshaking.remove(&conn.id);
    }

    fn trusted(&self, conn: &Conn) {
        let mut r = self.registry();
        r.untrusted.remove(&conn.id);
        r.handshaking.remove(&conn.id);
        if let Some(peer) = r.peers.get_mut(&conn.peer) {
            peer.untrusted.remove(&conn.id);
        }
    }

    fn release(&self, conn: &Conn) {
        self.registry().remove(conn.id);
    }

    /// Trusts no connection any more (a token was revoked, and the calls
    /// that made a connection trusted may have carried it): at a cap, each
    /// is closed to make room as the oldest untrusted ones are, until a
    /// call with a valid token trusts it again; none is closed for its age.
    /// Returns how many were trusted.
    pub fn distrust_all(&self) -> usize {
        let mut r = self.registry();
        let trusted: Vec<(u64, IpAddr)> = r
            .held
            .values()
            .filter(|c| c.stage.load(Ordering::Acquire) == TRUSTED)
            .map(|c| {
                c.demoted.store(true, Ordering::Release);
                c.stage.store(OPEN, Ordering::Release);
                (c.id, c.peer)
            })
            .collect();
        for &(id, peer) in &trusted {
            r.untrusted.insert(id);
            if let Some(p) = r.peers.get_mut(&peer) {
                p.untrusted.insert(id);
            }
        }
        trusted.len()
    }

    /// Closes the connections not trusted within the first-call timeout;
    /// returns how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut r = self.registry();
        let mut due = Vec::new();
        for &id in &r.untrusted {
            match r.held.get(&id) {
                Some(c) if c.demoted.load(Ordering::Acquire) => continue,
                Some(c) if now.duration_since(c.accepted) < self.limits.first_call => break,
                _ => due.push(id),
            }
        }
        for &id in &due {
            r.evict(id, Reason::NoCall);
        }
        due.len()
    }

    /// How many connections are held.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.registry().held.len()
    }
}

/// Counts and logs (at debug: a flood would fill the log) a connection
/// closed by the server.
fn closed(conn: &Conn, reason: Reason) {
    crate::telemetry::connection_closed(reason.label());
    log::debug!(
        target: "grantid_server",
        "event=connection_closed peer={} reason={} age_ms={}",
        conn.peer, reason.label(), conn.accepted.elapsed().as_millis()
    );
}

/// How often [`Conns::sweep`] runs: a connection lives at most this much
/// past its first-call timeout.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// Sweeps `conns` every [`SWEEP_INTERVAL`], for ever (aborted with the
/// server).
pub(crate) async fn sweep_loop(conns: Arc<Conns>) {
    let mut tick = tokio::time::interval(SWEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        conns.sweep(Instant::now());
    }
}

/// An accepted socket, registered in [`Conns`]: fails its reads and writes
/// once the registry closed it, and leaves the registry when dropped.
#[derive(Debug)]
pub(crate) struct Held<S> {
    io: S,
    info: ConnInfo,
}

impl<S> Held<S> {
    pub fn new(io: S, conn: Arc<Conn>, conns: Arc<Conns>) -> Held<S> {
        Held {
            io,
            info: ConnInfo { conn, conns },
        }
    }

    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    pub fn conn(&self) -> &Arc<Conn> {
        &self.info.conn
    }

    #[cfg(test)]
    fn killed(&self) -> bool {
        self.info.conn.killed()
    }

    /// `Err` once closed by the registry.
    fn alive(&self) -> io::Result<()> {
        if self.info.conn.killed() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed by the server (docs/SERVICE.md, Connections)",
            ));
        }
        Ok(())
    }
}

impl<S> Drop for Held<S> {
    fn drop(&mut self) {
        self.info.conns.release(&self.info.conn);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Held<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Registered before the flag is read: a kill in between wakes.
        self.info.conn.reader.register(cx.waker());
        self.alive()?;
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Held<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.alive()?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.alive()?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    fn conns(connections: usize, per_peer: usize) -> Arc<Conns> {
        Arc::new(Conns::new(ConnCaps {
            connections,
            per_peer,
            handshakes: 2,
            first_call: Duration::from_secs(5),
        }))
    }

    fn held(conns: &Arc<Conns>, peer: IpAddr) -> Result<Held<()>, Reason> {
        let conn = conns.admit(peer, false)?;
        Ok(Held::new((), conn, Arc::clone(conns)))
    }

    #[test]
    fn at_the_cap_the_oldest_untrusted_connection_makes_room() {
        let c = conns(3, 3);
        let (a1, a2, b1) = (
            held(&c, A).unwrap(),
            held(&c, A).unwrap(),
            held(&c, B).unwrap(),
        );
        a1.info().trust();
        let b2 = held(&c, B).unwrap();
        assert!(!a1.killed() && a2.killed() && !b1.killed() && !b2.killed());
        assert_eq!(c.held(), 3);
        b1.info().trust();
        b2.info().trust();
        // Everything held is trusted: the new one is refused.
        assert_eq!(held(&c, A).unwrap_err(), Reason::Connections);
        drop(b2);
        assert_eq!(c.held(), 2);
        held(&c, A).unwrap();
    }

    #[test]
    fn a_peer_at_its_cap_makes_room_from_its_own_connections() {
        let c = conns(10, 2);
        let b = held(&c, B).unwrap();
        let (a1, a2) = (held(&c, A).unwrap(), held(&c, A).unwrap());
        let a3 = held(&c, A).unwrap();
        assert!(a1.killed() && !a2.killed() && !a3.killed() && !b.killed());
        a2.info().trust();
        a3.info().trust();
        assert_eq!(held(&c, A).unwrap_err(), Reason::Peer);
        // An IPv4-mapped IPv6 address is the same peer.
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        assert_eq!(held(&c, mapped).unwrap_err(), Reason::Peer);
        held(&c, B).unwrap();
    }

    /// A revoked token's connections stay open but hold no place: the
    /// next connection at the cap closes the oldest of them.
    #[test]
    fn distrusted_connections_make_room_and_are_not_swept() {
        let conns = conns(2, 2);
        let a = A;
        let (a1, a2) = (held(&conns, a).unwrap(), held(&conns, a).unwrap());
        a1.info().trust();
        a2.info().trust();
        assert_eq!(held(&conns, a).err(), Some(Reason::Peer));
        assert_eq!(conns.distrust_all(), 2);
        let later = Instant::now() + Duration::from_secs(3_600);
        assert_eq!(conns.sweep(later), 0, "swept for their age");
        let a3 = held(&conns, a).unwrap();
        assert!(a1.killed() && !a2.killed());
        // Trusted again by a valid call: it keeps its place.
        a2.info().trust();
        a3.info().trust();
        assert_eq!(held(&conns, a).err(), Some(Reason::Peer));
    }

    #[test]
    fn connections_not_trusted_in_time_are_swept() {
        let c = conns(10, 10);
        let (a, b) = (held(&c, A).unwrap(), held(&c, B).unwrap());
        b.info().trust();
        let t0 = a.conn().accepted;
        assert_eq!(c.sweep(t0 + Duration::from_secs(4)), 0);
        assert_eq!(c.sweep(t0 + Duration::from_secs(6)), 1);
        assert!(a.killed() && !b.killed());
        assert_eq!(c.held(), 1);
    }

    #[test]
    fn the_oldest_handshake_gives_its_slot() {
        let c = conns(10, 10);
        let tls = |c: &Arc<Conns>| {
            let conn = c.admit(A, true).unwrap();
            c.handshake_slot(&conn);
            Held::new((), conn, Arc::clone(c))
        };
        let (h1, h2) = (tls(&c), tls(&c));
        c.handshaken(h2.conn());
        let (h3, h4) = (tls(&c), tls(&c));
        assert!(h1.killed() && !h2.killed() && !h3.killed() && !h4.killed());
    }

    #[test]
    fn a_killed_stream_fails_its_reads() {
        let c = conns(1, 1);
        let first = held(&c, A).unwrap();
        let _second = held(&c, B).unwrap();
        assert_eq!(
            first.alive().unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
    }
}
