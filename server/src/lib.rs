//! # grantid-server
//!
//! The grantid ID service over gRPC, run by `grantid serve`
//! (docs/SERVICE.md): `grantid.v1.IdGeneratorService` issues IDs from one
//! core [`grantid::Generator`]; `grantid.v1.GrantService` hands out grants to
//! embedded generators (the `grpc://HOST:PORT` authority URL), forwarded to
//! the server's own authority; beside them the standard health service
//! (`grpc.health.v1`) and server reflection (v1 and v1alpha).
//!
//! ```no_run
//! use grantid_server::Config;
//!
//! let config = Config::new("127.0.0.1:50051".parse().unwrap(), "file:/var/lib/grantid/state.json", "orders-v1");
//! grantid_server::serve(config)?; // until SIGTERM or SIGINT
//! # Ok::<(), grantid::Error>(())
//! ```
//!
//! Properties:
//!
//! * **Never an invented ID**: every ID comes from the core generator,
//!   inside a grant its authority committed. Before the first grant and
//!   whenever the committed grants run out, calls are `UNAVAILABLE` and
//!   health is `NOT_SERVING`.
//! * **Never a panic across the RPC boundary**: generator and authority
//!   calls run inside `catch_unwind`; a panic is `INTERNAL` (IDs) or an
//!   uncertain answer (grants).
//! * **Bounded waits**: a generator call waits at most its `max_wait`
//!   (100 ms) on a blocking thread, never on the async workers; authority
//!   calls are bounded by the authority's `timeout_ms`.
//! * **Graceful drain**: on SIGTERM / SIGINT health goes `NOT_SERVING`,
//!   after `drain_delay` the listener closes, in-flight calls finish (at most
//!   `drain_timeout`), then the worker is released.
//! * **TLS, mTLS and bearer tokens** ([`Config::tls`], [`Config::token_file`]),
//!   reloaded on SIGHUP and when their files change, without dropping a
//!   connection; health answers without a token (probes).
//! * **Bounded connections** ([`Config::max_connections`]): caps on the
//!   connections held, per peer and in their TLS handshake; a connection
//!   without a call (with tokens, an authenticated one) within
//!   [`FIRST_CALL_TIMEOUT`] is closed, and at a cap the oldest such
//!   connection makes room, so unauthenticated peers never starve
//!   authenticated ones (docs/SERVICE.md, "Connections").

#![warn(missing_docs)]

mod accept;
mod auth;
mod codes;
mod conns;
mod grants;
mod ids;
mod secure;
mod sessions;
mod telemetry;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use grantid::{Error, ErrorKind, Generator, GrantSource, Layout};
use grantid_authority::Authority;
use grantid_proto::idgen_v1::id_generator_service_server::IdGeneratorServiceServer as DesignIdServer;
use grantid_proto::v1::grant_service_server::GrantServiceServer;
use grantid_proto::v1::id_generator_service_server::IdGeneratorServiceServer;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

pub use accept::{FIRST_CALL_TIMEOUT, MAX_DEFAULT_CONNECTIONS, RESERVED_FDS};
pub use auth::MIN_TOKEN_LEN;
pub use codes::{CODE_METADATA, code_of, status_of};
pub use ids::{MAX_BATCH, MAX_CALLER_LEN};
pub use secure::{FILE_CHECK_INTERVAL, ServerTlsFiles};
pub use sessions::{DEFAULT_AUTHORITY_SESSIONS, MAX_WAIT, WAITING_PER_SESSION};

