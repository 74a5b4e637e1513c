//! A grant source written in a host language (Python, JavaScript), called
//! with a deadline and a bound on the calls left unanswered.
//!
//! The generator calls [`GrantSource::acquire`] on its renewal thread. A
//! host function cannot be called there directly: it runs on its own thread
//! (a Python callable with the GIL) or on the host's event loop (a JS
//! function through a threadsafe function), it may block or never answer,
//! and nothing can interrupt it. A binding therefore only *starts* a call
//! ([`Host::start_acquire`]) and hands it a [`Reply`]; whoever finishes the
//! call sends the answer there, from any thread, at any time or never.
//! [`HostedSource`] is the one machine that waits for those answers:
//!
//! 1. **Deadline.** Each `acquire` waits at most [`CallBounds::timeout`]; past
//!    it the answer is `Unavailable` (uncertain: the core retries the same
//!    request), so a blocked host stalls renewal instead of stopping it,
//!    start-up and `close()` with it.
//! 2. **The late answer serves its own request only.** A call that missed
//!    its deadline stays *pending*, keyed by (incarnation, request id). The
//!    next `acquire` waits for it again (at most the timeout) instead of
//!    calling the host again; its answer is returned if the request is the
//!    same (a retry reuses its request id), and dropped if the generator
//!    has moved on to another request. Every call has a channel of its
//!    own: an answer can reach no other call than the one it belongs to,
//!    and a call given up has no receiver left at all.
//! 3. **A bound on calls in flight.** A call counts as in flight from its
//!    start until it answers or the host drops its [`Reply`] (a Python
//!    thread that ended, a JS promise collected without settling). No new
//!    call starts while [`CallBounds::max_in_flight`] calls are in flight: each
//!    holds something of the host's (a thread, a promise and its handlers)
//!    and a host that never answers must not pile them up. With a bound of
//!    one, calls never overlap.
//! 4. **Giving up.** A pending call older than [`CallBounds::abandon_after`] is
//!    given up when the bound leaves room for another call: its receiver is
//!    dropped (its answer, if one ever comes, goes nowhere) and the host is
//!    called again. With a bound of one it is never given up.
//! 5. **A closed host** ([`Host::closed`]: the interpreter shutting down)
//!    is answered `Unavailable` at once, without a call and without waiting.
//! 6. **Release** ([`Host::start_release`]) is waited for at most the
//!    timeout too: a release that blocks must not hold `close()`. It is
//!    best effort, outside the bound (it is the last call), and a missed
//!    deadline is logged as `event=release_failed`.
//! 7. **Fork.** The pending call and the count of calls in flight are kept
//!    per process ([`ForkLocal`]): a `fork()` child neither waits for its
//!    parent's calls (their threads do not exist in it) nor counts them.
//!
//! A host's answer is classified by its binding (a thrown `LEASE_LOST`, a
//! Python `grantid.LeaseLost`, an unreadable grant); the machine passes it
//! on as it came.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use grantid::{Grant, GrantError, GrantRequest, GrantSource};

use crate::forklocal::ForkLocal;

/// What one `acquire` call of the host answers.
pub type Answer = Result<Grant, GrantError>;

/// How long a pending call is waited for before it may be given up, in
/// timeouts: 30 s at the bindings' default timeout of 2 s (the Node
/// binding's earlier fixed wait), and never shorter than the timeout
/// itself however large that is.
pub const ABANDON_AFTER_TIMEOUTS: u32 = 15;

/// The deadline and the bounds of a [`HostedSource`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBounds {
    /// The longest wait for one answer (the binding's source timeout).
    pub timeout: Duration,
    /// The most calls in flight at once (at least 1).
    pub max_in_flight: usize,
    /// How old a pending call must be before it may be given up.
    pub abandon_after: Duration,
}

impl CallBounds {
    /// `timeout`, one call in flight, a pending call given up (if the
    /// bound allows) after [`ABANDON_AFTER_TIMEOUTS`] timeouts.
    pub fn new(timeout: Duration) -> CallBounds {
        CallBounds {
            timeout,
            max_in_flight: 1,
            abandon_after: timeout.saturating_mul(ABANDON_AFTER_TIMEOUTS),
        }
    }

    /// The same, with at most `n` calls in flight (at least 1).
    #[must_use]
    pub fn max_in_flight(self, n: usize) -> CallBounds {
        CallBounds {
            max_in_flight: n.max(1),
            ..self
        }
    }
}

