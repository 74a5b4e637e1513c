//! The static authority: a worker number the fleet already owns (`static:N`,
//! or the ordinal of a StatefulSet pod, `static:env:POD_NAME`).
//!
//! Across processes there is no lease: the operator promises that one
//! process at a time uses worker N. The grant is
//! `[max(now, high_water, not_before), + duration)` on this host's clock. With
//! a state file (`static:N?state=PATH`) the high-water mark is kept on disk
//! under the file lock, so a restart, even after the clock stepped back,
//! continues after every interval ever granted, and several processes of one
//! host that share worker N and the file get disjoint intervals.
//!
//! Without a state file the high-water lives in this process's memory,
//! shared by every `static:` source of the process: a generator closed and
//! opened again continues after it, and a second generator on the same
//! worker and namespace is refused (`Lost`) while the first one's lease
//! lives. A new process starts [`BARE_LEAD_MS`] plus one tick after its
//! clock, past anything a previous process on the worker issued (its cursor
//! ran at most `max_drift`, 100 ms by default, ahead of the clock). **A
//! restart after the clock stepped back can still repeat IDs**, and a
//! `fork()` child is refused (it would share its parent's worker and
//! high-water).
//!
//! A first grant (no worker asked) whose start would be more than
//! [`grantid::FIRST_GRANT_LEAD_MS`] ahead of the clock (a previous
//! generator's grant still runs) is answered `Unavailable` with the wait,
//! as every authority does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use grantid::{Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, SystemClock};
use serde::{Deserialize, Serialize};

use crate::forklocal::ForkLocal;
use crate::kernel::{Authority, WorkerStatus};
use crate::local::{LayoutDoc, unavailable};
use crate::lockfile;
use crate::sidecar::{self, Sidecar, StoreMark};
use crate::url::Options;

/// How far ahead of its clock a process without a state file starts worker
/// N, in ms (plus one tick): the generator's default `max_drift`
/// ([`grantid::DEFAULT_MAX_DRIFT_MS`]), the furthest a previous process's
/// IDs ran ahead of the clock. A generator with a larger `max_drift` needs a
/// state file.
pub const BARE_LEAD_MS: u64 = grantid::DEFAULT_MAX_DRIFT_MS;

#[derive(Serialize, Deserialize, Clone, Copy)]
struct Mark {
    layout: LayoutDoc,
    high_water: u64,
    fencing: u64,
    /// The incarnation holding the worker in this process (no state file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder: Option<u64>,
    /// When that hold expires (ticks).
    #[serde(default)]
    lease_expiry: u64,
}

/// The marks of every `static:` source of this process without a state file.
fn process_marks() -> &'static Mutex<Marks> {
    static MARKS: OnceLock<Mutex<Marks>> = OnceLock::new();
    MARKS.get_or_init(|| Mutex::new(Marks::default()))
}

/// Persisted and in-memory state: per (namespace, worker), the layout and
/// the high-water mark.
#[derive(Serialize, Deserialize, Default)]
struct Marks {
    marks: HashMap<String, Mark>,
    /// The state file's identity and quarantine (docs/AUTHORITIES.md,
    /// "State loss"); unused without a state file.
    #[serde(default)]
    store: StoreMark,
}

impl Marks {
    /// The latest end (Unix ms) of any interval the marks record as granted.
    fn latest_end_ms(&self) -> u64 {
        self.marks
            .values()
            .filter_map(|m| Some(m.layout.layout().ok()?.unix_ms_of(m.high_water)))
            .max()
            .unwrap_or(0)
    }
}

/// Per-process memory: the last answer per incarnation (for retries).
#[derive(Default)]
struct Memory {
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

