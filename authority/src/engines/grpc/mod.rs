//! The gRPC authority, `grpc://HOST:PORT[?timeout_ms=N]`: grants from a
//! grantid server (`grantid serve`, docs/SERVICE.md) through its
//! `grantid.v1.GrantService`. The server forwards each request to its own
//! authority, so a fleet of embedded generators shares the server's few
//! database connections and still gets the one allocation rule.
//!
//! * A server that cannot be reached, answers with an error status, or does
//!   not answer within `timeout_ms` (default 3 s) is **unavailable**
//!   (uncertain): the generator keeps issuing inside its committed grants
//!   and retries. It is never taken as a refusal, and never as a grant.
//! * Inside one call, a failed connection is retried with the **same**
//!   (incarnation, request_id) until `timeout_ms`: the server's authority
//!   answers a repeated request with the grant it recorded, never a second
//!   one.
//! * A **lost** answer passes the server's authority's refusal through.
//! * [`GrantSource::max_lead_ms`] is the server's authority's bounded lead
//!   (`GrantService.Limits`), asked once per authority on a connection of
//!   its own within `timeout_ms` and kept once the server has answered. A
//!   server that cannot be asked, or one without `Limits` (older than it),
//!   leaves it unknown (`None`): the generator's start-up check is then
//!   skipped, as for a source without a bounded lead.
//! * Each process has its own connection (and its own small single-threaded
//!   tokio runtime that runs only inside a call, authority/src/blocking.rs):
//!   a `fork()` child connects afresh, and a caller inside a tokio runtime
//!   is served from a thread of its own.
//! * `grpcs://HOST:PORT` speaks TLS (rustls, authority/src/tls.rs): the
//!   server's certificate is checked against `tls_ca` (or the system's
//!   roots) and HOST; `tls_cert` and `tls_key` present a client
//!   certificate; `token_file` sends `authorization: Bearer TOKEN` with
//!   every call. A failed handshake is `Unavailable` with its cause (wrong
//!   CA, wrong host name, no client certificate); `UNAUTHENTICATED` and
//!   `PERMISSION_DENIED` are a permanent refusal, so a starting generator
//!   fails at once with the server's message.

pub(crate) mod url;

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use grantid::{Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource};
use grantid_proto::v1::acquire_response::Answer;
use grantid_proto::v1::grant_service_client::GrantServiceClient;
use grantid_proto::v1::{
    AcquireRequest, InitRequest, LimitsRequest, ReleaseRequest, StatusRequest,
};
use tonic::Code;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::answer::{StoredWorker, worker_status};
use crate::blocking::Blocking;
use crate::forklocal::ForkLocal;
use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::url::{Options, Target};

/// The registry's opener of gRPC URLs: `n` sessions, a channel each.
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::Grpc(addr) => Sessions::each(n, || GrpcAuthority::new(&addr, options.clone())),
        Target::Grpcs(spec) => {
            Sessions::each(n, || GrpcAuthority::new_tls(url, &spec, options.clone()))
        }
        _ => Err(not_this_engines(url, "grpc")),
    }
}

/// Pause between attempts inside one call when the server cannot be
/// reached (the call's `timeout_ms` bounds the whole).
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// The gRPC authority. See the module docs.
pub struct GrpcAuthority {
    addr: String,
    /// `grpc` or `grpcs`, for the messages.
    scheme: &'static str,
    endpoint: Endpoint,
    /// TLS and the token of a `grpcs://` URL.
    secure: Option<Arc<Secure>>,
    options: Options,
    /// This process's connection; its lock is held for the whole call, so
    /// the calls of one process run one at a time.
    conn: Blocking<GrantServiceClient<Channel>>,
    /// Whether the server was reached: until then a certificate check that
    /// fails is `Refused`, after it `Unavailable`.
    reached: crate::tls::Reached,
    /// The server's answer to `Limits` (its authority's `max_lead_ms`),
    /// once it gave one.
    lead: OnceLock<Option<u64>>,
}