/// A host language's grant source: starts calls, answers them later.
pub trait Host: Send + Sync + 'static {
    /// The name of the timeout option in this binding, for messages
    /// (`source_timeout`, `sourceTimeoutMs`).
    const TIMEOUT_OPTION: &'static str;
    /// A hint added to the messages of calls that did not answer, in
    /// parentheses; empty for none.
    const STALL_HINT: &'static str = "";

    /// Starts one call of the host's acquire for `request`. The answer goes
    /// to `reply`, from any thread, whenever it comes; dropping every clone
    /// of `reply` without an answer ends the call. An error is the answer
    /// when the call could not even start (it is returned at once).
    fn start_acquire(&self, request: &GrantRequest, reply: Reply<Answer>)
    -> Result<(), GrantError>;

    /// Starts the host's release of `last`, answering `done` when it
    /// returns; `false` when the host has no release (the default).
    fn start_release(&self, last: &Grant, done: Reply<()>) -> bool {
        let _ = (last, done);
        false
    }

    /// Why the host can take no call now (its interpreter is shutting
    /// down), if so. The default: never closed.
    fn closed(&self) -> Option<String> {
        None
    }
}

/// Where the answer of one call goes. Clones share the call: the first
/// answer sent is delivered, later ones are dropped. The call stops
/// counting as in flight at its answer, or when the last clone is dropped.
pub struct Reply<T> {
    shared: Arc<ReplyShared<T>>,
}

struct ReplyShared<T> {
    sender: Mutex<Option<SyncSender<T>>>,
    in_flight: Arc<AtomicUsize>,
}

impl<T> Reply<T> {
    /// A reply counted in `in_flight`, and the receiver of its answer.
    fn counted(in_flight: &Arc<AtomicUsize>) -> (Reply<T>, Receiver<T>) {
        let (tx, rx) = mpsc::sync_channel(1);
        in_flight.fetch_add(1, Ordering::SeqCst);
        let shared = ReplyShared {
            sender: Mutex::new(Some(tx)),
            in_flight: Arc::clone(in_flight),
        };
        (
            Reply {
                shared: Arc::new(shared),
            },
            rx,
        )
    }

    /// Delivers the call's answer; `false` when the call was answered
    /// already or nobody waits for it any more (a late answer, dropped).
    pub fn send(&self, answer: T) -> bool {
        let sender = self
            .shared
            .sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(sender) = sender else {
            return false;
        };
        // Before the answer is visible: a caller that reads it and calls
        // again finds this call no longer in flight.
        self.shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        sender.try_send(answer).is_ok()
    }
}