/// The default listen address of `grantid serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Most authority sessions one server opens.
pub const MAX_AUTHORITY_SESSIONS: usize = 64;
/// Default bound on the calls in flight when a drain starts.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// TCP keepalive of accepted connections: a peer that vanished without a
/// FIN (a crashed host, a dropped NAT entry) is noticed and its connection
/// closed.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);
/// HTTP/2 pings on every connection, each answered within
/// [`HTTP2_KEEPALIVE_TIMEOUT`] (tonic's default) or the connection is
/// closed: a peer that stopped reading is noticed as one that vanished.
const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// See [`HTTP2_KEEPALIVE_INTERVAL`].
const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Calls in flight on one connection; more are refused (`REFUSED_STREAM`,
/// which clients retry). hyper's own default, which tonic replaces by no
/// limit.
pub const MAX_CONCURRENT_STREAMS: u32 = 200;
/// Streams the server may reset on one connection for the peer's errors
/// before it closes the connection (RUSTSEC-2024-0003): hyper's default,
/// which tonic replaces by no limit.
const MAX_LOCAL_ERROR_RESETS: usize = 1024;
/// Largest header list of one call: hyper's default, 16 KiB.
pub const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;
/// How often health and the generator gauges are refreshed.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);
/// Pause between attempts to start the generator (authority uncertain or no
/// worker free at start-up).
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// The health service names this server reports, besides `""` (the whole
/// server).
pub const ID_SERVICE_NAME: &str = "grantid.v1.IdGeneratorService";
/// The service design's IdGeneratorService, which health reports as
/// [`ID_SERVICE_NAME`].
pub const DESIGN_ID_SERVICE_NAME: &str = "hispeeddesign.idgen.v1.IdGeneratorService";
/// The names health reports `SERVING` only while the generator holds a
/// worker and committed time.
const ID_SERVICE_NAMES: [&str; 3] = ["", ID_SERVICE_NAME, DESIGN_ID_SERVICE_NAME];
/// See [`ID_SERVICE_NAME`].
pub const GRANT_SERVICE_NAME: &str = "grantid.v1.GrantService";

/// What one server runs with.
#[derive(Clone)]
pub struct Config {
    /// Where to listen for gRPC.
    pub listen: SocketAddr,
    /// The server's authority URL (its own worker, and GrantService).
    pub authority: String,
    /// Independent authority sessions (connections) GrantService forwards
    /// on, besides the one of the server's own generator; `file:` and
    /// `static:` always use one (docs/SERVICE.md, "Fan-in").
    pub authority_sessions: usize,
    /// The namespace of the IDs the server issues.
    pub namespace: String,
    /// The layout of those IDs.
    pub layout: Layout,
    /// Where to serve Prometheus metrics (`GET /metrics`); `None`: off.
    pub metrics: Option<SocketAddr>,
    /// How long health says `NOT_SERVING` before the listener closes, so a
    /// load balancer stops sending new calls first (default 0).
    pub drain_delay: Duration,
    /// Longest wait for calls in flight once the listener is closed.
    pub drain_timeout: Duration,
    /// Longest one attempt to start the generator waits for a grant; the
    /// server keeps trying (`NOT_SERVING` meanwhile) until it gets one.
    pub startup_timeout: Duration,
    /// Length of each grant the server's generator asks for, in ms.
    pub grant_duration_ms: u64,
    /// Committed time the server's generator keeps ahead of its clock, in
    /// ms: how long it keeps serving while its authority does not answer.
    pub horizon_ms: u64,
    /// TLS (and mTLS with a client CA); `None`: plaintext HTTP/2.
    pub tls: Option<ServerTlsFiles>,
    /// The bearer tokens every call but health's must carry; needs `tls`.
    pub token_file: Option<std::path::PathBuf>,
    /// Most connections held at once; `None`: the open-files limit less
    /// [`RESERVED_FDS`], at most [`MAX_DEFAULT_CONNECTIONS`].
    pub max_connections: Option<usize>,
    /// Most connections of one peer address; `None`: half the cap.
    pub max_connections_per_peer: Option<usize>,
    /// How long a new connection has to make a call (with `token_file`, an
    /// authenticated one), its TLS handshake included.
    pub first_call_timeout: Duration,
}

/// Shows the authority URL redacted (`grantid_authority::redact`: it may
/// carry a password) and no token file path, as `ServerTlsFiles` shows no key
/// path.
impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Config {
            listen,
            authority,
            authority_sessions,
            namespace,
            layout,
            metrics,
            drain_delay,
            drain_timeout,
            startup_timeout,
            grant_duration_ms,
            horizon_ms,
            tls,
            token_file,
            max_connections,
            max_connections_per_peer,
            first_call_timeout,
        } = self;
        f.debug_struct("Config")
            .field("listen", listen)
            .field("authority", &grantid_authority::redact(authority))
            .field("authority_sessions", authority_sessions)
            .field("namespace", namespace)
            .field("layout", layout)
            .field("metrics", metrics)
            .field("drain_delay", drain_delay)
            .field("drain_timeout", drain_timeout)
            .field("startup_timeout", startup_timeout)
            .field("grant_duration_ms", grant_duration_ms)
            .field("horizon_ms", horizon_ms)
            .field("tls", tls)
            .field("token_file", &token_file.as_ref().map(|_| "***"))
            .field("max_connections", max_connections)
            .field("max_connections_per_peer", max_connections_per_peer)
            .field("first_call_timeout", first_call_timeout)
            .finish()
    }
}