impl std::fmt::Debug for GrpcAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcAuthority")
            .field("addr", &self.addr)
            .field("tls", &self.secure.is_some())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GrpcAuthority {
    /// A client of the server at `addr` (`HOST:PORT`). Does not connect.
    pub fn new(addr: &str, options: Options) -> Result<GrpcAuthority, Error> {
        GrpcAuthority::with_scheme("grpc", addr, options, None)
    }

    /// A client of `grpcs://SPEC` (`HOST:PORT` and its TLS and token
    /// options, as the URL parser keeps them): the PEM files and the token
    /// are read now, so a missing or bad one is `InvalidArgument` at once.
    /// `url` is the whole URL, for the messages (redacted). Does not
    /// connect.
    pub fn new_tls(url: &str, spec: &str, options: Options) -> Result<GrpcAuthority, Error> {
        let (addr, query) = spec.split_once('?').unwrap_or((spec, ""));
        let secure = Secure::from_options(url, addr, query)?;
        GrpcAuthority::with_scheme("grpcs", addr, options, Some(Arc::new(secure)))
    }

    fn with_scheme(
        scheme: &'static str,
        addr: &str,
        options: Options,
        secure: Option<Arc<Secure>>,
    ) -> Result<GrpcAuthority, Error> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL \"{scheme}://{addr}\": {why}"),
            )
        };
        if host_of(addr).is_none() {
            return Err(bad(format!("expected {scheme}://HOST:PORT")));
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(options.timeout)
            .timeout(options.timeout)
            .tcp_nodelay(true);
        Ok(GrpcAuthority {
            addr: addr.to_owned(),
            scheme,
            endpoint,
            secure,
            options,
            conn: Blocking::new(format!("{scheme}://{addr}")),
            reached: crate::tls::Reached::default(),
            lead: OnceLock::new(),
        })
    }

    /// `SCHEME://HOST:PORT`, for the messages.
    fn target(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// `message` with the caller's deadline sent along (`grpc-timeout`):
    /// the server drops a call whose caller has given up, before it
    /// reaches the store (docs/SERVICE.md, "Fan-in"); and the bearer token
    /// of a `grpcs://` URL.
    fn request<T>(&self, message: T, left: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(left);
        if let Some(token) = self.secure.as_ref().and_then(|s| s.token.as_ref()) {
            request
                .metadata_mut()
                .insert("authorization", token.header());
        }
        request
    }

    /// No answer within `timeout`, with the cause of a failed TLS
    /// handshake when there was one (a channel that cannot connect keeps
    /// trying until the call's deadline).
    fn no_answer(&self, timeout: Duration) -> String {
        let cause = self
            .secure
            .as_ref()
            .and_then(|s| s.failure.get().lock().clone());
        match cause {
            Some(cause) => format!("no answer within {timeout:?}: {cause}"),
            None => format!("no answer within {timeout:?}"),
        }
    }

    /// A call went through: a TLS failure seen before is history.
    fn connected(&self) {
        if let Some(s) = &self.secure {
            *s.failure.get().lock() = None;
            *s.certificate.get().lock() = false;
        }
    }

    /// What a failed call's status says, with the cause of a failed TLS
    /// handshake when there was one.
    fn describe(&self, status: &tonic::Status) -> String {
        let mut why = format!("{:?}: {}", status.code(), status.message());
        if let Some(secure) = &self.secure
            && let Some(cause) = secure.cause(status)
        {
            why = format!("{why}: {cause}");
        }
        why
    }

    /// Asks the server for its authority's bounded lead, on a connection
    /// of its own (so it never waits for another call of this process),
    /// within `timeout_ms`.
    fn ask_lead(&self) -> Result<Option<u64>, String> {
        let timeout = self.options.timeout;
        let own = Blocking::new(self.target());
        let answer = self
            .run_on(&own, "Limits", async |mut client| {
                Ok(tokio::time::timeout(
                    timeout,
                    client.limits(self.request(LimitsRequest {}, timeout)),
                )
                .await)
            })
            .map_err(|e| e.to_string())?;
        match answer {
            Ok(Ok(response)) => Ok(response.into_inner().max_lead_ms),
            Ok(Err(status)) if status.code() == Code::Unimplemented => {
                Err("the server does not report its authority's bounds (no Limits)".into())
            }
            Ok(Err(status)) => Err(self.describe(&status)),
            Err(_) => Err(self.no_answer(timeout)),
        }
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> GrantError {
        GrantError::Unavailable(format!("{}: {why}", self.target()))
    }

    /// A call the server never answered: after a failed certificate check
    /// (the last handshake's) as [`crate::tls::Reached`] says, else
    /// `Unavailable`.
    fn unanswered(&self, why: impl std::fmt::Display) -> GrantError {
        match &self.secure {
            Some(s) if *s.certificate.get().lock() => {
                self.reached.setting_failed(&self.target(), why)
            }
            _ => self.unavailable(why),
        }
    }

    /// Runs `work` on this process's client.
    fn run<T: Send>(
        &self,
        what: &str,
        work: impl AsyncFnOnce(GrantServiceClient<Channel>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        self.run_on(&self.conn, what, work)
    }

    /// Runs `work` on the client in `conn` (a lazy channel, made on first
    /// use and kept: it reconnects by itself), without a deadline of its
    /// own: each call bounds itself by `timeout_ms`.
    fn run_on<T: Send>(
        &self,
        conn: &Blocking<GrantServiceClient<Channel>>,
        what: &str,
        work: impl AsyncFnOnce(GrantServiceClient<Channel>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        let (endpoint, secure) = (&self.endpoint, &self.secure);
        conn.run(what, async move |slot| {
            let client = slot.get_or_insert_with(|| {
                GrantServiceClient::new(match secure {
                    Some(s) => endpoint.connect_with_connector_lazy(TlsConnect(Arc::clone(s))),
                    None => endpoint.connect_lazy(),
                })
            });
            work(client.clone()).await
        })
    }
}

impl GrantSource for GrpcAuthority {
    /// The server's authority's bounded lead; `None` when it has none or
    /// when it is unknown (see the module docs). Never blocks longer than
    /// `timeout_ms`.
    fn max_lead_ms(&self) -> Option<u64> {
        if let Some(known) = self.lead.get() {
            return *known;
        }
        match self.ask_lead() {
            Ok(lead) => *self.lead.get_or_init(|| lead),
            Err(why) => {
                log::warn!(
                    target: "grantid",
                    "event=max_lead_unknown authority={} error={why:?}",
                    self.target()
                );
                None
            }
        }
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let wire = AcquireRequest {
            request: Some(request.into()),
        };
        let timeout = self.options.timeout;
        self.reached.renewing(request);
        self.run("Acquire", async |mut client| {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let status = match tokio::time::timeout(
                    left,
                    client.acquire(self.request(wire.clone(), left)),
                )
                .await
                {
                    Err(_) => {
                        return Err(self.unanswered(self.no_answer(timeout)));
                    }
                    Ok(Ok(response)) => {
                        self.reached.mark();
                        return match response.into_inner().answer {
                            Some(Answer::Granted(g)) => {
                                self.connected();
                                Ok(grantid_proto::grant_from_proto(&g))
                            }
                            Some(Answer::Lost(why)) => {
                                Err(GrantError::Lost(format!("{}: {why}", self.target())))
                            }
                            Some(Answer::Unavailable(why)) => Err(self.unavailable(why)),
                            Some(Answer::Refused(why)) => {
                                Err(GrantError::Refused(format!("{}: {why}", self.target())))
                            }
                            None => Err(GrantError::Invalid(format!(
                                "{}: the answer holds no outcome",
                                self.target()
                            ))),
                        };
                    }
                    Ok(Err(status)) => status,
                };
                let why = self.describe(&status);
                // The server does not take this client's token: no retry
                // can help a first grant (a starting generator fails at
                // once); a renewal is `Unavailable`, so the generator keeps
                // its grant to its end (a proxy's refusal, or a token file
                // caught half written, costs no worker).
                if refused_by_server(status.code()) {
                    let why = format!("{}: {why}", self.target());
                    return Err(match request.worker {
                        None => GrantError::Refused(why),
                        Some(_) => GrantError::Unavailable(why),
                    });
                }
                // Only a transport failure is tried again (same request
                // id: the server answers a repeat with the recorded grant);
                // a status the server chose (it carries the grantid code:
                // stopping, at capacity, ...) goes back to the generator,
                // which backs off.
                let pause = RECONNECT_PAUSE.min(deadline.saturating_duration_since(Instant::now()));
                let chosen = status.metadata().get("grantid-code").is_some();
                let transport = status.code() == Code::Unavailable && !chosen;
                if chosen {
                    return Err(self.unavailable(why));
                }
                // A status the server did not choose (a transport failure,
                // a call cancelled by a refused handshake) tells nothing
                // of the store: a certificate check that failed is a
                // setting, the rest is retried while the deadline allows.
                if !transport || pause.is_zero() {
                    return Err(self.unanswered(why));
                }
                tokio::time::sleep(pause).await;
            }
        })
    }

    fn release(&self, last: &Grant) {
        let wire = ReleaseRequest {
            grant: Some(last.into()),
        };
        let timeout = self.options.timeout;
        let answer = self.run("Release", async |mut client| {
            match tokio::time::timeout(timeout, client.release(self.request(wire, timeout))).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(status)) => Err(self.unavailable(self.describe(&status))),
                Err(_) => Err(self.unavailable(self.no_answer(timeout))),
            }
        });
        if let Err(e) = answer {
            // Best effort: the lease then ends by expiry.
            log::warn!(target: "grantid", "event=release_failed worker={} error={e}", last.worker);
        }
    }
}