impl<T> Clone for Reply<T> {
    fn clone(&self) -> Self {
        Reply {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for ReplyShared<T> {
    fn drop(&mut self) {
        let unanswered = self
            .sender
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if unanswered {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl<T> fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply").finish_non_exhaustive()
    }
}

/// A call that did not answer within its deadline.
struct Pending {
    key: (u64, u64),
    since: Instant,
    answer: Receiver<Answer>,
}

/// One process's calls.
#[derive(Default)]
struct Calls {
    pending: Option<Pending>,
    in_flight: Arc<AtomicUsize>,
}

/// A [`Host`] as a [`GrantSource`], each call bounded by [`CallBounds`].
pub struct HostedSource<H: Host> {
    host: H,
    limits: CallBounds,
    calls: ForkLocal<Calls>,
}

impl<H: Host> fmt::Debug for HostedSource<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostedSource")
            .field("limits", &self.limits)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl<H: Host> HostedSource<H> {
    /// `host`'s calls, bounded by `limits`.
    pub fn new(host: H, limits: CallBounds) -> HostedSource<H> {
        HostedSource {
            host,
            limits: limits.max_in_flight(limits.max_in_flight),
            calls: ForkLocal::new(),
        }
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The calls of this process that have neither answered nor been
    /// dropped by the host.
    pub fn in_flight(&self) -> usize {
        self.calls.get().lock().in_flight.load(Ordering::SeqCst)
    }

    fn late(&self, detail: &str) -> GrantError {
        let ms = self.limits.timeout.as_micros() as f64 / 1000.0;
        let hint = if H::STALL_HINT.is_empty() {
            String::new()
        } else {
            format!(" ({})", H::STALL_HINT)
        };
        GrantError::Unavailable(format!(
            "the grant source did not answer within {ms} ms ({}){detail}{hint}",
            H::TIMEOUT_OPTION
        ))
    }

    /// A pending call still unanswered, too young to be given up.
    fn still_pending(&self) -> GrantError {
        let until = if self.limits.max_in_flight > 1 {
            format!(
                " or is given up after {} s",
                self.limits.abandon_after.as_secs_f64()
            )
        } else {
            String::new()
        };
        self.late(&format!(
            "; an earlier call is still unanswered: no new call until it answers{until}"
        ))
    }

    /// `n` calls in flight, the most allowed.
    fn at_bound(&self, n: usize) -> GrantError {
        let calls = if n == 1 { "call is" } else { "calls are" };
        self.late(&format!(
            "; {n} {calls} still unanswered, the most allowed: no new call until one answers"
        ))
    }

    /// Waits for the pending call, if any. `Some` is the answer to return;
    /// `None` lets a new call start (no pending call, or one answered for
    /// another request, ended, or given up).
    fn wait_pending(&self, key: (u64, u64), in_flight: &AtomicUsize) -> Option<Answer> {
        let slot = self.calls.get();
        let pending = slot.lock().pending.take()?;
        match pending.answer.recv_timeout(self.limits.timeout) {
            Ok(answer) if pending.key == key => Some(answer),
            // An answer to an older request: the generator moved on.
            Ok(_) | Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                let n = in_flight.load(Ordering::SeqCst);
                let old = pending.since.elapsed() >= self.limits.abandon_after;
                if old && n < self.limits.max_in_flight {
                    // Given up: its receiver goes, so its answer goes nowhere.
                    return None;
                }
                let mut calls = slot.lock();
                if calls.pending.is_none() {
                    calls.pending = Some(pending);
                }
                Some(Err(if old {
                    self.at_bound(n)
                } else {
                    self.still_pending()
                }))
            }
        }
    }
}

impl<H: Host> GrantSource for HostedSource<H> {
    fn acquire(&self, request: &GrantRequest) -> Answer {
        if let Some(why) = self.host.closed() {
            return Err(GrantError::Unavailable(why));
        }
        let key = (request.incarnation, request.request_id);
        let in_flight = Arc::clone(&self.calls.get().lock().in_flight);
        if let Some(answer) = self.wait_pending(key, &in_flight) {
            return answer;
        }
        let n = in_flight.load(Ordering::SeqCst);
        if n >= self.limits.max_in_flight {
            return Err(self.at_bound(n));
        }
        let (reply, answer) = Reply::counted(&in_flight);
        self.host.start_acquire(request, reply)?;
        match answer.recv_timeout(self.limits.timeout) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => {
                let mut calls = self.calls.get().lock();
                if calls.pending.is_none() {
                    calls.pending = Some(Pending {
                        key,
                        since: Instant::now(),
                        answer,
                    });
                }
                Err(self.late(""))
            }
            Err(RecvTimeoutError::Disconnected) => Err(GrantError::Unavailable(
                "the grant source's call ended without an answer".to_owned(),
            )),
        }
    }

    fn release(&self, last: &Grant) {
        if self.host.closed().is_some() {
            return;
        }
        // Outside the bound: a release is the source's last call.
        let (done, returned) = Reply::counted(&Arc::new(AtomicUsize::new(0)));
        if !self.host.start_release(last, done) {
            return;
        }
        if let Err(RecvTimeoutError::Timeout) = returned.recv_timeout(self.limits.timeout) {
            log::warn!(
                target: "grantid",
                "event={} worker={} error=the grant source's release did not return within {} ms ({}); the lease ends by expiry",
                grantid::events::RELEASE_FAILED.name,
                last.worker,
                self.limits.timeout.as_micros() as f64 / 1000.0,
                H::TIMEOUT_OPTION
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use grantid::Layout;

    use super::*;

    const TIMEOUT: Duration = Duration::from_millis(30);

    /// A host that answers the request ids it was told to at once and holds
    /// the replies of every other call for the test to answer.
    #[derive(Default)]
    struct TestHost {
        at_once: Mutex<HashMap<u64, Answer>>,
        held: Mutex<Vec<(u64, Reply<Answer>)>>,
        calls: AtomicUsize,
        closed: Mutex<Option<String>>,
        releases: Mutex<Vec<Reply<()>>>,
        has_release: bool,
    }

    impl Host for TestHost {
        const TIMEOUT_OPTION: &'static str = "test_timeout";
        const STALL_HINT: &'static str = "a test host";

        fn start_acquire(
            &self,
            request: &GrantRequest,
            reply: Reply<Answer>,
        ) -> Result<(), GrantError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match self.at_once.lock().unwrap().remove(&request.request_id) {
                Some(answer) => {
                    reply.send(answer);
                }
                None => self.held.lock().unwrap().push((request.request_id, reply)),
            }
            Ok(())
        }

        fn start_release(&self, _last: &Grant, done: Reply<()>) -> bool {
            self.releases.lock().unwrap().push(done);
            self.has_release
        }

        fn closed(&self) -> Option<String> {
            self.closed.lock().unwrap().clone()
        }
    }

    impl TestHost {
        /// Answers the oldest held call; false when nobody waits for it.
        fn answer_oldest(&self, answer: Answer) -> bool {
            let (_, reply) = self.held.lock().unwrap().remove(0);
            reply.send(answer)
        }

        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    fn source(limits: CallBounds) -> HostedSource<TestHost> {
        HostedSource::new(TestHost::default(), limits)
    }

    fn request(request_id: u64) -> GrantRequest {
        GrantRequest {
            namespace: "hosted".to_owned(),
            incarnation: 7,
            request_id,
            worker: None,
            not_before: 0,
            now: 0,
            duration: 100,
            layout: Layout::default(),
        }
    }

    fn grant(grant_id: u64) -> Grant {
        Grant {
            namespace: "hosted".to_owned(),
            worker: 3,
            incarnation: 7,
            grant_id,
            start: 0,
            end: 100,
        }
    }

    fn unavailable(answer: Answer) -> String {
        match answer {
            Err(GrantError::Unavailable(why)) => why,
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    /// Any limits, with every pending call old enough to be given up.
    fn abandon_at_once(max_in_flight: usize) -> CallBounds {
        CallBounds {
            abandon_after: Duration::ZERO,
            ..CallBounds::new(TIMEOUT).max_in_flight(max_in_flight)
        }
    }

    #[test]
    fn an_answer_within_the_deadline_is_returned_as_it_came() {
        let s = source(CallBounds::new(TIMEOUT));
        s.host().at_once.lock().unwrap().insert(1, Ok(grant(11)));
        s.host()
            .at_once
            .lock()
            .unwrap()
            .insert(2, Err(GrantError::Lost("taken".into())));
        assert_eq!(s.acquire(&request(1)).unwrap().grant_id, 11);
        assert!(matches!(s.acquire(&request(2)), Err(GrantError::Lost(w)) if w == "taken"));
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn past_the_deadline_the_answer_is_unavailable_and_the_late_one_serves_the_retry() {
        let s = source(CallBounds::new(TIMEOUT));
        let started = Instant::now();
        let why = unavailable(s.acquire(&request(1)));
        assert!(started.elapsed() >= TIMEOUT);
        assert!(
            why.contains("did not answer within 30 ms (test_timeout)"),
            "{why}"
        );
        assert!(why.ends_with("(a test host)"), "{why}");
        assert_eq!(s.in_flight(), 1);
        // Still unanswered: the retry waits for the same call, makes none.
        let why = unavailable(s.acquire(&request(1)));
        assert!(why.contains("an earlier call is still unanswered"), "{why}");
        assert_eq!(s.host().calls(), 1);
        // The late answer serves the retry of its request.
        assert!(s.host().answer_oldest(Ok(grant(12))));
        assert_eq!(s.in_flight(), 0);
        assert_eq!(s.acquire(&request(1)).unwrap().grant_id, 12);
        assert_eq!(s.host().calls(), 1);
    }

    #[test]
    fn a_late_answer_to_another_request_is_dropped() {
        let s = source(CallBounds::new(TIMEOUT));
        unavailable(s.acquire(&request(1)));
        assert!(s.host().answer_oldest(Ok(grant(21))));
        // The generator moved on to request 2: 21 is not its answer.
        s.host().at_once.lock().unwrap().insert(2, Ok(grant(22)));
        assert_eq!(s.acquire(&request(2)).unwrap().grant_id, 22);
        assert_eq!(s.host().calls(), 2);
    }

    #[test]
    fn with_one_call_in_flight_calls_never_overlap() {
        let s = source(abandon_at_once(1));
        unavailable(s.acquire(&request(1)));
        for _ in 0..3 {
            let why = unavailable(s.acquire(&request(1)));
            assert!(
                why.contains("1 call is still unanswered, the most allowed"),
                "{why}"
            );
        }
        assert_eq!(s.host().calls(), 1);
        assert_eq!(s.in_flight(), 1);
        // Never given up: its answer still serves the retry.
        assert!(s.host().answer_oldest(Ok(grant(13))));
        assert_eq!(s.acquire(&request(1)).unwrap().grant_id, 13);
    }

    #[test]
    fn concurrent_calls_share_the_bound() {
        let s = source(CallBounds::new(Duration::from_millis(300)));
        unavailable(s.acquire(&request(1)));
        std::thread::scope(|scope| {
            // One thread waits for the pending call again...
            let retry = scope.spawn(|| s.acquire(&request(1)));
            std::thread::sleep(Duration::from_millis(50));
            // ...while another finds no pending call, and the bound full
            // (or, were it scheduled first, the pending call unanswered).
            let why = unavailable(s.acquire(&request(2)));
            assert!(why.contains("1 call is still unanswered"), "{why}");
            assert!(s.host().answer_oldest(Ok(grant(14))));
            let answer = match retry.join().unwrap() {
                Ok(answer) => answer,
                Err(_) => s.acquire(&request(1)).unwrap(),
            };
            assert_eq!(answer.grant_id, 14);
        });
        assert_eq!(s.host().calls(), 1);
    }

    #[test]
    fn at_the_bound_no_call_starts_until_one_answers() {
        let s = source(abandon_at_once(2));
        unavailable(s.acquire(&request(1)));
        // Given up for a second call, which does not answer either.
        unavailable(s.acquire(&request(2)));
        assert_eq!(s.host().calls(), 2);
        let why = unavailable(s.acquire(&request(3)));
        assert!(
            why.contains("2 calls are still unanswered, the most allowed"),
            "{why}"
        );
        assert_eq!(s.host().calls(), 2);
        // The first call answers, late: its answer goes nowhere, its place
        // is free again.
        assert!(!s.host().answer_oldest(Ok(grant(31))));
        assert_eq!(s.in_flight(), 1);
        s.host().at_once.lock().unwrap().insert(3, Ok(grant(33)));
        assert_eq!(s.acquire(&request(3)).unwrap().grant_id, 33);
        assert_eq!(s.host().calls(), 3);
    }

    #[test]
    fn an_answer_after_its_call_was_given_up_reaches_no_other_call() {
        let s = source(abandon_at_once(2));
        unavailable(s.acquire(&request(1)));
        // The retry of the same request gives the first call up and makes
        // a second one.
        unavailable(s.acquire(&request(1)));
        assert_eq!(s.host().calls(), 2);
        // The first call's answer comes now: nobody waits for it.
        assert!(!s.host().answer_oldest(Ok(grant(41))));
        // The second call's answer is the one returned.
        assert!(s.host().answer_oldest(Ok(grant(42))));
        assert_eq!(s.acquire(&request(1)).unwrap().grant_id, 42);
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn a_call_the_host_drops_ends_at_once() {
        let s = source(CallBounds::new(Duration::from_secs(5)));
        let host = Arc::new(s);
        let dropper = {
            let host = Arc::clone(&host);
            std::thread::spawn(move || {
                while host.host().held.lock().unwrap().is_empty() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                host.host().held.lock().unwrap().clear();
            })
        };
        let started = Instant::now();
        let why = unavailable(host.acquire(&request(1)));
        dropper.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(why.contains("ended without an answer"), "{why}");
        assert_eq!(host.in_flight(), 0);
    }

    #[test]
    fn a_closed_host_is_unavailable_without_a_call() {
        let s = source(CallBounds::new(Duration::from_secs(5)));
        *s.host().closed.lock().unwrap() = Some("shutting down".into());
        let started = Instant::now();
        assert_eq!(unavailable(s.acquire(&request(1))), "shutting down");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(s.host().calls(), 0);
        s.release(&grant(1));
        assert!(s.host().releases.lock().unwrap().is_empty());
    }

    #[test]
    fn a_release_that_never_returns_is_waited_for_at_most_the_timeout() {
        let host = TestHost {
            has_release: true,
            ..TestHost::default()
        };
        let s = HostedSource::new(host, CallBounds::new(TIMEOUT));
        let started = Instant::now();
        s.release(&grant(1));
        let took = started.elapsed();
        assert!(took >= TIMEOUT && took < Duration::from_secs(2), "{took:?}");
        assert_eq!(s.host().releases.lock().unwrap().len(), 1);
        // A release that returns is not waited for longer.
        let s = HostedSource::new(
            TestHost {
                has_release: true,
                ..TestHost::default()
            },
            CallBounds::new(Duration::from_secs(5)),
        );
        let answering = std::thread::scope(|scope| {
            scope.spawn(|| {
                loop {
                    if let Some(done) = s.host().releases.lock().unwrap().pop() {
                        return done.send(());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            let started = Instant::now();
            s.release(&grant(1));
            started.elapsed()
        });
        assert!(answering < Duration::from_secs(5), "{answering:?}");
    }

    #[test]
    fn bounds_default_to_one_call_and_fifteen_timeouts() {
        let l = CallBounds::new(Duration::from_secs(2));
        assert_eq!(l.max_in_flight, 1);
        assert_eq!(l.abandon_after, Duration::from_secs(30));
        assert_eq!(l.max_in_flight(0).max_in_flight, 1);
    }
}
