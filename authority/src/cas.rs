//! The allocation rule on a store that runs no code of its own and offers
//! a consistent read and a conditional write (etcd's transactions): one
//! read of what the rule needs, [`rule::decide`], and the writes the
//! decision needs, each on the condition that what was read is unchanged;
//! a write whose condition failed is decided again ([`Step::Again`]). The
//! store's engine reads and writes; this module decides, so the loop is
//! written once for every such store.

use std::sync::Arc;

use grantid::rule::{self, Decision, Policy, Quarantine, Registered, View, Workers};
use grantid::{Clock, Grant, GrantError, GrantRequest, Layout};

use crate::url::Options;

/// The authority time of a store without a clock of its own: this host's,
/// or `clock` (tests, fault injection).
pub(crate) fn now_ms(clock: Option<&Arc<dyn Clock>>) -> u64 {
    match clock {
        Some(c) => c.now_ms(),
        None => grantid::SystemClock.now_ms(),
    }
}

/// How long a loss quarantines: `max_lead_ms + clock_skew_ms`.
pub(crate) fn hold_ms(options: &Options) -> u64 {
    options.max_lead_ms.saturating_add(options.clock_skew_ms)
}

/// The rule's policy for a layout `l` under the URL's `options`.
pub(crate) fn policy(options: &Options, l: &Layout) -> Policy {
    Policy {
        lease_grace: options.lease_grace_ms.div_ceil(l.tick_ms()),
        max_lead_ms: Some(options.max_lead_ms),
        clock_skew_ms: options.clock_skew_ms,
        only_worker: None,
    }
}

/// A store record's quarantine after one more, from `now_ms` for `hold_ms`,
/// over `old` (count, until, since): counted, never shortened.
pub(crate) fn extended(old: Option<(u64, u64, u64)>, now_ms: u64, hold_ms: u64) -> (u64, u64, u64) {
    let (count, until, since) = old.unwrap_or((0, 0, 0));
    (
        count + 1,
        until.max(now_ms.saturating_add(hold_ms)),
        since.max(now_ms),
    )
}