impl GrpcAuthority {
    /// One call of the server's GrantService with the call's `timeout_ms`,
    /// decoded by `decode`. The server's error keeps its kind (the
    /// `grantid-code` metadata, docs/SERVICE.md); a server that cannot be
    /// reached or does not answer in time is `Unavailable`.
    fn call<M: Send, T: Send>(
        &self,
        what: &str,
        call: impl AsyncFnOnce(GrantServiceClient<Channel>) -> Result<tonic::Response<M>, tonic::Status>
        + Send,
        decode: impl FnOnce(M) -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        let timeout = self.options.timeout;
        let outcome = self.run(what, async |client| {
            Ok(tokio::time::timeout(timeout, call(client)).await)
        });
        let failed =
            |kind, why: String| Error::new(kind, format!("{}: {what}: {why}", self.target()));
        match outcome.map_err(Error::from)? {
            Ok(Ok(response)) => {
                self.connected();
                decode(response.into_inner())
            }
            Ok(Err(status)) => {
                let kind = status
                    .metadata()
                    .get("grantid-code")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|code| ErrorKind::ALL.into_iter().find(|k| k.code() == code))
                    .unwrap_or(if refused_by_server(status.code()) {
                        ErrorKind::InvalidArgument
                    } else {
                        ErrorKind::Unavailable
                    });
                Err(failed(kind, self.describe(&status)))
            }
            Err(_) => Err(failed(ErrorKind::Unavailable, self.no_answer(timeout))),
        }
    }
}

