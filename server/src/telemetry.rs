//! Prometheus metrics through the `metrics` facade; their names, labels
//! and meanings are the table of docs/SERVICE.md, "Metrics". Without
//! `--metrics` no recorder is installed and every update is a no-op.

use std::net::SocketAddr;
use std::time::Instant;

use grantid::{Error, ErrorKind, Stats};
use metrics::{Counter, Histogram, counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tonic::Code;

/// Request latency buckets, in seconds: 50 µs to 1 s, dense below 1 ms
/// where the service's targets lie (p50 < 0.2 ms, p99 < 1 ms).
const LATENCY_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_2, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

/// Installs the Prometheus recorder and its HTTP listener on `addr`
/// (`GET /metrics`). Must run inside the server's tokio runtime.
pub fn install(addr: SocketAddr) -> Result<(), Error> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Full("grantid_request_duration_seconds".into()),
            &LATENCY_BUCKETS,
        )
        .and_then(|b| b.install())
        .map_err(|e| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("--metrics {addr}: cannot start the exporter: {e}"),
            )
        })?;
    describe();
    Ok(())
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "grantid_requests_total",
        "RPCs answered, by method and gRPC code."
    );
    describe_histogram!(
        "grantid_request_duration_seconds",
        Unit::Seconds,
        "Time in the handler, by method."
    );
    describe_counter!("grantid_ids_issued_total", "IDs returned to clients.");
    describe_counter!(
        "grantid_tls_handshakes_refused_total",
        "Connections refused at their TLS handshake."
    );
    describe_counter!(
        "grantid_connections_refused_total",
        "Connections refused at accept, by the cap that only authenticated connections fill."
    );
    describe_counter!(
        "grantid_connections_closed_total",
        "Unauthenticated connections the server closed, by reason (a cap, or no call in time)."
    );
    describe_gauge!("grantid_connections", "Connections held.");
    describe_counter!(
        "grantid_unauthenticated_total",
        "Calls refused for their bearer token (UNAUTHENTICATED)."
    );
    describe_counter!(
        "grantid_reloads_total",
        "Reloads of the certificates and tokens, by what and outcome."
    );
    describe_counter!(
        "grantid_grant_answers_total",
        "GrantService.Acquire answers of the server's authority, by kind."
    );
    describe_gauge!(
        "grantid_grant_remaining_seconds",
        Unit::Seconds,
        "Committed time left in the server's grants."
    );
    describe_gauge!("grantid_worker", "The server's worker value; -1 when none.");
    describe_gauge!("grantid_serving", "1 when health is SERVING, else 0.");
    describe_counter!(
        "grantid_grants_acquired_total",
        "Grants the server's own generator received."
    );
    describe_counter!(
        "grantid_uncertain_retries_total",
        "Uncertain answers of the authority to the server's generator, retried."
    );
    describe_counter!(
        "grantid_lease_losses_total",
        "Confirmed losses of the server's worker."
    );
    describe_counter!(
        "grantid_loss_claims_refused_total",
        "Renewals claiming a lost grant that were not taken as evidence (no quarantine)."
    );
}

/// Pre-registered handles of one method's success path (the hot path takes
/// no registry lookup).
#[derive(Debug, Clone)]
pub struct MethodMetrics {
    method: &'static str,
    ok: Counter,
    latency: Histogram,
}

impl MethodMetrics {
    /// Handles for `method`. Make them after [`install`]: handles made
    /// before a recorder exists stay no-ops.
    pub fn new(method: &'static str) -> MethodMetrics {
        MethodMetrics {
            method,
            ok: counter!("grantid_requests_total", "method" => method, "code" => "OK"),
            latency: histogram!("grantid_request_duration_seconds", "method" => method),
        }
    }

    /// Starts timing one call. A call dropped before [`Call::done`] (its
    /// client went away or its deadline passed, and tonic dropped the
    /// handler) is recorded as `CANCELLED`.
    pub fn start(&self) -> Call<'_> {
        Call {
            metrics: self,
            started: Instant::now(),
            answered: false,
        }
    }

    fn record(&self, started: Instant, code: Code) {
        self.latency.record(started.elapsed().as_secs_f64());
        if code == Code::Ok {
            self.ok.increment(1);
        } else {
            counter!("grantid_requests_total", "method" => self.method, "code" => code_name(code))
                .increment(1);
        }
    }
}

/// One call being timed; see [`MethodMetrics::start`].
#[derive(Debug)]
pub struct Call<'a> {
    metrics: &'a MethodMetrics,
    started: Instant,
    answered: bool,
}

impl Call<'_> {
    /// Records the call as answered with `code`.
    pub fn done(mut self, code: Code) {
        self.answered = true;
        self.metrics.record(self.started, code);
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.metrics.record(self.started, Code::Cancelled);
        }
    }
}

/// The upper-case name of a gRPC code, as in the gRPC specification.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Counts a connection refused at its TLS handshake.
pub fn tls_refused() {
    counter!("grantid_tls_handshakes_refused_total").increment(1);
}

/// Counts a connection refused at accept: `reason` names the cap
/// (`connections`, `peer`).
pub fn connection_refused(reason: &'static str) {
    counter!("grantid_connections_refused_total", "reason" => reason).increment(1);
}

/// Counts a connection the server closed: `reason` is the cap it made room
/// under (`connections`, `peer`, `handshakes`) or `no_call`.
pub fn connection_closed(reason: &'static str) {
    counter!("grantid_connections_closed_total", "reason" => reason).increment(1);
}

/// Publishes how many connections are held.
pub fn connections_held(n: usize) {
    gauge!("grantid_connections").set(n as f64);
}

/// Counts a call refused for its bearer token (`UNAUTHENTICATED`).
pub fn unauthenticated() {
    counter!("grantid_unauthenticated_total").increment(1);
}

/// Counts a reload of the certificates or tokens, by outcome (`ok`,
/// `failed`).
pub fn reload(what: &'static str, outcome: &'static str) {
    counter!("grantid_reloads_total", "what" => what, "outcome" => outcome).increment(1);
}

/// Counts one answer of the server's authority to a GrantService call.
pub fn grant_answer(answer: &'static str) {
    counter!("grantid_grant_answers_total", "answer" => answer).increment(1);
}

/// Counts one renewal whose claim of a lost grant was not taken as
/// evidence: `reason` is `scoped` (a token bound to namespaces) or `bound`
/// (beyond any grant the store could have made).
pub fn claim_refused(reason: &'static str) {
    counter!("grantid_loss_claims_refused_total", "reason" => reason).increment(1);
}

/// Publishes the server generator's state (called by the health watcher).
pub fn generator_state(stats: Option<&Stats>, tick_ms: u64, serving: bool) {
    gauge!("grantid_serving").set(if serving { 1.0 } else { 0.0 });
    let Some(s) = stats else {
        gauge!("grantid_worker").set(-1.0);
        gauge!("grantid_grant_remaining_seconds").set(0.0);
        return;
    };
    gauge!("grantid_worker").set(s.worker.map_or(-1.0, f64::from));
    gauge!("grantid_grant_remaining_seconds")
        .set((s.remaining_ticks.saturating_mul(tick_ms)) as f64 / 1000.0);
    counter!("grantid_grants_acquired_total").absolute(s.grants_acquired);
    counter!("grantid_uncertain_retries_total").absolute(s.uncertain_retries);
    counter!("grantid_lease_losses_total").absolute(s.lease_losses);
}