/// Pause between two attempts of a write that lost a race.
const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// The rule on `store` under the URL's `options`: [`attempt`] until it
/// answers (the caller's deadline bounds the attempts), a short pause
/// after each lost race. The outer error is the store's (a call that
/// failed: the connection is suspect); the inner result is the rule's
/// answer.
pub(crate) async fn grant<S: Store>(
    store: &mut S,
    request: &GrantRequest,
    options: &Options,
    now_ms: impl Fn() -> u64,
) -> Result<Result<Grant, GrantError>, GrantError> {
    let policy = policy(options, &request.layout);
    loop {
        match attempt(store, request, &policy, hold_ms(options), &now_ms).await? {
            Step::Answer(a) => return Ok(a),
            Step::Again => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}

/// The outcome of one [`attempt`].
pub(crate) enum Step {
    /// The answer to give.
    Answer(Result<Grant, GrantError>),
    /// A compared record changed between the read and the write: decide
    /// again.
    Again,
}

/// One consistent read, in the rule's terms, with what the engine needs to
/// write on it conditionally (`at`: the versions it read).
pub(crate) struct Seen<At> {
    /// The namespace's record; `None` before its first request.
    pub registered: Option<Registered>,
    /// The worker records read: every one of the namespace for a first
    /// grant, the one asked for for a renewal.
    pub workers: Workers,
    /// The grant recorded for the request's (incarnation, request_id).
    pub answer: Option<Grant>,
    /// The store's quarantine as recorded.
    pub quarantine: Option<Quarantine>,
    /// A state loss the read shows (no store record, another store's
    /// identity, a history that went back): why.
    pub loss: Option<String>,
    /// The versions read, for the conditions of the writes.
    pub at: At,
}

/// What a store offers the loop: a read and three conditional writes, each
/// answering `false` when the records it compares changed since `at`.
pub(crate) trait Store {
    /// The versions of one read.
    type At;

    /// Reads what the rule needs for `request`.
    async fn read(&mut self, request: &GrantRequest) -> Result<Seen<Self::At>, GrantError>;

    /// Starts or extends the store's quarantine to `now_ms + hold_ms`.
    async fn quarantine(
        &mut self,
        at: &Self::At,
        now_ms: u64,
        hold_ms: u64,
        reason: String,
    ) -> Result<bool, GrantError>;

    /// Writes the namespace's record.
    async fn put_namespace(
        &mut self,
        at: &Self::At,
        namespace: &Registered,
    ) -> Result<bool, GrantError>;

    /// Writes `grant` (its worker's `record`, and the retry's answer) and,
    /// when `namespace` is given, the namespace's record, in one step.
    async fn put_grant(
        &mut self,
        at: &Self::At,
        request: &GrantRequest,
        grant: &Grant,
        record: &grantid::WorkerRecord,
        namespace: Option<&Registered>,
    ) -> Result<bool, GrantError>;
}

/// One read, decision and write of the rule on `store`, at the authority
/// time `now_ms()` tells when the read has returned; a state loss the read
/// shows quarantines the store for `hold_ms` from then, and the rule
/// answers over that quarantine with nothing read from the store that
/// showed the loss (another layout is still `Refused` first).
///
/// The time is read after the read, never before: a read that waited
/// (connecting, retried) saw the store as it is when it returned, and a
/// quarantine counted from before the wait could end before grants that
/// other hosts made meanwhile, and the loss took.
pub(crate) async fn attempt<S: Store>(
    store: &mut S,
    request: &GrantRequest,
    policy: &Policy,
    hold_ms: u64,
    now_ms: impl Fn() -> u64,
) -> Result<Step, GrantError> {
    let seen = store.read(request).await?;
    let now_ms = now_ms();
    let now = request.layout.tick_at(now_ms);
    if let Some(reason) = seen.loss {
        if !store
            .quarantine(&seen.at, now_ms, hold_ms, reason.clone())
            .await?
        {
            return Ok(Step::Again);
        }
        let quarantine = Quarantine {
            until_ms: now_ms.saturating_add(hold_ms),
            since_ms: now_ms,
            reason,
        };
        let view = View {
            registered: seen.registered.as_ref(),
            workers: &Workers::default(),
            answer: None,
            quarantine: Some(&quarantine),
        };
        return Ok(
            match rule::decide(&view, request, policy, now_ms, now).answer() {
                Err(e) => Step::Answer(Err(e)),
                Ok(_) => Step::Again,
            },
        );
    }
    let view = View {
        registered: seen.registered.as_ref(),
        workers: &seen.workers,
        answer: seen.answer.as_ref(),
        quarantine: seen.quarantine.as_ref(),
    };
    match rule::decide(&view, request, policy, now_ms, now) {
        Decision::Recorded(grant) => Ok(Step::Answer(Ok(grant))),
        Decision::Answer {
            error,
            quarantine,
            namespace,
        } => {
            // The namespace's record first (registered, or its lead and
            // skew raised), on the record as read.
            if let Some(namespace) = namespace
                && !store.put_namespace(&seen.at, &namespace).await?
            {
                return Ok(Step::Again);
            }
            if let Some((until, why)) = quarantine
                && !store
                    .quarantine(&seen.at, now_ms, until.saturating_sub(now_ms), why)
                    .await?
            {
                return Ok(Step::Again);
            }
            Ok(Step::Answer(Err(error)))
        }
        Decision::Grant {
            grant,
            record,
            namespace,
            namespace_changed,
        } => {
            // First grants of a namespace are serialised on its record.
            let namespace = (request.worker.is_none() || namespace_changed).then_some(&namespace);
            if store
                .put_grant(&seen.at, request, &grant, &record, namespace)
                .await?
            {
                Ok(Step::Answer(Ok(grant)))
            } else {
                Ok(Step::Again)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A store that shows a loss, and whose read takes `wait_ms` of the
    /// clock (a connection retried).
    struct Slow<'a> {
        clock: &'a Cell<u64>,
        wait_ms: u64,
        quarantined: Option<(u64, u64)>,
    }

    impl Store for Slow<'_> {
        type At = ();

        async fn read(&mut self, _: &GrantRequest) -> Result<Seen<()>, GrantError> {
            self.clock.set(self.clock.get() + self.wait_ms);
            Ok(Seen {
                registered: None,
                workers: Workers::default(),
                answer: None,
                quarantine: None,
                loss: Some("no store record".into()),
                at: (),
            })
        }

        async fn quarantine(
            &mut self,
            _: &(),
            now_ms: u64,
            hold_ms: u64,
            _: String,
        ) -> Result<bool, GrantError> {
            self.quarantined = Some((now_ms, hold_ms));
            Ok(true)
        }

        async fn put_namespace(&mut self, _: &(), _: &Registered) -> Result<bool, GrantError> {
            Ok(true)
        }

        async fn put_grant(
            &mut self,
            _: &(),
            _: &GrantRequest,
            _: &Grant,
            _: &grantid::WorkerRecord,
            _: Option<&Registered>,
        ) -> Result<bool, GrantError> {
            Ok(true)
        }
    }

    /// A loss quarantines from when the read that showed it returned, not
    /// from before it was sent.
    #[test]
    fn a_loss_is_quarantined_from_the_end_of_the_read() {
        let clock = Cell::new(1_000_000);
        let mut store = Slow {
            clock: &clock,
            wait_ms: 2_500,
            quarantined: None,
        };
        let request = GrantRequest {
            namespace: "ns".into(),
            incarnation: 1,
            request_id: 1,
            worker: Some(0),
            not_before: 0,
            now: 0,
            duration: 1_000,
            layout: Layout::default(),
        };
        let policy = Policy {
            lease_grace: 0,
            max_lead_ms: Some(7_000),
            clock_skew_ms: 1_000,
            only_worker: None,
        };
        let step = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(attempt(&mut store, &request, &policy, 8_000, || {
                clock.get()
            }))
            .unwrap();
        assert!(matches!(step, Step::Answer(Err(GrantError::Lost(_)))));
        assert_eq!(store.quarantined, Some((1_002_500, 8_000)));
    }
}
