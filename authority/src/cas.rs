//! The allocation rule on a store that runs no code of its own and offers
//! a consistent read and a conditional write (etcd's transactions): one
//! read of what the rule needs, [`rule::decide`], and the writes the
//! decision needs, each on the condition that what was read is unchanged;
//! a write whose condition failed is decided again ([`Step::Again`]). The
//! store's engine reads and writes; this module decides, so the loop is
//! written once for every such store.

use grantid::rule::{self, Decision, Policy, Quarantine, Registered, View, Workers};
use grantid::{Grant, GrantError, GrantRequest};

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

/// One read, decision and write of the rule on `store` at `now_ms`; a
/// state loss the read shows quarantines the store for `hold_ms` first,
/// and the rule answers over that quarantine with nothing read from the
/// store that showed the loss (another layout is still `Refused` first).
pub(crate) async fn attempt<S: Store>(
    store: &mut S,
    request: &GrantRequest,
    policy: &Policy,
    hold_ms: u64,
    now_ms: u64,
) -> Result<Step, GrantError> {
    let seen = store.read(request).await?;
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
