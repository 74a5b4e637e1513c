//! `grantid.v1.GrantService`: grants for embedded generators (the
//! `grpc://` authority URL), forwarded to the server's own authority. The
//! server adds no rule of its own: the authority allocates, records, and
//! answers a retried (incarnation, request_id) with the recorded grant.
//! `Status` and `Init` are the authority's own `status` and `init`, so
//! `grantid authority status|init grpc://...` work from anywhere; `Limits`
//! is its bounded lead (`max_lead_ms`), so a `grpc://` generator's
//! start-up check is the one it would make on the store's own URL.

use std::sync::Arc;

use grantid::{Error, ErrorKind, Grant, GrantError, GrantRequest};
use grantid_authority::{Authority, WorkerStatus};
use grantid_proto::v1::acquire_response::Answer;
use grantid_proto::v1::grant_service_server::GrantService;
use grantid_proto::v1::{
    AcquireRequest, AcquireResponse, InitRequest, InitResponse, LimitsRequest, LimitsResponse,
    ReleaseRequest, ReleaseResponse, StatusRequest, StatusResponse,
};
use grantid_proto::{grant_from_proto, grant_request_from_proto};
use tonic::{Request, Response, Status};

use crate::auth::{allow, guarded};
use crate::codes::{invalid, result_code, status_of};
use crate::sessions::{Class, Sessions};
use crate::telemetry::{self, MethodMetrics, grant_answer};

/// The GrantService of one server.
pub struct GrantForwarder {
    sessions: Arc<Sessions>,
    /// Why every grant is refused (the authority's memory is this server
    /// process: `static:N` without a state file), if it is.
    refused: Option<String>,
    acquire: MethodMetrics,
    release: MethodMetrics,
    status: MethodMetrics,
    init: MethodMetrics,
    limits: MethodMetrics,
}

impl std::fmt::Debug for GrantForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantForwarder").finish_non_exhaustive()
    }
}

impl GrantForwarder {
    pub(crate) fn new(sessions: Arc<Sessions>, refused: Option<String>) -> GrantForwarder {
        GrantForwarder {
            sessions,
            refused,
            acquire: MethodMetrics::new("Acquire"),
            release: MethodMetrics::new("Release"),
            status: MethodMetrics::new("Status"),
            init: MethodMetrics::new("Init"),
            limits: MethodMetrics::new("Limits"),
        }
    }

    /// Runs `op` on a free authority session (`crate::sessions`); a panic
    /// is `Unavailable`, a shed call `RESOURCE_EXHAUSTED`.
    async fn blocking<T: Send + 'static>(
        &self,
        what: &str,
        class: Class,
        op: impl FnOnce(&dyn Authority) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Status> {
        match self.sessions.run(class, op).await {
            Ok(Some(r)) => r.map_err(|e| status_of(&e)),
            Ok(None) => Err(status_of(&Error::new(
                ErrorKind::Unavailable,
                format!("the server's authority panicked during {what}"),
            ))),
            Err(e) => Err(status_of(&e)),
        }
    }

    async fn status_inner(&self, r: StatusRequest) -> Result<StatusResponse, Status> {
        let namespace = Some(r.namespace).filter(|n| !n.is_empty());
        let workers = self
            .blocking("status", Class::New, move |a| {
                a.status(namespace.as_deref())
            })
            .await?;
        Ok(StatusResponse {
            workers: workers.iter().map(worker_to_proto).collect(),
        })
    }

    async fn acquire_inner(
        &self,
        extensions: &tonic::Extensions,
        r: AcquireRequest,
    ) -> Result<AcquireResponse, Status> {
        let request = r
            .request
            .as_ref()
            .ok_or_else(|| invalid("request is missing"))?;
        let request = grant_request_from_proto(request).map_err(|e| status_of(&e))?;
        allow(extensions, Some(&request.namespace))?;
        if let Some(why) = &self.refused {
            grant_answer("refused");
            return Ok(AcquireResponse {
                answer: Some(Answer::Refused(why.clone())),
            });
        }
        let class = match request.worker {
            Some(_) => Class::Renewal,
            None => Class::New,
        };
        let scoped = crate::auth::scoped(extensions);
        let answer = match self
            .sessions
            .run(class, move |a| forward(a, &request, scoped))
            .await
        {
            Ok(Some(Ok(grant))) => Answer::Granted((&grant).into()),
            Ok(Some(Err(GrantError::Lost(why)))) => Answer::Lost(why),
            Ok(Some(Err(GrantError::Unavailable(why)))) => Answer::Unavailable(why),
            Ok(Some(Err(GrantError::Refused(why)))) => Answer::Refused(why),
            Ok(Some(Err(GrantError::Invalid(why)))) => Answer::Unavailable(format!(
                "the server's authority gave an invalid grant: {why}"
            )),
            Ok(None) => Answer::Unavailable("the server's authority panicked".into()),
            // Shed (or turned away by the drain) before it reached the
            // store: nothing was granted.
            Err(e) => {
                grant_answer(if e.kind() == ErrorKind::CapacityExhausted {
                    "shed"
                } else {
                    "unavailable"
                });
                return Err(status_of(&e));
            }
        };
        grant_answer(match &answer {
            Answer::Granted(_) => "granted",
            Answer::Lost(_) => "lost",
            Answer::Unavailable(_) => "unavailable",
            Answer::Refused(_) => "refused",
        });
        Ok(AcquireResponse {
            answer: Some(answer),
        })
    }