    /// Applies the rule; also returns how long to wait before answering
    /// (the lead of a process without a state file, see the module docs).
    ///
    /// What can never be granted is refused first, before any quarantine
    /// (as the rule does: a start-up with a wrong layout fails at once).
    fn refusal(&self, marks: &Marks, request: &GrantRequest) -> Result<(), GrantError> {
        let layout = request.layout;
        if u64::from(self.worker) >= layout.worker_count() {
            return Err(GrantError::Refused(format!(
                "static worker {} does not fit in the layout's {} worker bits",
                self.worker,
                layout.worker_bits()
            )));
        }
        if let Some(w) = request.worker
            && w != self.worker
        {
            return Err(GrantError::Refused(format!(
                "this authority only grants static worker {}, not {w}",
                self.worker
            )));
        }
        if let Some(mark) = marks.marks.get(&key(&request.namespace, self.worker))
            && mark.layout.layout().ok() != Some(layout)
        {
            return Err(GrantError::Refused(format!(
                "namespace {:?} is registered with another layout",
                request.namespace
            )));
        }
        Ok(())
    }

    fn grant(
        &self,
        marks: &mut Marks,
        request: &GrantRequest,
        bare: bool,
    ) -> Result<(Grant, Duration), GrantError> {
        let layout = request.layout;
        self.refusal(marks, request)?;
        let now = layout.tick_at(self.clock.now_ms());
        let grace = self.options.lease_grace_ms.div_ceil(layout.tick_ms());
        let k = key(&request.namespace, self.worker);
        let fresh = !marks.marks.contains_key(&k);
        let mark = marks.marks.entry(k).or_insert_with(|| Mark {
            layout: layout.into(),
            // Without a state file, a new process starts past what a
            // previous one may have issued (see the module docs).
            high_water: if bare {
                now.saturating_add(BARE_LEAD_MS.div_ceil(layout.tick_ms()) + 1)
            } else {
                0
            },
            fencing: 0,
            holder: None,
            lease_expiry: 0,
        });
        if bare
            && let Some(h) = mark.holder
            && h != request.incarnation
            && mark.lease_expiry > now
        {
            return Err(GrantError::Lost(format!(
                "static worker {} of namespace {:?} is held by another generator of this \
                 process (incarnation {h:#x}) until tick {}",
                self.worker, request.namespace, mark.lease_expiry
            )));
        }
        let lead = grantid::FIRST_GRANT_LEAD_MS.div_ceil(layout.tick_ms());
        if request.worker.is_none()
            && mark.fencing > 0
            && mark.high_water > now.saturating_add(lead)
        {
            return Err(GrantError::Unavailable(format!(
                "static worker {}'s high-water is {} ticks ahead of the clock (a previous \
                 generator's grant); a first grant waits for it",
                self.worker,
                mark.high_water - now
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
        if bare {
            mark.holder = Some(request.incarnation);
            mark.lease_expiry = end.saturating_add(grace);
        }
        // A new process waits out its lead, so the generator starts on a
        // grant that begins now (with its whole max_drift to use).
        let wait = if bare && fresh {
            Duration::from_millis((start.saturating_sub(now)).saturating_mul(layout.tick_ms()))
        } else {
            Duration::ZERO
        };
        let grant = Grant {
            namespace: request.namespace.clone(),
            worker: self.worker,
            incarnation: request.incarnation,
            grant_id: mark.fencing,
            start,
            end,
        };
        Ok((grant, wait))
    }

    fn read_marks(&self, locked: &lockfile::Locked) -> Result<(Marks, bool), GrantError> {
        match locked.read()? {
            None => Ok((Marks::default(), false)),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(|m| (m, true))
                .map_err(|e| GrantError::Unavailable(format!("static state file is damaged: {e}"))),
        }
    }

    /// One grant from the state file at `path`, checked against its
    /// sidecar first (a file found missing, replaced or older than what
    /// this host last wrote is quarantined; see authority/src/sidecar.rs).
    fn grant_from_file(&self, path: &Path, request: &GrantRequest) -> Result<Grant, GrantError> {
        let locked = lockfile::lock(path, self.options.timeout)?;
        let (mut marks, found) = self.read_marks(&locked)?;
        let side = Sidecar::open(locked.path());
        let now_ms = self.clock.now_ms();
        // Static grants have no bounded lead: the sidecar's end is the cap.
        let (store, changed) = side.check(found.then_some(&marks.store), now_ms, None);
        marks.store = store;
        let write = |marks: &mut Marks, until_ms: u64| {
            marks.store.serial += 1;
            locked.write(&serde_json::to_vec_pretty(&*marks).unwrap_or_default())?;
            side.record(&marks.store, until_ms);
            Ok::<(), GrantError>(())
        };
        if let Err(e) = self
            .refusal(&marks, request)
            .and_then(|()| sidecar::gate(&marks.store, now_ms, request.worker))
        {
            if changed {
                write(&mut marks, 0)?;
            }
            return Err(e);
        }
        if let Some(worker) = request.worker {
            let high_water = marks
                .marks
                .get(&key(&request.namespace, worker))
                .map_or(0, |m| m.high_water);
            if let Some(why) = grantid::forgotten_grant(worker, request.not_before, high_water) {
                let latest = marks
                    .latest_end_ms()
                    .max(request.layout.unix_ms_of(request.not_before));
                sidecar::quarantine(&mut marks.store, now_ms, latest, &self.options, why.clone());
                write(&mut marks, 0)?;
                return Err(GrantError::Lost(why));
            }
        }
        let (grant, _) = self.grant(&mut marks, request, false)?;
        write(&mut marks, request.layout.unix_ms_of(grant.end))?;
        Ok(grant)
    }
}

impl GrantSource for StaticAuthority {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        crate::kernel::check_namespace(&request.namespace)?;
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
            None => {
                let (grant, wait) = {
                    let mut marks = process_marks().lock().unwrap_or_else(|p| p.into_inner());
                    self.grant(&mut marks, request, true)?
                };
                std::thread::sleep(wait);
                grant
            }
            Some(path) => self.grant_from_file(path, request)?,
        };
        memory
            .answers
            .insert(request.incarnation, (request.request_id, grant.clone()));
        Ok(grant)
    }

    fn release(&self, last: &Grant) {
        self.memory.get().lock().answers.remove(&last.incarnation);
        if self.state.is_none() && std::process::id() == self.owner_pid {
            let mut marks = process_marks().lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mark) = marks.marks.get_mut(&key(&last.namespace, last.worker))
                && mark.holder == Some(last.incarnation)
            {
                // The lease ends; the high-water stays.
                mark.holder = None;
                mark.lease_expiry = 0;
            }
        }
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

    /// With a state file: a quarantine from now until `max_lead_ms +
    /// clock_skew_ms` have passed and the latest interval this host was
    /// granted from the file has ended (static grants have no bounded
    /// lead).
    fn fence(&self) -> Result<String, Error> {
        let Some(path) = &self.state else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "static worker without a state file: nothing to fence (its high-water lives in \
                 each process)",
            ));
        };
        let locked = lockfile::lock(path, self.options.timeout).map_err(unavailable)?;
        let (mut marks, _) = self.read_marks(&locked).map_err(unavailable)?;
        let side = Sidecar::open(locked.path());
        let latest = marks.latest_end_ms().max(side.latest_end_ms());
        let until = sidecar::fence(&mut marks.store, self.clock.now_ms(), latest, &self.options);
        marks.store.serial += 1;
        locked
            .write(&serde_json::to_vec_pretty(&marks).unwrap_or_default())
            .map_err(unavailable)?;
        side.record(&marks.store, 0);
        Ok(format!(
            "static state file {}: quarantine until Unix ms {until}: no grant before it",
            path.display()
        ))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let marks = match &self.state {
            Some(path) => {
                let locked = lockfile::lock(path, self.options.timeout).map_err(unavailable)?;
                self.read_marks(&locked).map_err(unavailable)?.0
            }
            None => {
                let marks = process_marks().lock().unwrap_or_else(|p| p.into_inner());
                Marks {
                    marks: marks.marks.clone(),
                    store: StoreMark::default(),
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
                holder: m.holder,
                lease_expiry: m.lease_expiry,
                high_water: m.high_water,
                fencing: m.fencing,
            });
        }
        out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
        Ok(out)
    }
}
