//! `grantid.v1.IdGeneratorService`, and the service design's
//! `hispeeddesign.idgen.v1.IdGeneratorService` through the same handlers:
//! IDs from the server's core generator.
//! The server never makes an ID itself: every ID comes from
//! [`grantid::Generator`], inside a grant the authority committed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use grantid::{Error, Generator};
use grantid_proto::idgen_v1 as design;
use grantid_proto::v1::id_generator_service_server::IdGeneratorService;
use grantid_proto::v1::{
    GenerateIdBatchRequest, GenerateIdBatchResponse, GenerateIdRequest, GenerateIdResponse,
};
use metrics::Counter;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status};

use crate::State;
use crate::codes::{internal_panic, invalid, result_code, status_of};
use crate::telemetry::MethodMetrics;

/// Largest `count` of one GenerateIdBatch call (the service design's
/// batch limit).
pub const MAX_BATCH: i32 = 1_000;
/// Longest `caller_service` accepted, in bytes: a service name, not a
/// payload.
pub const MAX_CALLER_LEN: usize = 256;
/// Calls that may wait on a blocking thread at once (a generator call waits
/// at most its `max_wait`, 100 ms by default, when the clock must move
/// first); more wait for a permit without holding a thread.
const BLOCKING_PERMITS: usize = 64;

/// The IdGeneratorService of one server.
#[derive(Debug)]
pub struct IdService {
    state: Arc<State>,
    blocking: Arc<Semaphore>,
    unary: MethodMetrics,
    batch: MethodMetrics,
    issued: Counter,
}

impl IdService {
    pub(crate) fn new(state: Arc<State>) -> IdService {
        IdService {
            state,
            blocking: Arc::new(Semaphore::new(BLOCKING_PERMITS)),
            unary: MethodMetrics::new("GenerateId"),
            batch: MethodMetrics::new("GenerateIdBatch"),
            issued: metrics::counter!("grantid_ids_issued_total"),
        }
    }

    /// Whether the call's bearer token may take IDs of `namespace` (empty:
    /// the server's).
    fn allowed<T>(&self, request: &Request<T>, namespace: &str) -> Result<(), Status> {
        let namespace = if namespace.is_empty() {
            &self.state.namespace
        } else {
            namespace
        };
        crate::auth::allow(request.extensions(), Some(namespace))
    }

    fn check(&self, caller: &str, namespace: &str) -> Result<Arc<Generator>, Status> {
        if caller.len() > MAX_CALLER_LEN {
            return Err(invalid(format!(
                "caller_service is {} bytes long, at most {MAX_CALLER_LEN} are accepted",
                caller.len()
            )));
        }
        if !namespace.is_empty() && namespace != self.state.namespace {
            return Err(Status::not_found(format!(
                "namespace {namespace:?} is not served here (this server serves {:?})",
                self.state.namespace
            )));
        }
        self.state.generator()
    }

    /// Runs a generator call that may wait on a blocking thread, with a
    /// panic caught and reported as `INTERNAL`.
    async fn blocking<T: Send + 'static>(
        &self,
        method: &'static str,
        generator: Arc<Generator>,
        f: impl FnOnce(&Generator) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Status> {
        let _permit = self
            .blocking
            .acquire()
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        let joined =
            tokio::task::spawn_blocking(move || catch_unwind(AssertUnwindSafe(|| f(&generator))))
                .await;
        match joined {
            Ok(Ok(result)) => result.map_err(|e| status_of(&e)),
            _ => Err(internal_panic(method)),
        }
    }

    async fn generate_id_inner(&self, r: &GenerateIdRequest) -> Result<GenerateIdResponse, Status> {
        let generator = self.check(&r.caller_service, &r.namespace)?;
        let id = match generator.try_next_id() {
            Some(id) => id,
            None => {
                self.blocking("GenerateId", Arc::clone(&generator), |g| g.next_id())
                    .await?
            }
        };
        let d = generator.decode(id).map_err(|e| status_of(&e))?;
        Ok(GenerateIdResponse {
            id: id as i64,
            id_str: id.to_string(),
            timestamp_ms: d.unix_ms as i64,
            // Fit: at most 32 bits each, the datacenter fewer.
            datacenter_id: d.datacenter as i32,
            worker_id: d.datacenter_worker as i32,
            namespace: self.state.namespace.clone(),
        })
    }

