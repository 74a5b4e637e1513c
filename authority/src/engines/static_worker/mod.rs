//! The static authority: a worker number the fleet already owns (`static:N`,
//! or the ordinal of a StatefulSet pod, `static:env:POD_NAME`).
//!
//! It decides by the rule ([`grantid::rule::decide`], with
//! [`Policy::only_worker`] N) on this host's clock. Across processes there
//! is no lease: the operator promises that one process at a time uses
//! worker N (a state file keeps no holder). With
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

pub(crate) mod url;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use grantid::rule::{self, Decision, Policy, Registered, View};
use grantid::{
    Clock, Error, ErrorKind, Grant, GrantError, GrantRequest, GrantSource, SystemClock,
    WorkerRecord, Workers,
};
use serde::{Deserialize, Serialize};

use crate::forklocal::ForkLocal;
use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::local::{LayoutDoc, unavailable};
use crate::lockfile;
use crate::sidecar::{self, Sidecar, StoreMark};
use crate::url::{Options, Target};

/// The registry's opener of `static:` URLs: one session whatever `_n` is
/// (every call runs under one lock).
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    _n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::Static { worker, state } => {
            Ok(Sessions::one(StaticAuthority::new(worker, state, options)))
        }
        _ => Err(not_this_engines(url, "static")),
    }
}

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
    /// The longest `max_lead_ms` and `clock_skew_ms` any caller used on
    /// the namespace (the rule's [`Registered`]).
    #[serde(default)]
    max_lead_ms: u64,
    #[serde(default)]
    clock_skew_ms: u64,
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

/// The namespace of a mark's [`key`].
fn namespace_of(key: &str) -> Option<&str> {
    key.rsplit_once('#').map(|(ns, _)| ns)
}

