//! A scripted authority and ID checks shared by the integration tests.
#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grantid::{Grant, GrantError, GrantRequest, GrantSource, Layout, MemoryAuthority};

/// What the scripted authority does with the next requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Answer by the rule.
    Normal,
    /// Answer `Unavailable`.
    Unavailable,
    /// Answer `Lost`.
    Lost,
    /// Panic.
    Panic,
    /// Block until the mode changes.
    Hang,
    /// Answer a grant with one field broken.
    Invalid(Breakage),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    Namespace,
    Incarnation,
    WorkerRange,
    Empty,
    PastTimestampField,
    BeforeNotBefore,
    OtherWorker,
}

/// A real allocator (high-water marks, leases, idempotent retries) behind a
/// switch that injects faults.
#[derive(Clone)]
pub struct Scripted {
    pub inner: MemoryAuthority,
    mode: Arc<Mutex<Mode>>,
    pub calls: Arc<AtomicUsize>,
    pub releases: Arc<AtomicUsize>,
    pub in_call: Arc<AtomicBool>,
    pub answered: Arc<Mutex<Vec<Grant>>>,
}

impl Scripted {
    pub fn new() -> Scripted {
        Scripted::over(MemoryAuthority::new())
    }

    pub fn over(inner: MemoryAuthority) -> Scripted {
        Scripted {
            inner,
            mode: Arc::new(Mutex::new(Mode::Normal)),
            calls: Arc::new(AtomicUsize::new(0)),
            releases: Arc::new(AtomicUsize::new(0)),
            in_call: Arc::new(AtomicBool::new(false)),
            answered: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn mode(&self) -> Mode {
        self.mode.lock().unwrap().clone()
    }

    /// Grants the generator received and could use (valid answers).
    pub fn grants(&self) -> Vec<Grant> {
        self.inner.grants()
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl GrantSource for Scripted {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.in_call.store(true, Ordering::SeqCst);
        let _clear = ClearOnDrop(&self.in_call);
        loop {
            match self.mode() {
                Mode::Normal => break,
                Mode::Unavailable => return Err(GrantError::Unavailable("scripted outage".into())),
                Mode::Lost => return Err(GrantError::Lost("scripted refusal".into())),
                Mode::Panic => panic!("scripted panic in the grant source"),
                Mode::Hang => std::thread::sleep(Duration::from_millis(1)),
                Mode::Invalid(b) => {
                    let mut g = Grant {
                        namespace: request.namespace.clone(),
                        worker: 0,
                        incarnation: request.incarnation,
                        grant_id: 1,
                        start: request.now.max(request.not_before),
                        end: request.now.max(request.not_before) + request.duration,
                    };
                    match b {
                        Breakage::Namespace => g.namespace = "someone-else".into(),
                        Breakage::Incarnation => g.incarnation ^= 1,
                        Breakage::WorkerRange => g.worker = request.layout.worker_count() as u32,
                        Breakage::Empty => g.end = g.start,
                        Breakage::PastTimestampField => {
                            g.end = request.layout.timestamp_limit() + 1
                        }
                        Breakage::BeforeNotBefore => {
                            g.start = request.not_before.saturating_sub(1);
                            if request.not_before == 0 {
                                g.end = 0;
                            }
                        }
                        Breakage::OtherWorker => {
                            g.worker = request.worker.map_or(0, |w| w ^ 1);
                            if request.worker.is_none() {
                                g.end = g.start;
                            }
                        }
                    }
                    return Ok(g);
                }
            }
        }
        let g = self.inner.acquire(request)?;
        self.answered.lock().unwrap().push(g.clone());
        Ok(g)
    }

    fn release(&self, last: &Grant) {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(last);
    }
}

struct ClearOnDrop<'a>(&'a AtomicBool);
impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Asserts no duplicate among `ids` and that every ID's (worker, tick) lies
/// in a grant of `incarnation` (any incarnation when `None`).
pub fn check_ids(layout: &Layout, ids: &[u64], grants: &[Grant], incarnation: Option<u64>) {
    let mut seen = HashSet::with_capacity(ids.len());
    for &id in ids {
        assert!(seen.insert(id), "duplicate ID {id}");
        assert_ne!(id, 0, "ID 0 issued");
        let d = layout.decode(id).unwrap();
        let inside = grants.iter().any(|g| {
            incarnation.is_none_or(|i| g.incarnation == i)
                && u64::from(g.worker) == d.worker
                && g.start <= d.timestamp
                && d.timestamp < g.end
        });
        assert!(
            inside,
            "ID {id} ({d:?}) lies in no grant of this incarnation"
        );
    }
}

/// Asserts `ids` strictly increase.
pub fn check_increasing(ids: &[u64]) {
    for w in ids.windows(2) {
        assert!(w[0] < w[1], "{} then {}", w[0], w[1]);
    }
}

/// A counter for closures.
pub fn counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

/// Default-epoch Unix ms of tick `t` in a 1 ms layout.
pub fn at(t: u64) -> u64 {
    grantid::DEFAULT_EPOCH_MS + t
}
