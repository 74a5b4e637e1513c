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

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use grantid::{Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource};
use grantid_proto::v1::acquire_response::Answer;
use grantid_proto::v1::grant_service_client::GrantServiceClient;
use grantid_proto::v1::{
    AcquireRequest, InitRequest, LimitsRequest, ReleaseRequest, StatusRequest,
};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::answer::{WorkerRecord, worker_status};
use crate::blocking::Blocking;
use crate::url::Options;
use crate::{Authority, WorkerStatus};

/// Pause between attempts inside one call when the server cannot be
/// reached (the call's `timeout_ms` bounds the whole).
const RECONNECT_PAUSE: Duration = Duration::from_millis(50);

/// The gRPC authority. See the module docs.
pub struct GrpcAuthority {
    addr: String,
    endpoint: Endpoint,
    options: Options,
    /// This process's connection; its lock is held for the whole call, so
    /// the calls of one process run one at a time.
    conn: Blocking<GrantServiceClient<Channel>>,
    /// The server's answer to `Limits` (its authority's `max_lead_ms`),
    /// once it gave one.
    lead: OnceLock<Option<u64>>,
}

impl std::fmt::Debug for GrpcAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcAuthority")
            .field("addr", &self.addr)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl GrpcAuthority {
    /// A client of the server at `addr` (`HOST:PORT`). Does not connect.
    pub fn new(addr: &str, options: Options) -> Result<GrpcAuthority, Error> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("authority URL \"grpc://{addr}\": {why}"),
            )
        };
        let has_port = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !has_port {
            return Err(bad("expected grpc://HOST:PORT".into()));
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(options.timeout)
            .timeout(options.timeout)
            .tcp_nodelay(true);
        Ok(GrpcAuthority {
            addr: addr.to_owned(),
            endpoint,
            options,
            conn: Blocking::new(format!("grpc://{addr}")),
            lead: OnceLock::new(),
        })
    }

    /// Asks the server for its authority's bounded lead, on a connection
    /// of its own (so it never waits for another call of this process),
    /// within `timeout_ms`.
    fn ask_lead(&self) -> Result<Option<u64>, String> {
        let timeout = self.options.timeout;
        let own = Blocking::new(format!("grpc://{}", self.addr));
        let answer = run_on(&own, &self.endpoint, "Limits", async |mut client| {
            Ok(tokio::time::timeout(
                timeout,
                client.limits(with_deadline(LimitsRequest {}, timeout)),
            )
            .await)
        })
        .map_err(|e| e.to_string())?;
        match answer {
            Ok(Ok(response)) => Ok(response.into_inner().max_lead_ms),
            Ok(Err(status)) if status.code() == Code::Unimplemented => {
                Err("the server does not report its authority's bounds (no Limits)".into())
            }
            Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }

    fn unavailable(&self, why: impl std::fmt::Display) -> GrantError {
        GrantError::Unavailable(format!("grpc://{}: {why}", self.addr))
    }

    /// Runs `work` on this process's client.
    fn run<T: Send>(
        &self,
        what: &str,
        work: impl AsyncFnOnce(GrantServiceClient<Channel>) -> Result<T, GrantError> + Send,
    ) -> Result<T, GrantError> {
        run_on(&self.conn, &self.endpoint, what, work)
    }
}

/// Runs `work` on the client in `conn` (a lazy channel to `endpoint`, made
/// on first use and kept: it reconnects by itself), without a deadline of
/// its own: each call bounds itself by `timeout_ms`.
fn run_on<T: Send>(
    conn: &Blocking<GrantServiceClient<Channel>>,
    endpoint: &Endpoint,
    what: &str,
    work: impl AsyncFnOnce(GrantServiceClient<Channel>) -> Result<T, GrantError> + Send,
) -> Result<T, GrantError> {
    conn.run(what, async move |slot| {
        let client = slot.get_or_insert_with(|| GrantServiceClient::new(endpoint.connect_lazy()));
        work(client.clone()).await
    })
}