    async fn generate_batch_inner(
        &self,
        r: &GenerateIdBatchRequest,
    ) -> Result<GenerateIdBatchResponse, Status> {
        if !(1..=MAX_BATCH).contains(&r.count) {
            return Err(invalid(format!(
                "count must be 1 to {MAX_BATCH}, got {}",
                r.count
            )));
        }
        let generator = self.check(&r.caller_service, &r.namespace)?;
        let count = r.count as usize;
        let ids = self
            .blocking("GenerateIdBatch", generator, move |g| g.next_ids(count))
            .await?;
        let ids_str = ids.iter().map(u64::to_string).collect();
        let layout = &self.state.layout;
        Ok(GenerateIdBatchResponse {
            ids: ids.into_iter().map(|id| id as i64).collect(),
            ids_str,
            epoch_offset_ms: layout.epoch_ms() as i64,
            namespace: self.state.namespace.clone(),
            layout: Some(layout.into()),
        })
    }
}

/// The caller's name for a debug log line (cut to [`MAX_CALLER_LEN`]
/// bytes); nothing is copied unless debug logging is on.
fn log_caller(caller: &str) -> &str {
    if !log::log_enabled!(target: "grantid_server", log::Level::Debug) {
        return "";
    }
    let mut end = caller.len().min(MAX_CALLER_LEN);
    while !caller.is_char_boundary(end) {
        end -= 1;
    }
    &caller[..end]
}

#[tonic::async_trait]
impl IdGeneratorService for IdService {
    async fn generate_id(
        &self,
        request: Request<GenerateIdRequest>,
    ) -> Result<Response<GenerateIdResponse>, Status> {
        let call = self.unary.start();
        let allowed = self.allowed(&request, &request.get_ref().namespace);
        let request = request.into_inner();
        let caller = log_caller(&request.caller_service);
        let r = crate::auth::guarded(allowed, self.generate_id_inner(&request)).await;
        call.done(result_code(&r));
        log::debug!(target: "grantid_server", "event=call method=GenerateId caller={caller:?} code={:?}", result_code(&r));
        if r.is_ok() {
            self.issued.increment(1);
        }
        r.map(Response::new)
    }

    async fn generate_id_batch(
        &self,
        request: Request<GenerateIdBatchRequest>,
    ) -> Result<Response<GenerateIdBatchResponse>, Status> {
        let call = self.batch.start();
        let allowed = self.allowed(&request, &request.get_ref().namespace);
        let request = request.into_inner();
        let caller = log_caller(&request.caller_service);
        let r = crate::auth::guarded(allowed, self.generate_batch_inner(&request)).await;
        call.done(result_code(&r));
        log::debug!(target: "grantid_server", "event=call method=GenerateIdBatch caller={caller:?} code={:?}", result_code(&r));
        if let Ok(b) = &r {
            self.issued.increment(b.ids.len() as u64);
        }
        r.map(Response::new)
    }
}

/// `hispeeddesign.idgen.v1.IdGeneratorService`: the calls of the service
/// design's file, answered by the `grantid.v1` handlers (same checks,
/// tokens, metrics and logs) for the server's namespace.
#[derive(Debug)]
pub struct DesignIdService(pub(crate) Arc<IdService>);

#[tonic::async_trait]
impl design::id_generator_service_server::IdGeneratorService for DesignIdService {
    async fn generate_id(
        &self,
        request: Request<design::GenerateIdRequest>,
    ) -> Result<Response<design::GenerateIdResponse>, Status> {
        let answer = IdGeneratorService::generate_id(&*self.0, request.map(Into::into)).await?;
        Ok(answer.map(Into::into))
    }

    async fn generate_id_batch(
        &self,
        request: Request<design::GenerateIdBatchRequest>,
    ) -> Result<Response<design::GenerateIdBatchResponse>, Status> {
        let answer =
            IdGeneratorService::generate_id_batch(&*self.0, request.map(Into::into)).await?;
        Ok(answer.map(Into::into))
    }
}
