//! # grantid
//!
//! Unique, roughly time-sorted, positive 63-bit IDs, issued inside this
//! process without a network round trip per ID, and unique across a whole
//! fleet because every ID lies inside a **grant**: an interval of ticks that
//! an authority reserved durably for one worker value, never twice.
//!
//! ```
//! use grantid::{Generator, Layout, MemoryAuthority};
//!
//! let generator = Generator::builder(Layout::default(), "orders-v1", MemoryAuthority::new())
//!     .start()?;
//! let id = generator.next_id()?;
//! let fields = generator.decode(id)?;
//! assert_eq!(Some(fields.worker as u32), generator.stats().worker);
//! let batch = generator.next_ids(1_000)?;
//! assert!(batch.windows(2).all(|w| w[0] < w[1]));
//! # Ok::<(), grantid::Error>(())
//! ```
//!
//! ## Properties
//!
//! * **Thread-safe and lock-free.** `next_id` takes `&self`; the common case
//!   is one atomic load of the cached tick and one CAS on the cache line of
//!   the calling thread's shard (threads get shards round-robin on first
//!   use; as many shards as CPUs by default, so threads beyond that share
//!   lines). A call at a new tick (every call of a thread making fewer than
//!   one ID per tick) adds one CAS on the shared chunk word. No lock, no
//!   allocation, no system call, no callback.
//! * **Unique.** Every ID's (worker, tick) lies in a committed grant of this
//!   generator's incarnation, and every (tick, sequence) of a grant is handed
//!   out once. A grant switch (renewal after a gap, new worker, loss, close)
//!   makes every in-flight reservation on the old grant fail.
//! * **Monotonic per thread.** IDs returned to one thread strictly increase,
//!   across ticks, chunks, batches and grant switches. Across threads they are
//!   only roughly time-sorted.
//! * **Clock steps back?** The cursor never moves back. Within `max_drift_ms`
//!   the generator keeps issuing from its cursor; beyond, a call waits up to
//!   `max_wait` for the clock to come back, or fails with `ClockRollback` at
//!   once when it cannot come back within that time.
//! * **Clock jumps forward?** A call that finds the committed grants used up
//!   wakes the renewal thread and waits (up to `max_wait`) for the renewal,
//!   unless the authority is known to be failing; the ticker wakes it too.
//! * **Sequence used up?** The next tick is taken if it is within
//!   `max_drift_ms` of the clock; otherwise the call waits, then fails with
//!   `CapacityExhausted`. Never a wrap.
//! * **Authority down?** Issuance goes on inside the committed grants (up to
//!   `horizon_ms` ahead); past their end, `Unavailable`. Never a guess.
//! * **Worker lost?** Issuing from it stops at once, `on_lease_lost` is
//!   called, and a new worker is acquired.
//! * **`fork()`?** A child never issues from its parent's grant: on its first
//!   call it gets a fresh incarnation, a new worker and a new grant
//!   ([`ForkPolicy::Reactivate`]) or refuses with `Closed`.
//! * **ID 0** is never issued.
//!
//! ## Events
//!
//! Logged through the `log` facade, target `grantid`, each message starting
//! with a stable `event=` name: the one list, with levels, is [`events`]
//! (`grant` at debug, `grant_uncertain` at warn, `lease_lost` at error, ...).
//!
//! ## Threads
//!
//! The renewal thread (`grantid-lease`) and the ticker thread
//! (`grantid-ticker`) run per generator; the grant source and
//! `on_lease_lost` run on the renewal thread (the first grant is also awaited
//! by the thread calling `start`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;
#[doc(hidden)]
pub mod cursor;
mod error;
pub mod events;
mod forksafe;
mod generator;
mod grant;
mod layout;
mod lease;
mod memory;
mod public;
pub mod rule;
mod state;
mod stats;
mod sync;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, ErrorKind};
pub use generator::{
    DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN, DEFAULT_GRANT_DURATION_MS, DEFAULT_HORIZON_MS,
    DEFAULT_MAX_BATCH, DEFAULT_MAX_DRIFT_MS, DEFAULT_MAX_WAIT, DEFAULT_STARTUP_TIMEOUT, Generator,
    GeneratorBuilder,
};
pub use grant::{
    FnSource, Grant, GrantError, GrantRequest, GrantSource, InvalidGrant, NAMESPACE_MAX_LEN,
    check_namespace, source_fn,
};
pub use layout::{DEFAULT_EPOCH_MS, Decoded, Layout, parse_id};
pub use memory::{Allocator, MemoryAuthority, NamespaceRecord};
pub use public::{PUBLIC_ID_ALPHABET, PUBLIC_ID_KEY_LEN, PUBLIC_ID_TEXT_LEN, PublicIds};
pub use rule::{
    Claim, FIRST_GRANT_LEAD_MS, NOT_EVIDENCE, WorkerRecord, Workers, evidence_bound,
    forgotten_grant,
};
pub use state::{ForkPolicy, LeaseLostEvent};
pub use stats::Stats;