/// `message` with the caller's deadline sent along (`grpc-timeout`): the
/// server drops a call whose caller has given up, before it reaches the
/// store (docs/SERVICE.md, "Fan-in").
fn with_deadline<T>(message: T, left: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(left);
    request
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
                    "event=max_lead_unknown authority=grpc://{} error={why:?}",
                    self.addr
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
        self.run("Acquire", async |mut client| {
            let deadline = Instant::now() + timeout;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let status = match tokio::time::timeout(
                    left,
                    client.acquire(with_deadline(wire.clone(), left)),
                )
                .await
                {
                    Err(_) => {
                        return Err(self.unavailable(format!("no answer within {timeout:?}")));
                    }
                    Ok(Ok(response)) => {
                        return match response.into_inner().answer {
                            Some(Answer::Granted(g)) => Ok(grantid_proto::grant_from_proto(&g)),
                            Some(Answer::Lost(why)) => {
                                Err(GrantError::Lost(format!("grpc://{}: {why}", self.addr)))
                            }
                            Some(Answer::Unavailable(why)) => Err(self.unavailable(why)),
                            Some(Answer::Refused(why)) => {
                                Err(GrantError::Refused(format!("grpc://{}: {why}", self.addr)))
                            }
                            None => Err(GrantError::Invalid(format!(
                                "grpc://{}: the answer holds no outcome",
                                self.addr
                            ))),
                        };
                    }
                    Ok(Err(status)) => status,
                };
                let why = format!("{:?}: {}", status.code(), status.message());
                // Only a transport failure is tried again (same request
                // id: the server answers a repeat with the recorded grant);
                // a status the server chose (it carries the grantid code:
                // stopping, at capacity, ...) goes back to the generator,
                // which backs off.
                let pause = RECONNECT_PAUSE.min(deadline.saturating_duration_since(Instant::now()));
                let transport = status.code() == Code::Unavailable
                    && status.metadata().get("grantid-code").is_none();
                if !transport || pause.is_zero() {
                    return Err(self.unavailable(why));
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
            match tokio::time::timeout(timeout, client.release(with_deadline(wire, timeout))).await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(status)) => Err(self.unavailable(status.message())),
                Err(_) => Err(self.unavailable(format!("no answer within {timeout:?}"))),
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
            |kind, why: String| Error::new(kind, format!("grpc://{}: {what}: {why}", self.addr));
        match outcome.map_err(Error::from)? {
            Ok(Ok(response)) => decode(response.into_inner()),
            Ok(Err(status)) => {
                let kind = status
                    .metadata()
                    .get("grantid-code")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|code| ErrorKind::ALL.into_iter().find(|k| k.code() == code))
                    .unwrap_or(ErrorKind::Unavailable);
                Err(failed(
                    kind,
                    format!("{:?}: {}", status.code(), status.message()),
                ))
            }
            Err(_) => Err(failed(
                ErrorKind::Unavailable,
                format!("no answer within {timeout:?}"),
            )),
        }
    }
}

impl Authority for GrpcAuthority {
    /// The server's `init` of its own authority.
    fn init(&self) -> Result<String, Error> {
        let timeout = self.options.timeout;
        self.call(
            "Init",
            async |mut c| c.init(with_deadline(InitRequest {}, timeout)).await,
            |r| {
                Ok(format!(
                    "grpc://{}: the server's authority: {}",
                    self.addr, r.report
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
                "grpc://{}: a new deployment is declared with the server's own authority URL, \
                 where the store is (docs/AUTHORITIES.md, \"State loss\")",
                self.addr
            ),
        ))
    }

    /// A quarantine is started where the store is, like a new deployment.
    fn fence(&self) -> Result<String, Error> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "grpc://{}: fence the server's own authority URL, where the store is \
                 (docs/AUTHORITIES.md, \"State loss\")",
                self.addr
            ),
        ))
    }

    /// The server's authority's worker records, checked like any store's
    /// (authority/src/answer.rs).
    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let request = StatusRequest {
            namespace: namespace.unwrap_or_default().to_owned(),
        };
        let store = format!("grpc://{}", self.addr);
        let timeout = self.options.timeout;
        self.call(
            "Status",
            async |mut c| c.status(with_deadline(request, timeout)).await,
            |r| {
                r.workers
                    .iter()
                    .map(|w| worker_from_proto(&store, w).map_err(Error::from))
                    .collect()
            },
        )
    }
}

fn worker_from_proto(
    store: &str,
    w: &grantid_proto::v1::WorkerStatus,
) -> Result<WorkerStatus, GrantError> {
    let layout = w.layout.as_ref();
    let record = WorkerRecord {
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
    use crate::url::{Target, parse};

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