/// The mark of `key`, made for the namespace as registered (`ns`) if it
/// has none, its recorded lead and skew raised to `ns`'s.
fn register<'a>(marks: &'a mut Marks, key: &str, ns: Registered) -> &'a mut Mark {
    let mark = marks.marks.entry(key.to_owned()).or_insert(Mark {
        layout: ns.layout.into(),
        high_water: 0,
        fencing: 0,
        holder: None,
        lease_expiry: 0,
        max_lead_ms: 0,
        clock_skew_ms: 0,
    });
    mark.max_lead_ms = mark.max_lead_ms.max(ns.max_lead_ms);
    mark.clock_skew_ms = mark.clock_skew_ms.max(ns.clock_skew_ms);
    mark
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

    /// The rule's decision ([`rule::decide`]) for `request` over `marks`
    /// at `now_ms`: worker N is the only worker ([`Policy::only_worker`]);
    /// the namespace is registered by its marks (the layout, the longest
    /// lead and skew any caller used); a state file's quarantine gates it.
    /// `bare`: no state file (holders are kept, the lead is unbounded).
    fn decide(
        &self,
        marks: &Marks,
        request: &GrantRequest,
        now_ms: u64,
        bare: bool,
    ) -> Result<Decision, GrantError> {
        let layout = request.layout;
        let own = marks.marks.get(&key(&request.namespace, self.worker));
        let of_namespace: Vec<&Mark> = marks
            .marks
            .iter()
            .filter(|(k, _)| namespace_of(k) == Some(&request.namespace))
            .map(|(_, m)| m)
            .collect();
        let registered = match own.or(of_namespace.first().copied()) {
            None => None,
            Some(m) => Some(Registered {
                layout: m.layout.layout().map_err(|e| {
                    GrantError::Unavailable(format!("static state is damaged: {e}"))
                })?,
                next_unused: 0,
                max_lead_ms: of_namespace
                    .iter()
                    .map(|m| m.max_lead_ms)
                    .max()
                    .unwrap_or(0),
                clock_skew_ms: of_namespace
                    .iter()
                    .map(|m| m.clock_skew_ms)
                    .max()
                    .unwrap_or(0),
            }),
        };
        let mut workers = Workers::default();
        if let Some(m) = own {
            *workers.record(self.worker) = WorkerRecord {
                holder: if bare { m.holder } else { None },
                lease_expiry: if bare { m.lease_expiry } else { 0 },
                high_water: m.high_water,
                fencing: m.fencing,
                used: m.fencing > 0,
            };
        }
        let quarantine = sidecar::recorded(&marks.store);
        let view = View {
            registered: registered.as_ref(),
            workers: &workers,
            answer: None,
            quarantine: quarantine.as_ref().filter(|_| !bare),
        };
        let policy = Policy {
            lease_grace: self.options.lease_grace_ms.div_ceil(layout.tick_ms()),
            max_lead_ms: self.max_lead_ms(),
            clock_skew_ms: self.options.clock_skew_ms,
            only_worker: Some(self.worker),
        };
        Ok(rule::decide(
            &view,
            request,
            &policy,
            now_ms,
            layout.tick_at(now_ms),
        ))
    }

    /// Writes what `decision` says into `marks`; returns the answer and
    /// whether `marks` changed. A quarantine to start (a state file only)
    /// runs until every interval the file records has ended too.
    fn apply(
        &self,
        marks: &mut Marks,
        request: &GrantRequest,
        decision: Decision,
        now_ms: u64,
        bare: bool,
    ) -> (Result<Grant, GrantError>, bool) {
        let k = key(&request.namespace, self.worker);
        match decision {
            Decision::Recorded(grant) => (Ok(grant), false),
            Decision::Grant {
                grant,
                record,
                namespace,
                ..
            } => {
                let mark = register(marks, &k, namespace);
                mark.high_water = record.high_water;
                mark.fencing = record.fencing;
                if bare {
                    mark.holder = record.holder;
                    mark.lease_expiry = record.lease_expiry;
                }
                (Ok(grant), true)
            }
            Decision::Answer {
                error,
                quarantine,
                namespace,
            } => {
                let mut changed = false;
                if let Some(ns) = namespace {
                    register(marks, &k, ns);
                    changed = true;
                }
                if let Some((until, why)) = quarantine.filter(|_| !bare) {
                    let latest = marks
                        .latest_end_ms()
                        .max(request.layout.unix_ms_of(request.not_before));
                    sidecar::quarantine(&mut marks.store, now_ms, latest, &self.options, why);
                    marks.store.quarantine_until_ms = marks.store.quarantine_until_ms.max(until);
                    changed = true;
                }
                (Err(error), changed)
            }
        }
    }

    /// One grant from this process's marks (no state file). A worker this
    /// process has not used yet starts [`BARE_LEAD_MS`] plus one tick
    /// after the clock (see the module docs): its mark is made with that
    /// high-water, and the grant is decided once the clock has reached it
    /// (at that high-water, if the clock it is timed by has not moved).
    fn grant_bare(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let layout = request.layout;
        let (lead, ready_ms) = {
            let mut marks = process_marks().lock().unwrap_or_else(|p| p.into_inner());
            let k = key(&request.namespace, self.worker);
            let now = layout.tick_at(self.clock.now_ms());
            match marks.marks.contains_key(&k) {
                true => (Duration::ZERO, 0),
                false => {
                    let ahead = BARE_LEAD_MS.div_ceil(layout.tick_ms()) + 1;
                    // Made with the namespace's layout as another worker's
                    // mark registered it, so the rule refuses another one.
                    let registered = marks
                        .marks
                        .iter()
                        .find(|(key, _)| namespace_of(key) == Some(&request.namespace))
                        .map_or(layout.without_datacenter_bits().into(), |(_, m)| m.layout);
                    let ns = Registered {
                        layout: registered.layout().map_err(|e| {
                            GrantError::Unavailable(format!("static state is damaged: {e}"))
                        })?,
                        next_unused: 0,
                        max_lead_ms: 0,
                        clock_skew_ms: 0,
                    };
                    register(&mut marks, &k, ns).high_water = now.saturating_add(ahead);
                    (
                        Duration::from_millis(ahead.saturating_mul(layout.tick_ms())),
                        layout.unix_ms_of(now.saturating_add(ahead)),
                    )
                }
            }
        };
        std::thread::sleep(lead);
        let mut marks = process_marks().lock().unwrap_or_else(|p| p.into_inner());
        let now_ms = self.clock.now_ms().max(ready_ms);
        let decision = self.decide(&marks, request, now_ms, true)?;
        self.apply(&mut marks, request, decision, now_ms, true).0
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
        // The sidecar's end is believed whole (as the file authority does).
        let (store, seen_changed) = side.check(found.then_some(&marks.store), now_ms, None);
        marks.store = store;
        let decision = self.decide(&marks, request, now_ms, false)?;
        let (answer, changed) = self.apply(&mut marks, request, decision, now_ms, false);
        if changed || seen_changed {
            marks.store.serial += 1;
            locked.write(&serde_json::to_vec_pretty(&marks).unwrap_or_default())?;
            let until = answer
                .as_ref()
                .map_or(0, |g| request.layout.unix_ms_of(g.end));
            side.record(&marks.store, until);
        }
        answer
    }
}

impl GrantSource for StaticAuthority {
    /// With a state file, `max_lead_ms`; without one the lead is
    /// unbounded (nothing outlives the process to quarantine).
    fn max_lead_ms(&self) -> Option<u64> {
        self.state.is_some().then_some(self.options.max_lead_ms)
    }

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
            None => self.grant_bare(request)?,
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

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        let Some(path) = &self.state else {
            return Ok(None);
        };
        let locked = lockfile::lock(path, self.options.timeout).map_err(unavailable)?;
        let (marks, _) = self.read_marks(&locked).map_err(unavailable)?;
        Ok(sidecar::recorded(&marks.store))
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let Some(path) = &self.state else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "static worker without a state file: it keeps no quarantine",
            ));
        };
        let locked = lockfile::lock(path, self.options.timeout).map_err(unavailable)?;
        let (mut marks, _) = self.read_marks(&locked).map_err(unavailable)?;
        let side = Sidecar::open(locked.path());
        let was = sidecar::lift(&mut marks.store);
        marks.store.serial += 1;
        locked
            .write(&serde_json::to_vec_pretty(&marks).unwrap_or_default())
            .map_err(unavailable)?;
        side.record(&marks.store, 0);
        let store = format!("static state file {}", path.display());
        Ok(crate::kernel::lifted(
            &store,
            was.as_ref(),
            self.clock.now_ms(),
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