impl Authority for GrpcAuthority {
    /// The server's `init` of its own authority.
    fn init(&self) -> Result<String, Error> {
        let timeout = self.options.timeout;
        self.call(
            "Init",
            async |mut c| c.init(self.request(InitRequest {}, timeout)).await,
            |r| {
                Ok(format!(
                    "{}: the server's authority: {}",
                    self.target(),
                    r.report
                ))
            },
        )
    }

    /// A new deployment is declared where the store is, never over the
    /// network: `init --new-deployment` is refused here.
    fn init_new_deployment(&self) -> Result<String, Error> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{}: a new deployment is declared with the server's own authority URL, \
                 where the store is (docs/AUTHORITIES.md, \"State loss\")",
                self.target()
            ),
        ))
    }

    /// A quarantine is started where the store is, like a new deployment.
    fn fence(&self) -> Result<String, Error> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{}: fence the server's own authority URL, where the store is \
                 (docs/AUTHORITIES.md, \"State loss\")",
                self.target()
            ),
        ))
    }

    /// A quarantine is lifted where the store is, like a fence.
    fn lift_quarantine(&self) -> Result<String, Error> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{}: lift the quarantine on the server's own authority URL, where the store is \
                 (docs/AUTHORITIES.md, \"Lifting a quarantine\")",
                self.target()
            ),
        ))
    }

    /// The server's authority's worker records, checked like any store's
    /// (authority/src/answer.rs).
    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let request = StatusRequest {
            namespace: namespace.unwrap_or_default().to_owned(),
        };
        let store = self.target();
        let timeout = self.options.timeout;
        self.call(
            "Status",
            async |mut c| c.status(self.request(request, timeout)).await,
            |r| {
                r.workers
                    .iter()
                    .map(|w| worker_from_proto(&store, w).map_err(Error::from))
                    .collect()
            },
        )
    }
}

