//! `grantid.v1.GrantService`: grants for embedded generators (the
//! `grpc://` authority URL), forwarded to the server's own authority. The
//! server adds no rule of its own: the authority allocates, records, and
//! answers a retried (incarnation, request_id) with the recorded grant.
//! `Status` and `Init` are the authority's own `status` and `init`, so
//! `grantid authority status|init grpc://...` work from anywhere.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use grantid::{Error, ErrorKind, GrantError};
use grantid_authority::{Authority, WorkerStatus};
use grantid_proto::v1::acquire_response::Answer;
use grantid_proto::v1::grant_service_server::GrantService;
use grantid_proto::v1::{
    AcquireRequest, AcquireResponse, InitRequest, InitResponse, ReleaseRequest, ReleaseResponse,
    StatusRequest, StatusResponse,
};
use grantid_proto::{grant_from_proto, grant_request_from_proto};
use tonic::{Request, Response, Status};

use crate::codes::{invalid, result_code, status_of};
use crate::telemetry::{MethodMetrics, grant_answer};

/// The GrantService of one server.
pub struct GrantForwarder {
    authority: Arc<dyn Authority>,
    acquire: MethodMetrics,
    release: MethodMetrics,
    status: MethodMetrics,
    init: MethodMetrics,
}

impl std::fmt::Debug for GrantForwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantForwarder").finish_non_exhaustive()
    }
}

impl GrantForwarder {
    pub(crate) fn new(authority: Arc<dyn Authority>) -> GrantForwarder {
        GrantForwarder {
            authority,
            acquire: MethodMetrics::new("Acquire"),
            release: MethodMetrics::new("Release"),
            status: MethodMetrics::new("Status"),
            init: MethodMetrics::new("Init"),
        }
    }

    /// Runs `op` on the authority on a blocking thread (it blocks on its
    /// store, bounded by its timeout_ms); a panic is `Unavailable`.
    async fn blocking<T: Send + 'static>(
        &self,
        what: &str,
        op: impl FnOnce(&dyn Authority) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Status> {
        let authority = Arc::clone(&self.authority);
        let joined = tokio::task::spawn_blocking(move || {
            catch_unwind(AssertUnwindSafe(|| op(authority.as_ref())))
        })
        .await;
        match joined {
            Ok(Ok(r)) => r.map_err(|e| status_of(&e)),
            _ => Err(status_of(&Error::new(
                ErrorKind::Unavailable,
                format!("the server's authority panicked during {what}"),
            ))),
        }
    }

    async fn status_inner(&self, r: StatusRequest) -> Result<StatusResponse, Status> {
        let namespace = Some(r.namespace).filter(|n| !n.is_empty());
        let workers = self
            .blocking("status", move |a| a.status(namespace.as_deref()))
            .await?;
        Ok(StatusResponse {
            workers: workers.iter().map(worker_to_proto).collect(),
        })
    }

    async fn acquire_inner(&self, r: AcquireRequest) -> Result<AcquireResponse, Status> {
        let request = r
            .request
            .as_ref()
            .ok_or_else(|| invalid("request is missing"))?;
        let request = grant_request_from_proto(request).map_err(|e| status_of(&e))?;
        let authority = Arc::clone(&self.authority);
        // The authority blocks on its store (bounded by its timeout_ms).
        let joined = tokio::task::spawn_blocking(move || {
            catch_unwind(AssertUnwindSafe(|| authority.acquire(&request)))
        })
        .await;
        let answer = match joined {
            Ok(Ok(Ok(grant))) => Answer::Granted((&grant).into()),
            Ok(Ok(Err(GrantError::Lost(why)))) => Answer::Lost(why),
            Ok(Ok(Err(GrantError::Unavailable(why)))) => Answer::Unavailable(why),
            Ok(Ok(Err(GrantError::Invalid(why)))) => Answer::Unavailable(format!(
                "the server's authority gave an invalid grant: {why}"
            )),
            _ => Answer::Unavailable("the server's authority panicked".into()),
        };
        grant_answer(match &answer {
            Answer::Granted(_) => "granted",
            Answer::Lost(_) => "lost",
            Answer::Unavailable(_) => "unavailable",
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
        let authority = Arc::clone(&self.authority);
        let joined = tokio::task::spawn_blocking(move || {
            catch_unwind(AssertUnwindSafe(|| authority.release(&grant)))
        })
        .await;
        match joined {
            Ok(Ok(())) => Ok(ReleaseResponse {}),
            _ => Err(Status::unavailable(
                "the server's authority panicked during release",
            )),
        }
    }
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
        let started = Instant::now();
        let r = self.acquire_inner(request.into_inner()).await;
        self.acquire.done(started, result_code(&r));
        r.map(Response::new)
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<ReleaseResponse>, Status> {
        let started = Instant::now();
        let r = self.release_inner(request.into_inner()).await;
        self.release.done(started, result_code(&r));
        r.map(Response::new)
    }

    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let started = Instant::now();
        let r = self.status_inner(request.into_inner()).await;
        self.status.done(started, result_code(&r));
        r.map(Response::new)
    }

    async fn init(&self, _request: Request<InitRequest>) -> Result<Response<InitResponse>, Status> {
        let started = Instant::now();
        let r = self
            .blocking("init", |a| a.init())
            .await
            .map(|report| InitResponse { report });
        self.init.done(started, result_code(&r));
        r.map(Response::new)
    }
}
