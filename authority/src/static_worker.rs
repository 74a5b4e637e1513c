//! The static authority: a worker number the fleet already owns (`static:N`,
//! or the ordinal of a StatefulSet pod, `static:env:POD_NAME`).
//!
//! There is no lease: the operator promises that one process at a time uses
//! worker N. The grant is `[max(now, high_water, not_before), + duration)`
//! on this host's clock. With a state file (`static:N?state=PATH`) the
//! high-water mark is kept on disk under `flock`, so a restart, even after
//! the clock stepped back, continues after every interval ever granted, and
//! several processes of one host that share worker N and the file get
//! disjoint intervals. Without one the high-water lives in memory only:
//! **a restart after the clock stepped back can repeat IDs**, and a `fork()`
//! child is refused (it would share its parent's worker and high-water).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, SystemClock};
use serde::{Deserialize, Serialize};

use crate::file::LayoutDoc;
use crate::forklocal::ForkLocal;
use crate::lockfile;
use crate::url::Options;
use crate::{Authority, WorkerStatus};

#[derive(Serialize, Deserialize, Clone, Copy)]
struct Mark {
    layout: LayoutDoc,
    high_water: u64,
    fencing: u64,
}

/// Persisted and in-memory state: per (namespace, worker), the layout and
/// the high-water mark.
#[derive(Serialize, Deserialize, Default)]
struct Marks {
    marks: HashMap<String, Mark>,
}

/// Per-process memory: the marks (without a state file) and the last
/// answer per incarnation (for retries).
#[derive(Default)]
struct Memory {
    marks: Marks,
    answers: HashMap<u64, (u64, Grant)>,
}

/// The static authority. See the module docs.
pub struct StaticAuthority {
    worker: u32,
    state: Option<PathBuf>,
    options: Options,
    clock: Arc<dyn Clock>,
    owner_pid: u32,
    memory: ForkLocal<Memory>,
}

impl std::fmt::Debug for StaticAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticAuthority")
            .field("worker", &self.worker)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

fn key(namespace: &str, worker: u32) -> String {
    format!("{namespace}#{worker}")
}

impl StaticAuthority {
    /// Worker `worker`, with an optional state file.
    pub fn new(worker: u32, state: Option<PathBuf>, options: Options) -> StaticAuthority {
        StaticAuthority {
            worker,
            state,
            options,
            clock: Arc::new(SystemClock),
            owner_pid: std::process::id(),
            memory: ForkLocal::new(),
        }
    }

    /// Times grants by `clock` instead of the system clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> StaticAuthority {
        self.clock = clock;
        self
    }

    /// The worker value.
    pub fn worker(&self) -> u32 {
        self.worker
    }

    fn grant(&self, marks: &mut Marks, request: &GrantRequest) -> Result<Grant, GrantError> {
        let layout = request.layout;
        if u64::from(self.worker) >= layout.worker_count() {
            return Err(GrantError::Lost(format!(
                "static worker {} does not fit in the layout's {} worker bits",
                self.worker,
                layout.worker_bits()
            )));
        }
        if let Some(w) = request.worker
            && w != self.worker
        {
            return Err(GrantError::Lost(format!(
                "this authority only grants static worker {}, not {w}",
                self.worker
            )));
        }
        let now = layout.tick_at(self.clock.now_ms());
        let mark = marks
            .marks
            .entry(key(&request.namespace, self.worker))
            .or_insert(Mark {
                layout: layout.into(),
                high_water: 0,
                fencing: 0,
            });
        if mark.layout.layout().ok() != Some(layout) {
            return Err(GrantError::Lost(format!(
                "namespace {:?} is registered with another layout",
                request.namespace
            )));
        }
        let start = mark.high_water.max(now).max(request.not_before);
        let end = start
            .saturating_add(request.duration)
            .min(layout.timestamp_limit());
        if start >= end {
            return Err(GrantError::Lost(format!(
                "static worker {} has no timestamp space left (high-water {})",
                self.worker, mark.high_water
            )));
        }
        mark.high_water = end;
        mark.fencing += 1;
        Ok(Grant {
            namespace: request.namespace.clone(),
            worker: self.worker,
            incarnation: request.incarnation,
            grant_id: mark.fencing,
            start,
            end,
        })
    }

    fn read_marks(&self, locked: &lockfile::Locked) -> Result<Marks, GrantError> {
        match locked.read()? {
            None => Ok(Marks::default()),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| GrantError::Unavailable(format!("static state file is damaged: {e}"))),
        }
    }
}

impl GrantSource for StaticAuthority {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        if self.state.is_none() && std::process::id() != self.owner_pid {
            return Err(GrantError::Lost(format!(
                "static worker {} without a state file belongs to process {}; a forked \
                 child would share its high-water (use static:N?state=PATH)",
                self.worker, self.owner_pid
            )));
        }
        let mut memory = self.memory.get().lock();
        if let Some((req, g)) = memory.answers.get(&request.incarnation)
            && *req == request.request_id
        {
            return Ok(g.clone());
        }
        let grant = match &self.state {
            None => self.grant(&mut memory.marks, request)?,
            Some(path) => {
                let locked = lockfile::lock(path, self.options.timeout)?;
                let mut marks = self.read_marks(&locked)?;
                let grant = self.grant(&mut marks, request)?;
                let bytes = serde_json::to_vec_pretty(&marks).unwrap_or_default();
                locked.write(&bytes)?;
                grant
            }
        };
        memory
            .answers
            .insert(request.incarnation, (request.request_id, grant.clone()));
        Ok(grant)
    }

    fn release(&self, last: &Grant) {
        self.memory.get().lock().answers.remove(&last.incarnation);
    }
}

impl Authority for StaticAuthority {
    fn init(&self) -> Result<String, Error> {
        Ok(match &self.state {
            Some(p) => format!(
                "static worker {}; state file {} is written on the first grant",
                self.worker,
                p.display()
            ),
            None => format!("static worker {}: nothing to set up", self.worker),
        })
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let marks = match &self.state {
            Some(path) => {
                let locked =
                    lockfile::lock(path, self.options.timeout).map_err(crate::file::unavailable)?;
                self.read_marks(&locked).map_err(crate::file::unavailable)?
            }
            None => {
                let memory = self.memory.get().lock();
                Marks {
                    marks: memory.marks.marks.clone(),
                }
            }
        };
        let mut out = Vec::new();
        for (k, m) in marks.marks {
            let Some((ns, w)) = k.rsplit_once('#') else {
                continue;
            };
            if namespace.is_some_and(|n| n != ns) {
                continue;
            }
            let layout = m
                .layout
                .layout()
                .map_err(|e| Error::new(ErrorKind::Unavailable, e))?;
            out.push(WorkerStatus {
                namespace: ns.to_owned(),
                layout,
                worker: w.parse().unwrap_or(self.worker),
                holder: None,
                lease_expiry: 0,
                high_water: m.high_water,
                fencing: m.fencing,
            });
        }
        out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
        Ok(out)
    }
}