/// `UNAUTHENTICATED` (no token, or one the server does not know) and
/// `PERMISSION_DENIED` (a token not bound to the namespace): the server's
/// refusal of this client, which no retry changes.
fn refused_by_server(code: Code) -> bool {
    matches!(code, Code::Unauthenticated | Code::PermissionDenied)
}

/// The host of `HOST:PORT` (an IPv6 address in brackets), when the port
/// is a port.
fn host_of(addr: &str) -> Option<&str> {
    let (host, port) = addr.rsplit_once(':')?;
    (!host.is_empty() && port.parse::<u16>().is_ok())
        .then(|| host.trim_start_matches('[').trim_end_matches(']'))
}

/// The TLS settings and the token of a `grpcs://` URL.
struct Secure {
    config: Arc<rustls::ClientConfig>,
    addr: String,
    /// The name the server's certificate must hold: the URL's host.
    name: rustls::pki_types::ServerName<'static>,
    /// Whose roots the server's certificate is checked against, for the
    /// messages.
    roots: String,
    token: Option<TokenFile>,
    /// The cause of the last failed handshake, for the call it failed; per
    /// process (a `fork()` child never takes a lock its parent's threads
    /// may have held).
    failure: ForkLocal<Option<String>>,
    /// Whether that failure was a certificate check
    /// ([`crate::tls::certificate_failure`]).
    certificate: ForkLocal<bool>,
}

impl Secure {
    fn from_options(url: &str, addr: &str, query: &str) -> Result<Secure, Error> {
        use crate::tls;
        let bad = |why: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL {:?}: {why}", crate::url::redact(url)),
            )
        };
        // The URL parser kept only these options (GRPCS_OPTIONS).
        let mut given = std::collections::BTreeMap::new();
        for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
            let v = tls::decoded(v);
            if v.is_empty() {
                return Err(bad(format!("{k}= needs a path")));
            }
            given.insert(k, v);
        }
        let (ca, cert) = (given.remove("tls_ca"), given.remove("tls_cert"));
        let (key, token) = (given.remove("tls_key"), given.remove("token_file"));
        let host = host_of(addr).ok_or_else(|| bad("expected grpcs://HOST:PORT".into()))?;
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| bad(format!("{host:?} is not a host name or IP address: {e}")))?;
        let (roots, whose) = match &ca {
            Some(path) => (
                tls::roots_from_file(url, "tls_ca", path)?,
                format!("tls_ca={path}"),
            ),
            None => (
                tls::system_roots(url, "tls_ca")?,
                "the system's roots (no tls_ca)".to_owned(),
            ),
        };
        let client = match tls::client_pair(
            url,
            ["tls_cert", "tls_key"],
            cert.as_deref(),
            key.as_deref(),
        )? {
            Some((c, k)) => Some((
                tls::certificates(url, "tls_cert", c)?,
                tls::private_key(url, "tls_key", k)?,
            )),
            None => None,
        };
        let config = tls::client_config(
            url,
            Some(roots),
            tls::Verify::ChainAndName,
            client,
            &[b"h2"],
        )?;
        let token = token
            .map(|path| TokenFile::open(&path).map_err(|why| bad(format!("token_file: {why}"))))
            .transpose()?;
        Ok(Secure {
            config: Arc::new(config),
            addr: addr.to_owned(),
            name,
            roots: whose,
            token,
            failure: ForkLocal::new(),
            certificate: ForkLocal::new(),
        })
    }

    /// Why a TLS connection failed, in words that say what to change: from
    /// the rustls error in `status`'s causes, else the last failed
    /// handshake's.
    fn cause(&self, status: &tonic::Status) -> Option<String> {
        let mut next: Option<&(dyn std::error::Error + 'static)> =
            std::error::Error::source(status);
        while let Some(e) = next {
            let tls = e.downcast_ref::<rustls::Error>().or_else(|| {
                e.downcast_ref::<std::io::Error>()
                    .and_then(|io| io.get_ref())
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            });
            if let Some(tls) = tls {
                return Some(self.explain(tls));
            }
            next = e.source();
        }
        if status.metadata().get("grantid-code").is_some() {
            return None;
        }
        self.failure.get().lock().clone()
    }

    /// Keeps the cause of a TLS error for the call it fails.
    fn record(&self, e: &std::io::Error) {
        if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            *self.failure.get().lock() = Some(self.explain(tls));
            *self.certificate.get().lock() = crate::tls::certificate_failure(e).is_some();
        }
    }

    /// A rustls error, with what to change.
    fn explain(&self, e: &rustls::Error) -> String {
        use rustls::{AlertDescription as A, CertificateError as C, Error as E};
        let what = match e {
            E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => format!(
                "the server's certificate is not signed by a CA this client trusts ({}): give \
                 the CA that signed it in tls_ca",
                self.roots
            ),
            E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
                format!(
                    "the server's certificate is not valid for the host name of the URL ({}): \
                     connect by a name the certificate holds",
                    self.addr
                )
            }
            E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
                "the server's certificate has expired".to_owned()
            }
            E::AlertReceived(A::CertificateRequired | A::HandshakeFailure) => {
                "the server requires a client certificate: give tls_cert and tls_key".to_owned()
            }
            E::AlertReceived(A::UnknownCA | A::BadCertificate | A::AccessDenied) => {
                "the server refused this client's certificate (not signed by the CA it trusts \
                 for clients)"
                    .to_owned()
            }
            E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
                "the server does not speak TLS (a plaintext server is grpc://)".to_owned()
            }
            _ => "TLS failed".to_owned(),
        };
        format!("{what} ({e})")
    }
}