impl Config {
    /// A configuration with the default layout and timings.
    pub fn new(listen: SocketAddr, authority: &str, namespace: &str) -> Config {
        Config {
            listen,
            authority: authority.to_owned(),
            authority_sessions: sessions::DEFAULT_AUTHORITY_SESSIONS,
            namespace: namespace.to_owned(),
            layout: Layout::default(),
            metrics: None,
            drain_delay: Duration::ZERO,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            startup_timeout: grantid::DEFAULT_STARTUP_TIMEOUT,
            grant_duration_ms: grantid::DEFAULT_GRANT_DURATION_MS,
            horizon_ms: grantid::DEFAULT_HORIZON_MS,
            tls: None,
            token_file: None,
            max_connections: None,
            max_connections_per_peer: None,
            first_call_timeout: FIRST_CALL_TIMEOUT,
        }
    }
}

/// What the services share.
#[derive(Debug)]
pub(crate) struct State {
    pub namespace: String,
    pub layout: Layout,
    generator: OnceLock<Arc<Generator>>,
    /// Why the generator has not started yet.
    not_started: Mutex<String>,
}

impl State {
    /// The generator, or `UNAVAILABLE` before its first grant.
    pub fn generator(&self) -> Result<Arc<Generator>, Status> {
        match self.generator.get() {
            Some(g) => Ok(Arc::clone(g)),
            None => {
                let why = self
                    .not_started
                    .lock()
                    .map(|w| w.clone())
                    .unwrap_or_default();
                Err(status_of(&Error::new(
                    ErrorKind::Unavailable,
                    format!("the server holds no grant yet: {why}"),
                )))
            }
        }
    }
}

fn runtime_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, format!("{what}: {e}"))
}

/// Runs a server until SIGTERM or SIGINT, then drains it and releases its
/// worker. Blocks; makes its own tokio runtime. Raises the process's soft
/// limit on open files to its hard limit first.
pub fn serve(config: Config) -> Result<(), Error> {
    accept::raise_open_files();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("grantid-serve")
        .build()
        .map_err(|e| runtime_error("cannot start the tokio runtime", e))?;
    let result = runtime.block_on(async {
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("cannot listen on {}: {e}", config.listen),
            )
        })?;
        run(config, listener, shutdown_signal()).await
    });
    // A generator start still waiting on the authority is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Why GrantService must refuse every grant of the server's authority
/// `url`, if it must: other processes may share an authority only as far as
/// what it remembers reaches (docs/SERVICE.md, "Deployment"). A host's
/// authority is served, with a warning that it is one host's.
fn grant_refusal(url: &str) -> Result<Option<String>, Error> {
    use grantid_authority::Scope;
    match grantid_authority::parse_url(url)?.target.scope() {
        Scope::Process => {
            let why = "the server's authority is static:N without a state file: its high-water \
                       mark lives in this server process, and a restarted server would grant \
                       again what a grpc:// client still holds; give it a state file \
                       (static:N?state=/var/lib/grantid/static.json) or serve a shared authority \
                       (postgres://, redis://, mysql://, etcd://)"
                .to_owned();
            log::warn!(target: "grantid_server", "event=grants_refused reason={why:?}");
            Ok(Some(why))
        }
        Scope::Host => {
            log::warn!(
                target: "grantid_server",
                "event=host_authority note=\"the authority is one host's file: every grpc:// \
                 client shares it through this server; a replica on another host must not \
                 serve a file of its own (docs/SERVICE.md, Deployment)\""
            );
            Ok(None)
        }
        Scope::Fleet => Ok(None),
    }
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        log::error!(target: "grantid_server", "event=no_signal_handler");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => log::info!(target: "grantid_server", "event=signal signal=SIGTERM"),
        _ = int.recv() => log::info!(target: "grantid_server", "event=signal signal=SIGINT"),
    }
}

