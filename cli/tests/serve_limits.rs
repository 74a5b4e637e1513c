//! `grantid serve` under connections that hold resources without calling
//! (docs/SERVICE.md, "Connections") and token files that revoke
//! ("TLS, mTLS and tokens"): each test runs a real server process and
//! reaches it with raw sockets, raw HTTP/2 frames or the `grpc://` and
//! `grpcs://` authority clients.

mod common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{BIN, Ca, free_port, put, scratch, serve};
use grantid::{ErrorKind, GrantRequest, GrantSource, Layout};

const TOKEN: &str = "limits-token-0123456789abcdef";
const LEAKED: &str = "leaked-token-0123456789abcdef";
/// The server's first-call timeout (its default) and the sweep's lag.
const FIRST_CALL: Duration = Duration::from_millis(5_250);
/// What a test allows past [`FIRST_CALL`] on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);

/// Stops the server (also when the test fails) and removes its directory.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

fn file_authority(dir: &Path) -> String {
    format!("file:{}", dir.join("state.json").display())
}

/// A plaintext server with `args`.
fn plain_server(name: &str, args: &[&str]) -> (Server, u16) {
    let dir = scratch(name);
    let port = free_port();
    let child = serve(&dir, port, &file_authority(&dir), args);
    (Server { child, dir }, port)
}

/// A TLS server for 127.0.0.1 with the token file `tokens` (TOKEN alone,
/// every namespace, unless `tokens` says otherwise), and the CA's PEM.
struct TlsSetup {
    dir: PathBuf,
    ca: String,
    args: Vec<String>,
    tokens: PathBuf,
}

fn tls_setup(name: &str, tokens: &str) -> TlsSetup {
    let dir = scratch(name);
    let ca = Ca::new("grantid limits CA");
    let (cert, key) = ca.issue(&dir, "server", &["127.0.0.1"]);
    let tokens = put(&dir, "tokens", tokens);
    let path = |p: &Path| p.display().to_string();
    let args = ["--tls-cert", &path(&cert), "--tls-key", &path(&key)]
        .into_iter()
        .map(str::to_owned)
        .chain(["--token-file".to_owned(), path(&tokens)])
        .collect();
    TlsSetup {
        ca: ca.pem.clone(),
        dir,
        args,
        tokens,
    }
}

impl TlsSetup {
    /// The server, as [`serve`] starts it.
    fn start(self) -> (Server, u16, String, PathBuf) {
        let port = free_port();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let child = serve(&self.dir, port, &file_authority(&self.dir), &args);
        (
            Server {
                child,
                dir: self.dir,
            },
            port,
            self.ca,
            self.tokens,
        )
    }
}

/// The `grpcs://` URL of the server on `port` with the token `token`.
fn grpcs(dir: &Path, port: u16, ca: &str, token: &str) -> String {
    let ca_pem = put(dir, "ca.pem", ca);
    let token_file = put(dir, &format!("{}.token", &token[..6]), token);
    format!(
        "grpcs://127.0.0.1:{port}?timeout_ms=3000&tls_ca={}&token_file={}",
        ca_pem.display(),
        token_file.display()
    )
}

/// A call with the token of `url`: `GrantService.Status` of the server's
/// own namespace.
fn call(url: &str) -> Result<Vec<grantid_authority::WorkerStatus>, grantid::Error> {
    grantid_authority::open(url)?.status(Some("server-own"))
}

/// A rustls client trusting `ca`, ALPN `h2`.
fn tls_client(ca: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TCP connection to `port` and its TLS handshake, done.
fn handshaken(port: u16, config: &Arc<rustls::ClientConfig>) -> io::Result<Tls> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port))?;
    tcp.set_read_timeout(Some(Duration::from_secs(3)))?;
    let name = "127.0.0.1".try_into().unwrap();
    let mut tls =
        rustls::ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    Ok(rustls::StreamOwned::new(tls, tcp))
}

// ------------------------------------------------------- raw HTTP/2