/// The connector of a `grpcs://` channel: TCP, then a TLS handshake with
/// the URL's host name and ALPN `h2`.
#[derive(Clone)]
struct TlsConnect(Arc<Secure>);

impl tonic::codegen::Service<tonic::codegen::http::Uri> for TlsConnect {
    type Response = hyper_util::rt::TokioIo<Watched>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, std::io::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let secure = Arc::clone(&self.0);
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(&secure.addr).await?;
            tcp.set_nodelay(true)?;
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(&secure.config));
            match connector.connect(secure.name.clone(), tcp).await {
                Ok(tls) => Ok(hyper_util::rt::TokioIo::new(Watched { tls, secure })),
                Err(e) => {
                    secure.record(&e);
                    Err(e)
                }
            }
        })
    }
}

/// A client TLS connection that records the cause of a TLS error met
/// after the handshake: a TLS 1.3 server refuses a client certificate (or
/// its absence) with an alert the client reads after its side of the
/// handshake is done.
struct Watched {
    tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
    secure: Arc<Secure>,
}

impl Watched {
    fn seen<T>(&self, p: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if let Poll::Ready(Err(e)) = &p {
            self.secure.record(e);
        }
        p
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.tls).poll_read(cx, buf);
        self.seen(p)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.tls).poll_write(cx, buf);
        self.seen(p)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.tls).poll_write_vectored(cx, bufs);
        self.seen(p)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.tls).poll_flush(cx);
        self.seen(p)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// What changes when a file is written or replaced: its modification
/// time, length and inode (`None` when it cannot be read).
type Signature = Option<(SystemTime, u64, u64)>;

