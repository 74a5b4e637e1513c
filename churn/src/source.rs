//! The grant source each simulated process gets: the authority from
//! `grantid_authority::from_url`, behind a kill switch that also tells the
//! ledger every answer.
//!
//! A hard kill inside one process: the switch is thrown first, so from then
//! on the process sends the authority nothing (no renewal, no release), and
//! then the generator is dropped. Its `close()` stops its threads and calls
//! `release`, which the thrown switch swallows. To the authority that is a
//! `kill -9`: the last grant it committed is the last it hears of the
//! incarnation, and the worker comes back only when the lease runs out. A
//! renewal already in flight at the kill still reaches the authority (as
//! it would from a process killed mid-call), and the ledger counts the
//! lease it extends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use grantid::{Clock, Grant, GrantError, GrantRequest, GrantSource, SystemClock};

use crate::ledger::Ledger;

/// What the authority's message says when every free worker's high-water is
/// ahead of the clock (authority/src/engines/postgres/v1.sql, the Redis script): a wait.
const WAIT_MARK: &str = "high-water is ahead";
/// What it says when no worker is free.
const NONE_FREE_MARK: &str = "no free worker";
/// What a grantid server says of a call it shed before the store
/// (server/src/sessions.rs).
const SHED_MARK: &str = "the server is at capacity";

/// A kill switch and ledger tap around a shared grant source.
pub struct Switched {
    inner: Arc<dyn GrantSource>,
    ledger: Arc<Ledger>,
    killed: AtomicBool,
}

impl std::fmt::Debug for Switched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switched")
            .field("killed", &self.killed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Switched {
    /// `inner` behind a switch that is not thrown.
    pub fn new(inner: Arc<dyn GrantSource>, ledger: Arc<Ledger>) -> Switched {
        Switched {
            inner,
            ledger,
            killed: AtomicBool::new(false),
        }
    }

    /// Throws the switch: nothing reaches the authority any more.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
    }
}

impl GrantSource for Switched {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        if self.killed.load(Ordering::SeqCst) {
            return Err(GrantError::Unavailable("the process was killed".into()));
        }
        let first = request.worker.is_none();
        if first {
            self.ledger.first_sent(request.incarnation);
        }
        let sent_ms = SystemClock.now_ms();
        let answer = self.inner.acquire(request);
        let answered_ms = SystemClock.now_ms();
        let shed = matches!(&answer, Err(GrantError::Unavailable(why)) if why.contains(SHED_MARK));
        let incarnation = request.incarnation;
        match (&answer, first) {
            (Ok(grant), _) => self.ledger.granted(first, grant, answered_ms),
            (Err(GrantError::Lost(why) | GrantError::Unavailable(why)), true)
                if why.contains(NONE_FREE_MARK) || why.contains(WAIT_MARK) =>
            {
                let wait = why.contains(WAIT_MARK);
                self.ledger
                    .refused(incarnation, wait, why, sent_ms, answered_ms)
            }
            // Refused: the store answered, and granted nothing.
            (Err(GrantError::Refused(_)), true) => self.ledger.first_no_grant(incarnation, false),
            (Err(_), true) if shed => self.ledger.first_no_grant(incarnation, true),
            (Err(_), true) => self.ledger.first_uncertain(request, answered_ms),
            (Err(GrantError::Lost(_) | GrantError::Refused(_)), false) => {
                self.ledger.renewal_lost()
            }
            (Err(_), false) if shed => self.ledger.renewal_shed(),
            (Err(_), false) => self.ledger.renewal_uncertain(request, answered_ms),
        }
        answer
    }

    fn release(&self, last: &Grant) {
        if !self.killed.load(Ordering::SeqCst) {
            self.inner.release(last);
        }
    }
}