/// The configuration's checks before anything opens: the connection caps
/// it sets.
fn checked(config: &Config) -> Result<conns::ConnCaps, Error> {
    if config.namespace.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "the namespace must not be empty",
        ));
    }
    if !(1..=MAX_AUTHORITY_SESSIONS).contains(&config.authority_sessions) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "authority sessions must be 1 to {MAX_AUTHORITY_SESSIONS}, got {}",
                config.authority_sessions
            ),
        ));
    }
    if config.token_file.is_some() && config.tls.is_none() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "--token-file needs --tls-cert and --tls-key: a bearer token sent over plaintext \
             can be read and replayed by anyone on the path",
        ));
    }
    accept::conn_caps(
        config.max_connections,
        config.max_connections_per_peer,
        config.first_call_timeout,
    )
}

/// One session of the authority, shared.
type Session = Arc<dyn Authority>;

/// The authority's sessions: the generator's own, and the others the
/// fleet's calls share.
fn authority_sessions(config: &Config) -> Result<(Session, Vec<Session>), Error> {
    // The generator's renewals get a session of their own, so a fleet's
    // calls never delay them; `file:` and `static:` share their one.
    let mut opened: Vec<Arc<dyn Authority>> =
        grantid_authority::open_sessions(&config.authority, config.authority_sessions + 1)?
            .into_iter()
            .map(Arc::from)
            .collect();
    let authority = if opened.len() > 1 {
        opened.remove(0)
    } else {
        Arc::clone(&opened[0])
    };
    log::info!(
        target: "grantid_server",
        "event=authority_sessions count={}", opened.len()
    );
    Ok((authority, opened))
}