fn signature(path: &str) -> Signature {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// A token as read: the file's signature before the read, and the header.
#[derive(Clone)]
struct Token {
    seen: Signature,
    header: AsciiMetadataValue,
}

/// One process's view of the token file.
#[derive(Default)]
struct TokenSlot {
    token: Option<Token>,
    /// The signature of a read that failed (logged once, not retried until
    /// the file changes again).
    failed: Signature,
}

/// The bearer token of `token_file`: the file's first line that is not
/// empty or a `#` comment. Read again when the file changes (its time,
/// length or inode), so a token is rotated without a restart; a file that
/// cannot be read then keeps the token it had. Never printed.
struct TokenFile {
    path: String,
    /// The token read when the URL was opened: where each process starts.
    first: Token,
    /// Per process: a `fork()` child never takes a lock its parent's
    /// threads may have held (`forklocal.rs`).
    current: ForkLocal<TokenSlot>,
}

impl TokenFile {
    fn open(path: &str) -> Result<TokenFile, String> {
        Ok(TokenFile {
            path: path.to_owned(),
            first: TokenFile::read(path)?,
            current: ForkLocal::new(),
        })
    }

    /// The file's signature and `Bearer TOKEN`; the messages never hold
    /// the token (nor the path, a secret's place, as `tls_key`'s).
    fn read(path: &str) -> Result<Token, String> {
        let seen = signature(path);
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file: {e}"))?;
        let token = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or("the token file holds no token (one line: the token)")?;
        if token
            .chars()
            .any(|c| c.is_whitespace() || !c.is_ascii_graphic())
        {
            return Err(
                "the token file's token must be one word of printable ASCII, alone on its line"
                    .into(),
            );
        }
        let header = AsciiMetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| "the token file's token is not a valid header value".to_owned())?;
        Ok(Token { seen, header })
    }

    /// `Bearer TOKEN`, read again when the file changed.
    fn header(&self) -> AsciiMetadataValue {
        let mut slot = self.current.get().lock();
        let now = signature(&self.path);
        let seen = slot.token.as_ref().map_or(&self.first.seen, |t| &t.seen);
        if now.is_some() && now != *seen && now != slot.failed {
            match TokenFile::read(&self.path) {
                Ok(fresh) => {
                    slot.token = Some(fresh);
                    slot.failed = None;
                }
                Err(why) => {
                    log::warn!(target: "grantid", "event=token_file_unreadable error={why:?}");
                    slot.failed = now;
                }
            }
        }
        slot.token
            .as_ref()
            .map_or(&self.first.header, |t| &t.header)
            .clone()
    }
}