    async fn release_inner(&self, r: ReleaseRequest) -> Result<ReleaseResponse, Status> {
        let grant = r
            .grant
            .as_ref()
            .ok_or_else(|| invalid("grant is missing"))?;
        if grant.namespace.is_empty() {
            return Err(invalid("grant.namespace is empty"));
        }
        let grant = grant_from_proto(grant);
        self.blocking("release", Class::Renewal, move |a| {
            a.release(&grant);
            Ok(ReleaseResponse {})
        })
        .await
    }
}

/// The authority's answer to `request`. A renewal whose `not_before` lies
/// beyond the worker's high-water claims that the store lost a grant, and
/// the store would quarantine every namespace on it: from a caller whose
/// token is bound to namespaces it is answered `Lost` here, before the
/// store sees it, so that no effect leaves the caller's namespaces
/// (docs/SERVICE.md, "Threat model"). The high-water only grows, so a
/// claim within it when read is within it when the store decides.
fn forward(a: &dyn Authority, request: &GrantRequest, scoped: bool) -> Result<Grant, GrantError> {
    if let (true, Some(worker)) = (scoped, request.worker) {
        let high_water = a
            .renewal_high_water(request)
            .map_err(|e| GrantError::Unavailable(e.message().to_owned()))?;
        if let Some(high_water) = high_water.filter(|h| request.not_before > *h) {
            telemetry::claim_refused("scoped");
            log::warn!(
                target: "grantid_server",
                "event=loss_claim_refused reason=scoped namespace={:?} worker={worker} \
                 not_before={} high_water={high_water} note=\"a token bound to namespaces \
                 cannot quarantine the store; if the store lost state, fence it \
                 (grantid authority fence)\"",
                request.namespace,
                request.not_before
            );
            return Err(GrantError::Lost(format!(
                "worker {worker}: a renewal from tick {} beyond the worker's high-water (tick \
                 {high_water}) from a token bound to namespaces is {}: only an unscoped token \
                 or the store's own URL can start a quarantine; stop issuing from the worker \
                 and acquire again",
                request.not_before,
                grantid::NOT_EVIDENCE
            )));
        }
    }
    let answer = a.acquire(request);
    if let Err(GrantError::Lost(why)) = &answer
        && why.contains(grantid::NOT_EVIDENCE)
    {
        telemetry::claim_refused("bound");
        log::warn!(
            target: "grantid_server",
            "event=loss_claim_refused reason=bound namespace={:?} why={why:?}",
            request.namespace
        );
    }
    answer
}

fn worker_to_proto(w: &WorkerStatus) -> grantid_proto::v1::WorkerStatus {
    grantid_proto::v1::WorkerStatus {
        namespace: w.namespace.clone(),
        layout: Some((&w.layout).into()),
        worker: w.worker,
        holder: w.holder,
        lease_expiry: w.lease_expiry,
        high_water: w.high_water,
        fencing: w.fencing,
    }
}

#[tonic::async_trait]
impl GrantService for GrantForwarder {
    async fn acquire(
        &self,
        request: Request<AcquireRequest>,
    ) -> Result<Response<AcquireResponse>, Status> {
        let call = self.acquire.start();
        let (_, extensions, message) = request.into_parts();
        let r = self.acquire_inner(&extensions, message).await;
        call.done(result_code(&r));
        r.map(Response::new)
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let call = self.release.start();
        let namespace = request
            .get_ref()
            .grant
            .as_ref()
            .map_or("", |g| &g.namespace);
        let allowed = allow(request.extensions(), Some(namespace));
        let r = guarded(allowed, self.release_inner(request.into_inner())).await;
        call.done(result_code(&r));
        r.map(Response::new)
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let call = self.status.start();
        let namespace = Some(request.get_ref().namespace.as_str()).filter(|n| !n.is_empty());
        let allowed = allow(request.extensions(), namespace);
        let r = guarded(allowed, self.status_inner(request.into_inner())).await;
        call.done(result_code(&r));
        r.map(Response::new)
    }

    async fn init(&self, request: Request<InitRequest>) -> Result<Response<InitResponse>, Status> {
        let call = self.init.start();
        // Init is about the whole authority.
        let init = async {
            let report = self.blocking("init", Class::New, |a| a.init()).await?;
            Ok(InitResponse { report })
        };
        let r = guarded(allow(request.extensions(), None), init).await;
        call.done(result_code(&r));
        r.map(Response::new)
    }

    async fn limits(
        &self,
        _request: Request<LimitsRequest>,
    ) -> Result<Response<LimitsResponse>, Status> {
        let call = self.limits.start();
        // Asked of a session, not kept: a `grpc://` authority (a chained
        // server) learns its upstream's lead with a call of its own.
        let r = self
            .blocking("limits", Class::New, |a| Ok(a.max_lead_ms()))
            .await
            .map(|max_lead_ms| LimitsResponse { max_lead_ms });
        call.done(result_code(&r));
        r.map(Response::new)
    }
}