/// The services: health (open to probes), reflection, IDs and grants
/// (each behind the bearer token, when there are tokens).
fn routes<H: tonic_health::pb::health_server::Health>(
    health: tonic_health::pb::health_server::HealthServer<H>,
    tokens: Option<Arc<auth::Tokens>>,
    ids: Arc<ids::IdService>,
    grants: grants::GrantForwarder,
) -> Result<tonic::transport::server::Router, Error> {
    let reflection_error = |e| runtime_error("cannot build the reflection service", e);
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

    // Every service but health checks the bearer token (probes have none).
    let guard = auth::Guard(tokens.clone());
    Ok(Server::builder()
        .http2_keepalive_interval(Some(HTTP2_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(HTTP2_KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .http2_max_header_list_size(MAX_HEADER_LIST_SIZE)
        .add_service(InterceptedService::new(
            health,
            auth::Probe(tokens.is_none()),
        ))
        .add_service(InterceptedService::new(reflection_v1, guard.clone()))
        .add_service(InterceptedService::new(reflection_v1alpha, guard.clone()))
        .add_service(InterceptedService::new(
            IdGeneratorServiceServer::from_arc(Arc::clone(&ids)),
            guard.clone(),
        ))
        .add_service(InterceptedService::new(
            DesignIdServer::new(ids::DesignIdService(ids)),
            guard.clone(),
        ))
        .add_service(InterceptedService::new(
            GrantServiceServer::new(grants),
            guard,
        )))
}

/// Runs a server on `listener` until `shutdown` resolves (or the generator
/// cannot be configured), then drains it and releases its worker.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let limits = checked(&config)?;
    let watched =
        secure::Watched::before_reading(config.tls.as_ref(), config.token_file.as_deref());
    let tls = match &config.tls {
        Some(files) => Some(Arc::new(secure::Tls::load(files)?)),
        None => None,
    };
    let tokens = match &config.token_file {
        Some(path) => Some(Arc::new(auth::Tokens::load(path)?)),
        None => None,
    };
    // Registered before the server listens: a SIGHUP sent once it does
    // never ends the process.
    let hangup = if tls.is_some() || tokens.is_some() {
        use tokio::signal::unix::{SignalKind, signal};
        Some(signal(SignalKind::hangup()).map_err(|e| runtime_error("cannot handle SIGHUP", e))?)
    } else {
        None
    };
    let (authority, opened) = authority_sessions(&config)?;
    let grants_refused = grant_refusal(&config.authority)?;
    if let Some(addr) = config.metrics {
        telemetry::install(addr)?;
        log::info!(target: "grantid_server", "event=metrics addr={addr}");
    }
    let local = listener
        .local_addr()
        .map_err(|e| runtime_error("cannot read the listen address", e))?;
    let state = Arc::new(State {
        namespace: config.namespace.clone(),
        layout: config.layout,
        generator: OnceLock::new(),
        not_started: Mutex::new("starting".into()),
    });

    let (reporter, health) = tonic_health::server::health_reporter();
    for name in ID_SERVICE_NAMES {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    // GrantService needs no grant of its own: it serves until the drain.
    reporter
        .set_service_status(GRANT_SERVICE_NAME, ServingStatus::Serving)
        .await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let (fatal_tx, fatal_rx) = oneshot::channel::<Error>();
    tokio::spawn(start_generator(
        Arc::clone(&state),
        Arc::clone(&authority) as Arc<dyn GrantSource>,
        config.clone(),
        stop_rx.clone(),
        fatal_tx,
    ));
    let watcher = tokio::spawn(watch_health(
        Arc::clone(&state),
        reporter.clone(),
        stop_rx.clone(),
    ));

    let sessions = Arc::new(sessions::Sessions::new(opened));
    let fatal = Arc::new(Mutex::new(None::<Error>));
    let drain = {
        let fatal = Arc::clone(&fatal);
        let sessions = Arc::clone(&sessions);
        let reporter = reporter.clone();
        let delay = config.drain_delay;
        async move {
            tokio::select! {
                _ = shutdown => {}
                Ok(e) = fatal_rx => {
                    if let Ok(mut f) = fatal.lock() { *f = Some(e); }
                }
            }
            let _ = stop_tx.send(true);
            for name in ID_SERVICE_NAMES.into_iter().chain([GRANT_SERVICE_NAME]) {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
            log::info!(target: "grantid_server", "event=draining delay_ms={}", delay.as_millis());
            tokio::time::sleep(delay).await;
            // The listener closes now: calls still waiting for a session
            // are answered at once (through the delay they were served).
            sessions.close();
        }
    };

    let router = routes(
        health,
        tokens.clone(),
        Arc::new(ids::IdService::new(Arc::clone(&state))),
        grants::GrantForwarder::new(sessions, grants_refused),
    )?;
    log::info!(
        target: "grantid_server",
        "event=listening addr={local} namespace={:?} tls={} client_certificates={} tokens={}",
        config.namespace,
        tls.is_some(),
        config.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
        tokens.as_ref().map_or(0, |t| t.len()),
    );
    log::info!(
        target: "grantid_server",
        "event=connection_limits connections={} per_peer={} handshakes={} first_call_ms={}",
        limits.connections, limits.per_peer, limits.handshakes, limits.first_call.as_millis()
    );
    let conns = Arc::new(conns::Conns::new(limits));
    let reloader = (tls.is_some() || tokens.is_some()).then(|| {
        tokio::spawn(secure::reload_loop(
            watched,
            tls.clone(),
            tokens.clone(),
            Arc::clone(&conns),
            hangup,
            stop_rx.clone(),
        ))
    });
    let sweeper = tokio::spawn(conns::sweep_loop(Arc::clone(&conns)));
    let incoming = accept::incoming(listener, tls, conns, TCP_KEEPALIVE);
    let serve = router.serve_with_incoming_shutdown(incoming, drain);
    tokio::pin!(serve);
    let mut stopped = stop_rx.clone();
    let bound = config.drain_delay + config.drain_timeout;
    tokio::select! {
        r = &mut serve => r.map_err(|e| runtime_error("the gRPC server failed", e))?,
        _ = async {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(bound).await;
        } => log::warn!(target: "grantid_server", "event=drain_timeout after_ms={}", bound.as_millis()),
    }
    watcher.abort();
    sweeper.abort();
    if let Some(r) = reloader {
        r.abort();
    }
    if let Some(generator) = state.generator.get().cloned() {
        // Releases the worker (the authority may block on its store).
        let _ = tokio::task::spawn_blocking(move || generator.close()).await;
    }
    log::info!(target: "grantid_server", "event=stopped");
    match fatal.lock().ok().and_then(|mut f| f.take()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The reflection builder with grantid.proto, id_generator.proto and the
/// health protocol.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(grantid_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// Starts the server's generator, retrying until it holds a grant. A
/// configuration the generator refuses (`InvalidArgument`) or a used-up
/// timestamp field (`GrantExhausted`) stops the server: no retry can help.
async fn start_generator(
    state: Arc<State>,
    authority: Arc<dyn GrantSource>,
    config: Config,
    stop: watch::Receiver<bool>,
    fatal: oneshot::Sender<Error>,
) {
    loop {
        let authority = Arc::clone(&authority);
        let config = config.clone();
        let started = tokio::task::spawn_blocking(move || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Generator::builder(config.layout, config.namespace, authority)
                    .startup_timeout(config.startup_timeout)
                    .grant_duration_ms(config.grant_duration_ms)
                    .horizon_ms(config.horizon_ms)
                    .start()
            }))
        })
        .await;
        let error = match started {
            Ok(Ok(Ok(generator))) => {
                if *stop.borrow() {
                    let _ = tokio::task::spawn_blocking(move || generator.close()).await;
                    return;
                }
                let worker = generator.stats().worker;
                log::info!(target: "grantid_server", "event=generator_started worker={worker:?}");
                let _ = state.generator.set(Arc::new(generator));
                return;
            }
            Ok(Ok(Err(e))) => e,
            _ => Error::new(ErrorKind::Unavailable, "the generator start panicked"),
        };
        if matches!(
            error.kind(),
            ErrorKind::InvalidArgument | ErrorKind::GrantExhausted
        ) {
            log::error!(target: "grantid_server", "event=generator_refused error={error}");
            let _ = fatal.send(error);
            return;
        }
        log::warn!(target: "grantid_server", "event=generator_not_started error={error}");
        if let Ok(mut w) = state.not_started.lock() {
            *w = error.to_string();
        }
        if *stop.borrow() {
            return;
        }
        tokio::time::sleep(RESTART_PAUSE).await;
    }
}

/// Keeps health in step with the generator: `SERVING` while it holds a
/// worker and committed time, `NOT_SERVING` otherwise and once draining.
async fn watch_health(state: Arc<State>, reporter: HealthReporter, stop: watch::Receiver<bool>) {
    let mut serving_now = false;
    let mut tick = tokio::time::interval(WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let stats = state.generator.get().map(|g| g.stats());
        let serving = !*stop.borrow()
            && stats
                .as_ref()
                .is_some_and(|s| s.worker.is_some() && s.remaining_ticks > 0);
        telemetry::generator_state(stats.as_ref(), state.layout.tick_ms(), serving);
        if *stop.borrow() {
            return;
        }
        if serving != serving_now {
            serving_now = serving;
            let status = if serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            log::info!(target: "grantid_server", "event=health status={status}");
            for name in ID_SERVICE_NAMES {
                reporter.set_service_status(name, status).await;
            }
            // A drain that began while SERVING was being written has
            // already written NOT_SERVING; it must stay the last word.
            if *stop.borrow() {
                for name in ID_SERVICE_NAMES {
                    reporter
                        .set_service_status(name, ServingStatus::NotServing)
                        .await;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configs_debug_shows_no_password() {
        let mut config = Config::new(
            "127.0.0.1:0".parse().unwrap(),
            "postgres://app:s3cret@db.internal/ids?sslkey=/keys/client.key",
            "orders",
        );
        config.token_file = Some("/secrets/tokens.txt".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("tokens.txt"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("client.key"), "{shown}");
        assert!(
            shown.contains("postgres://app:***@db.internal/ids"),
            "{shown}"
        );
        assert!(shown.contains("namespace: \"orders\""), "{shown}");
    }
}