/// HTTP/2 (RFC 9113) spoken by hand: frames, and header blocks of HPACK
/// literals (RFC 7541, 6.2.2: without indexing, new name, no Huffman).
mod h2 {
    use std::io::{self, Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const ACK: u8 = 0x1;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const REFUSED_STREAM: u32 = 0x7;

    #[derive(Debug)]
    pub struct Frame {
        pub kind: u8,
        pub flags: u8,
        pub payload: Vec<u8>,
    }

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// The header block of a gRPC call of `path`, with `more` fields.
    pub fn call(path: &str, more: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        let fields = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        for (name, value) in fields.iter().chain(more) {
            block.push(0x00);
            for s in [name, value] {
                assert!(s.len() < 127);
                block.push(s.len() as u8);
                block.extend(s.as_bytes());
            }
        }
        block
    }

    /// A settings parameter's value in a SETTINGS frame.
    pub fn setting(f: &Frame, id: u16) -> Option<u32> {
        f.payload.chunks(6).find_map(|p| {
            (u16::from_be_bytes([p[0], p[1]]) == id)
                .then(|| u32::from_be_bytes([p[2], p[3], p[4], p[5]]))
        })
    }

    /// One HTTP/2 connection over `io` (plaintext or TLS), read through a
    /// buffer so that a read timeout never cuts a frame.
    pub struct Conn<S> {
        pub io: S,
        tcp: TcpStream,
        buf: Vec<u8>,
    }

    impl<S: Read + Write> Conn<S> {
        pub fn new(io: S, tcp: &TcpStream) -> Conn<S> {
            Conn {
                io,
                tcp: tcp.try_clone().unwrap(),
                buf: Vec::new(),
            }
        }

        pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
            self.io.write_all(bytes)?;
            self.io.flush()
        }

        /// The preface and empty SETTINGS; the server's SETTINGS, acked.
        pub fn start(&mut self) -> io::Result<Frame> {
            self.send(PREFACE)?;
            self.send(&frame(SETTINGS, 0, 0, &[]))?;
            loop {
                let f = self.next(Duration::from_secs(5))?;
                if let Some(f) = f
                    && f.kind == SETTINGS
                    && f.flags & ACK == 0
                {
                    self.send(&frame(SETTINGS, ACK, 0, &[]))?;
                    return Ok(f);
                }
            }
        }

        /// The next frame within `wait`; `Ok(None)` if none came;
        /// `UnexpectedEof` once the server closed the connection.
        pub fn next(&mut self, wait: Duration) -> io::Result<Option<Frame>> {
            loop {
                if self.buf.len() >= 9 {
                    let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]);
                    let end = 9 + len as usize;
                    if self.buf.len() >= end {
                        let f = Frame {
                            kind: self.buf[3],
                            flags: self.buf[4],
                            payload: self.buf[9..end].to_vec(),
                        };
                        self.buf.drain(..end);
                        return Ok(Some(f));
                    }
                }
                self.tcp.set_read_timeout(Some(wait))?;
                let mut chunk = [0u8; 16 * 1024];
                match self.io.read(&mut chunk) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => self.buf.extend(&chunk[..n]),
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                }
            }
        }

        /// Reads until the server closes the connection, at most `bound`;
        /// true if it did.
        pub fn closed_within(&mut self, bound: Duration) -> bool {
            let deadline = std::time::Instant::now() + bound;
            while std::time::Instant::now() < deadline {
                if self.next(Duration::from_millis(200)).is_err() {
                    return true;
                }
            }
            false
        }

        /// Whether the server answers a PING.
        pub fn answers_ping(&mut self) -> bool {
            if self.send(&frame(PING, 0, 0, b"grantid!")).is_err() {
                return false;
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(3);
            while std::time::Instant::now() < deadline {
                match self.next(Duration::from_millis(200)) {
                    Ok(Some(f)) if f.kind == PING && f.flags & ACK != 0 => return true,
                    Ok(_) => {}
                    Err(_) => return false,
                }
            }
            false
        }
    }
}

/// A plaintext HTTP/2 connection to `port`, started.
fn plain_h2(port: u16) -> (h2::Conn<TcpStream>, h2::Frame) {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut conn = h2::Conn::new(tcp.try_clone().unwrap(), &tcp);
    let settings = conn.start().unwrap();
    (conn, settings)
}