fn worker_from_proto(
    store: &str,
    w: &grantid_proto::v1::WorkerStatus,
) -> Result<WorkerStatus, GrantError> {
    let layout = w.layout.as_ref();
    let record = StoredWorker {
        namespace: &w.namespace,
        layout: [
            layout.map(|l| i128::from(l.timestamp_bits)),
            layout.map(|l| i128::from(l.worker_bits)),
            layout.map(|l| i128::from(l.sequence_bits)),
            layout.map(|l| i128::from(l.epoch_ms)),
            layout.map(|l| i128::from(l.tick_ms)),
        ],
        worker: Some(i128::from(w.worker)),
        holder: w.holder.map(i128::from),
        lease_expiry: Some(i128::from(w.lease_expiry)),
        high_water: Some(i128::from(w.high_water)),
        fencing: Some(i128::from(w.fencing)),
    };
    worker_status(store, &record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::parse;
    use crate::url::Target;

    fn token_file(tag: &str, text: &str) -> (std::path::PathBuf, TokenFile) {
        let dir = std::env::temp_dir().join(format!(
            "grantid-token-{tag}-{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, text).unwrap();
        let tf = TokenFile::open(path.to_str().unwrap()).unwrap();
        (dir, tf)
    }

    /// Writes `text` and gives the file back its time, as a rewrite within
    /// one tick of the file system's clock does.
    fn rewrite_within_a_tick(path: &std::path::Path, text: &str) {
        let t = std::fs::metadata(path).unwrap().modified().unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    /// A token file caught empty (truncated, not yet written) and written
    /// within the same tick is read again: its length changed. The time
    /// alone missed it, and the old token was kept for ever.
    #[test]
    fn a_token_rewritten_within_one_tick_is_read_again() {
        let (dir, tf) = token_file("tick", "first-token\n");
        let path = dir.join("token");
        assert_eq!(tf.header(), "Bearer first-token");
        rewrite_within_a_tick(&path, "");
        assert_eq!(
            tf.header(),
            "Bearer first-token",
            "an unreadable file keeps the token"
        );
        rewrite_within_a_tick(&path, "second-token\n");
        assert_eq!(tf.header(), "Bearer second-token");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A `fork()` child never takes the lock of its parent's token state:
    /// with the parent's lock held at the fork (by a thread that does not
    /// exist in the child), the child reads its own token at once.
    #[test]
    fn a_fork_child_reads_its_token_whatever_lock_the_parent_held() {
        let (dir, tf) = token_file("fork", "forked-token\n");
        let held = tf.current.get().lock();
        // SAFETY: the child only reads a file and exits with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = tf.header() == "Bearer forked-token";
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        drop(held);
        let started = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child.
            let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if done == pid {
                break;
            }
            if started.elapsed() > Duration::from_secs(10) {
                // SAFETY: our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                panic!("the child was still blocked after 10 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn urls() {
        let u = parse("grpc://ids.internal:50051?timeout_ms=250").unwrap();
        assert_eq!(u.target, Target::Grpc("ids.internal:50051".into()));
        assert_eq!(u.options.timeout, Duration::from_millis(250));
        for (url, needle) in [
            ("grpc:", "grpc://HOST:PORT"),
            ("grpc://", "grpc://HOST:PORT"),
            ("grpc://h:1?bogus=2", "unknown option"),
        ] {
            let e = parse(url).unwrap_err();
            assert!(e.message().contains(needle), "{url}: {e}");
        }
        for addr in ["h", "h:", ":50051", "h:99999", "h:x"] {
            let e = GrpcAuthority::new(addr, Options::default()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{addr}");
        }
    }

    #[test]
    fn grpcs_files_are_read_when_the_url_is_opened() {
        let dir = std::env::temp_dir().join(format!("grantid-grpcs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.token");
        std::fs::write(&empty, "# no token\n").unwrap();
        let spaced = dir.join("spaced.token");
        std::fs::write(&spaced, "two words\n").unwrap();
        let missing = dir.join("missing.pem");
        for (url, needle) in [
            (
                format!("grpcs://h:1?tls_ca={}", missing.display()),
                "tls_ca=",
            ),
            ("grpcs://h:1?tls_cert=/c.pem".to_owned(), "go together"),
            (
                format!("grpcs://h:1?token_file={}", missing.display()),
                "token_file: cannot read the token file",
            ),
            (
                format!("grpcs://h:1?token_file={}", empty.display()),
                "holds no token",
            ),
            (
                format!("grpcs://h:1?token_file={}", spaced.display()),
                "one word",
            ),
            ("grpcs://h?token_file=/t".to_owned(), "grpcs://HOST:PORT"),
        ] {
            let Err(e) = crate::open(&url) else {
                panic!("{url} opens")
            };
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}");
            assert!(e.message().contains(needle), "{url}: {e}");
            if url.contains("token_file") {
                assert!(!e.message().contains(&*dir.to_string_lossy()), "{e}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn request() -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: 1,
            request_id: 1,
            worker: None,
            not_before: 0,
            now: 0,
            duration: 10,
            layout: grantid::Layout::default(),
        }
    }

    #[test]
    fn a_server_that_is_down_is_uncertain_within_the_timeout() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = Options {
            timeout: Duration::from_millis(300),
            ..Options::default()
        };
        let a = GrpcAuthority::new(&format!("127.0.0.1:{port}"), options).unwrap();
        let t0 = Instant::now();
        match a.acquire(&request()) {
            Err(GrantError::Unavailable(why)) => assert!(why.contains("grpc://"), "{why}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        // From inside a tokio runtime too (a thread of our own runs it).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let inside = rt.block_on(async { a.acquire(&request()) });
        assert!(matches!(inside, Err(GrantError::Unavailable(_))));
        // The bounded lead of a server that cannot be asked is unknown,
        // within the timeout, and not kept: a later call asks again.
        for _ in 0..2 {
            let t0 = Instant::now();
            assert_eq!(a.max_lead_ms(), None);
            assert_eq!(rt.block_on(async { a.max_lead_ms() }), None);
            assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        }
        assert_eq!(a.lead.get(), None);
        a.release(&Grant {
            namespace: "ns".into(),
            worker: 0,
            incarnation: 1,
            grant_id: 1,
            start: 0,
            end: 1,
        });
        // A server that takes the connection and never answers: unknown
        // once timeout_ms has passed.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let options = Options {
            timeout: Duration::from_millis(300),
            ..Options::default()
        };
        let a = GrpcAuthority::new(&silent.local_addr().unwrap().to_string(), options).unwrap();
        let t0 = Instant::now();
        assert_eq!(a.max_lead_ms(), None);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