/// A TLS HTTP/2 connection to `port`, started.
fn tls_h2(port: u16, config: &Arc<rustls::ClientConfig>) -> h2::Conn<Tls> {
    let tls = handshaken(port, config).unwrap();
    let tcp = tls.sock.try_clone().unwrap();
    let mut conn = h2::Conn::new(tls, &tcp);
    conn.start().unwrap();
    conn
}

/// A unary call of `path` with an empty message on stream `id`, the
/// `authorization` metadata `bearer` when given.
fn unary(conn: &mut h2::Conn<impl Read + Write>, id: u32, path: &str, bearer: Option<&str>) {
    let auth = bearer.map(|t| format!("Bearer {t}"));
    let more: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    let block = h2::call(path, &more);
    conn.send(&h2::frame(h2::HEADERS, h2::END_HEADERS, id, &block))
        .unwrap();
    conn.send(&h2::frame(h2::DATA, h2::END_STREAM, id, &[0; 5]))
        .unwrap();
}

// ------------------------------------------------------------ tests

/// With the server at 1,024 open files (soft and hard), 1,012 TLS
/// connections that finish their handshake and then send nothing take
/// no file the server needs: a token holder's 3 calls succeed, and the
/// server's own generator keeps renewing (the high-water mark of its
/// worker moves on; no "Too many open files" in its log).
#[test]
fn idle_tls_connections_leave_room_for_a_token_holder() {
    let setup = tls_setup("limits-idle-tls", &format!("{TOKEN}\n"));
    let port = free_port();
    let log = std::fs::File::create(setup.dir.join("server.log")).unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--authority", &file_authority(&setup.dir)])
        .args(["--namespace", "server-own"])
        .args(&setup.args)
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: runs in the child between fork and exec; setrlimit is
    // async-signal-safe and the closure allocates nothing.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(io::Error::last_os_error()),
            }
        });
    }
    let server = Server {
        child: command.spawn().unwrap(),
        dir: setup.dir.clone(),
    };
    let url = grpcs(&setup.dir, port, &setup.ca, TOKEN);
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(&url).map_or(true, |w| w.is_empty()) {
        assert!(Instant::now() < deadline, "no answer: {}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    let config = tls_client(&setup.ca);
    let idle: Vec<Tls> = (0..1_012)
        .filter_map(|_| handshaken(port, &config).ok())
        .collect();
    assert!(idle.len() >= 1_000, "{} handshakes of 1,012", idle.len());
    let mut marks = Vec::new();
    for _ in 0..3 {
        let workers = call(&url).unwrap_or_else(|e| panic!("a token holder's call: {e}"));
        marks.push(workers.iter().map(|w| w.high_water).max().unwrap());
        std::thread::sleep(Duration::from_millis(1_500));
    }
    assert!(marks[2] > marks[0], "no renewal: {marks:?}");
    let log = server.log();
    assert!(
        log.contains("event=open_files_limit soft=1024 hard=1024"),
        "{log}"
    );
    assert!(!log.contains("Too many open files"), "{log}");
    drop(idle);
}

/// With a token file, a connection is closed within the first-call
/// timeout when it makes no call (preface and SETTINGS only) or only
/// calls with a token the file does not hold; one that made an
/// authenticated call stays.
#[test]
fn http2_connections_without_an_authenticated_call_are_closed() {
    let (server, port, ca, _) = tls_setup("limits-idle-h2", &format!("{TOKEN}\n")).start();
    let config = tls_client(&ca);
    let limits = "/grantid.v1.GrantService/Limits";
    let started = Instant::now();
    let mut silent = tls_h2(port, &config);
    let mut stranger = tls_h2(port, &config);
    unary(&mut stranger, 1, limits, Some(LEAKED));
    let mut member = tls_h2(port, &config);
    unary(&mut member, 1, limits, Some(TOKEN));
    assert!(
        silent.closed_within(FIRST_CALL + SLACK),
        "a silent connection stayed"
    );
    assert!(
        stranger.closed_within(FIRST_CALL + SLACK),
        "an unknown token's connection stayed"
    );
    assert!(started.elapsed() >= FIRST_CALL - Duration::from_millis(500));
    assert!(
        member.answers_ping(),
        "the token holder's connection was closed"
    );
    drop(server);
}

/// A client that sends the HTTP/2 preface a byte a second is closed
/// within the first-call timeout (plaintext, no token file).
#[test]
fn a_slow_http2_preface_is_closed() {
    let (server, port) = plain_server("limits-slow", &[]);
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let started = Instant::now();
    let mut closed = None;
    for byte in h2::PREFACE.iter().cycle().take(20) {
        let mut buf = [0u8; 64];
        let gone = match tcp.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        };
        if gone || tcp.write_all(&[*byte]).is_err() {
            closed = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let closed = closed.expect("a byte a second kept the connection for 20 s");
    assert!(closed <= FIRST_CALL + SLACK, "closed after {closed:?}");
    drop(server);
}

/// 5,000 calls opened at once on one connection: the server allows 200
/// (its SETTINGS say so), refuses the rest, and answers others meanwhile.
#[test]
fn thousands_of_streams_on_one_connection_are_bounded() {
    let (server, port) = plain_server("limits-streams", &[]);
    let (mut conn, settings) = plain_h2(port);
    assert_eq!(
        h2::setting(&settings, h2::MAX_CONCURRENT_STREAMS),
        Some(grantid_server::MAX_CONCURRENT_STREAMS)
    );
    let block = h2::call("/grantid.v1.IdGeneratorService/GenerateId", &[]);
    let (mut refused, mut goaway, mut sent) = (0u32, None, 0u32);
    let mut tally = |f: h2::Frame| match f.kind {
        h2::RST_STREAM if f.payload == h2::REFUSED_STREAM.to_be_bytes() => refused += 1,
        h2::GOAWAY => goaway = Some(u32::from_be_bytes(f.payload[..4].try_into().unwrap())),
        _ => {}
    };
    // Headers without their message: each call waits for its body.
    for i in 0..5_000u32 {
        let frame = h2::frame(h2::HEADERS, h2::END_HEADERS, 2 * i + 1, &block);
        if conn.send(&frame).is_err() {
            break;
        }
        sent += 1;
        while let Ok(Some(f)) = conn.next(Duration::from_micros(1)) {
            tally(f);
        }
    }
    let plain = grantid_authority::open(&format!("grpc://127.0.0.1:{port}?timeout_ms=3000"));
    plain.unwrap().status(None).unwrap();
    while let Ok(Some(f)) = conn.next(Duration::from_millis(500)) {
        tally(f);
    }
    // Streams at or below the GOAWAY's last one were taken or refused;
    // the ones above were not processed (and may have been refused too).
    let processed = goaway.map_or(sent, |last| last.div_ceil(2));
    let open = processed.saturating_sub(refused);
    assert!(
        open <= grantid_server::MAX_CONCURRENT_STREAMS,
        "{open} streams open ({sent} sent, {refused} refused, GOAWAY {goaway:?})"
    );
    assert!(refused > 0 || goaway.is_some(), "nothing refused");
    let again = grantid_authority::open(&format!("grpc://127.0.0.1:{port}?timeout_ms=3000"));
    again.unwrap().status(None).unwrap();
    drop(server);
}

/// A message past tonic's 4 MiB limit is refused with a message that
/// says so, and the server goes on.
#[test]
fn an_oversized_message_is_refused_and_the_server_goes_on() {
    let (server, port) = plain_server("limits-big", &[]);
    let url = format!("grpc://127.0.0.1:{port}?timeout_ms=5000");
    let client = grantid_authority::from_url(&url).unwrap();
    let request = GrantRequest {
        namespace: "x".repeat(5 << 20),
        incarnation: 1,
        request_id: 1,
        worker: None,
        not_before: 0,
        now: 0,
        duration: 1_000,
        layout: Layout::default(),
    };
    let answer = client.acquire(&request);
    let Err(e) = answer else {
        panic!("{:?}", answer.map(|g| g.worker));
    };
    let shown = e.to_string();
    assert!(
        shown.contains("OutOfRange") && shown.contains("too large"),
        "{shown}"
    );
    grantid_authority::open(&url).unwrap().status(None).unwrap();
    drop(server);
}

/// The calls of a token stop within the reload bound when its line is
/// replaced by a marker (the token on an untouched line goes on), when
/// the file is emptied, and when it is deleted; each is logged, with line
/// numbers and never a token.
#[test]
fn revoked_tokens_stop_within_the_reload_bound() {
    let both = format!("{TOKEN}\n{LEAKED}\n");
    let (server, port, ca, tokens) = tls_setup("limits-revoke", &both).start();
    let (kept, leaked) = (
        grpcs(&server.dir, port, &ca, TOKEN),
        grpcs(&server.dir, port, &ca, LEAKED),
    );
    let refused = |url: &str| {
        call(url).is_err_and(|e| {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            e.message().contains("Unauthenticated")
        })
    };
    // Checked every second, read once still: 2 s, and the call's own.
    let bound = Duration::from_secs(4);
    let within = |what: &str, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let rewrite = |text: &str| put(&server.dir, "tokens", text);
    call(&kept).unwrap();
    call(&leaked).unwrap();

    rewrite(&format!("{TOKEN}\nREVOKED\n"));
    within("the marker", &|| refused(&leaked));
    call(&kept).unwrap();

    let revocations: [(&str, &dyn Fn()); 2] = [
        ("the empty file", &|| drop(rewrite(""))),
        ("the deleted file", &|| {
            std::fs::remove_file(&tokens).unwrap()
        }),
    ];
    for (what, revoke) in revocations {
        rewrite(&both);
        within("the restored file", &|| call(&leaked).is_ok());
        revoke();
        within(what, &|| refused(&leaked) && refused(&kept));
    }
    let log = server.log();
    assert!(
        log.contains("event=token_line_skipped reason=\"line 2: a token is at least"),
        "{log}"
    );
    assert!(log.contains("event=tokens_none"), "{log}");
    assert!(
        !log.contains(TOKEN) && !log.contains(LEAKED),
        "a token in the log"
    );
    drop(server);
}

/// Revoking a token takes from its connections the trust they had: at
/// the per-peer cap, two connections trusted by a token, answering pings
/// and calling no more, kept out the holder of another token; once the
/// token is revoked, that holder's connection closes the oldest of them.
#[test]
fn a_revoked_tokens_connections_make_room() {
    let both = format!("{TOKEN}\n{LEAKED}\n");
    let mut setup = tls_setup("limits-revoke-room", &both);
    setup
        .args
        .extend(["--max-connections-per-peer".to_owned(), "2".to_owned()]);
    let (server, port, ca, _) = setup.start();
    let config = tls_client(&ca);
    let answered = |conn: &mut h2::Conn<Tls>| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match conn.next(Duration::from_millis(200)) {
                Ok(Some(f)) if f.kind == h2::HEADERS => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    };
    let limits = "/grantid.v1.GrantService/Limits";
    let mut leaked: Vec<h2::Conn<Tls>> = (0..2)
        .map(|_| {
            let mut conn = tls_h2(port, &config);
            unary(&mut conn, 1, limits, Some(LEAKED));
            assert!(answered(&mut conn), "a call with the leaked token");
            conn
        })
        .collect();
    let kept = grpcs(&server.dir, port, &ca, TOKEN);
    assert!(
        call(&kept).is_err(),
        "the peer's cap holds two trusted connections"
    );

    put(&server.dir, "tokens", &format!("{TOKEN}\n"));
    let deadline = Instant::now() + Duration::from_secs(4);
    while !server
        .log()
        .contains("event=connections_distrusted connections=2")
    {
        assert!(Instant::now() < deadline, "no revocation: {}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    call(&kept).unwrap_or_else(|e| panic!("the other token's call after the revocation: {e}"));
    assert!(
        leaked[0].closed_within(SLACK),
        "the oldest distrusted connection stayed"
    );
    assert!(
        leaked[1].answers_ping(),
        "a distrusted connection is closed only to make room"
    );
    drop(server);
}
