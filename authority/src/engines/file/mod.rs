//! The file authority: [`grantid::Allocator`] kept in a lock-guarded JSON
//! state file, for the processes of one host.
//!
//! Each `acquire` locks the file, reads it, applies the rule, writes the new
//! state atomically (temp file, `fsync`, `rename`, `fsync` of the directory)
//! and unlocks: the high-water mark is on disk before the grant is answered.
//! Authority time is this host's clock.

pub(crate) mod url;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grantid::{
    Allocator, Claim, Clock, Error, Grant, GrantError, GrantRequest, GrantSource, NamespaceRecord,
    SystemClock, WorkerRecord, Workers,
};
use serde::{Deserialize, Serialize};

use crate::kernel::{Authority, Sessions, WorkerStatus, not_this_engines};
use crate::local::{LayoutDoc, unavailable};
use crate::lockfile::{self, Locked};
use crate::sidecar::{self, Sidecar, StoreMark};
use crate::url::{Options, Target};

/// The registry's opener of `file:` URLs: one session whatever `_n` is
/// (every call runs under the file's lock).
pub(crate) fn open(
    url: &str,
    target: Target,
    options: Options,
    _n: usize,
) -> Result<Sessions, Error> {
    match target {
        Target::File(path) => Ok(Sessions::one(FileAuthority::new(path, options))),
        _ => Err(not_this_engines(url, "file")),
    }
}

/// How many recent grants the state file keeps (for `status`).
const RECENT_GRANTS: usize = 256;
/// Format version of the state file.
const FORMAT: u32 = 1;

/// The file authority. See the module docs.
pub struct FileAuthority {
    path: PathBuf,
    options: Options,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FileAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAuthority")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct WorkerDoc {
    worker: u32,
    holder: Option<u64>,
    lease_expiry: u64,
    high_water: u64,
    fencing: u64,
}

#[derive(Serialize, Deserialize)]
struct NamespaceDoc {
    layout: LayoutDoc,
    workers: Vec<WorkerDoc>,
}

#[derive(Serialize, Deserialize)]
struct GrantDoc {
    namespace: String,
    worker: u32,
    incarnation: u64,
    request_id: u64,
    grant_id: u64,
    start: u64,
    end: u64,
}

#[derive(Serialize, Deserialize)]
struct StateDoc {
    format: u32,
    namespaces: HashMap<String, NamespaceDoc>,
    /// Answers kept for retries: those whose lease has not expired.
    answers: Vec<GrantDoc>,
    /// The most recent grants, newest last.
    recent: Vec<GrantDoc>,
    /// The file's identity and quarantine (docs/AUTHORITIES.md, "State
    /// loss"); absent in files written before it existed.
    #[serde(default)]
    store: StoreMark,
}

fn grant_doc(g: &Grant, request_id: u64) -> GrantDoc {
    GrantDoc {
        namespace: g.namespace.clone(),
        worker: g.worker,
        incarnation: g.incarnation,
        request_id,
        grant_id: g.grant_id,
        start: g.start,
        end: g.end,
    }
}

fn grant_of(d: &GrantDoc) -> Grant {
    Grant {
        namespace: d.namespace.clone(),
        worker: d.worker,
        incarnation: d.incarnation,
        grant_id: d.grant_id,
        start: d.start,
        end: d.end,
    }
}

/// The state as loaded: the allocator (with the answers kept for retries)
/// and the recent log.
struct State {
    alloc: Allocator,
    recent: Vec<GrantDoc>,
    store: StoreMark,
}

fn decode(path: &Path, bytes: Option<Vec<u8>>) -> Result<State, GrantError> {
    let Some(bytes) = bytes else {
        return Ok(State {
            alloc: Allocator::new(0),
            recent: Vec::new(),
            store: StoreMark::default(),
        });
    };
    // A damaged state file must not be replaced by an empty one (that would
    // forget the high-water marks): refuse until an operator looks at it.
    let doc: StateDoc = serde_json::from_slice(&bytes).map_err(|e| {
        GrantError::Unavailable(format!("state file {} is damaged: {e}", path.display()))
    })?;
    if doc.format != FORMAT {
        return Err(GrantError::Unavailable(format!(
            "state file {} has format {}, this build reads {FORMAT}",
            path.display(),
            doc.format
        )));
    }
    let mut alloc = Allocator::new(0);
    for (name, ns) in doc.namespaces {
        let layout = ns.layout.layout().map_err(|e| {
            GrantError::Unavailable(format!("state file {}: {name}: {e}", path.display()))
        })?;
        let mut workers = Workers::default();
        for w in ns.workers {
            if u64::from(w.worker) < layout.worker_count() {
                *workers.record(w.worker) = WorkerRecord {
                    holder: w.holder,
                    lease_expiry: w.lease_expiry,
                    high_water: w.high_water,
                    fencing: w.fencing,
                    used: true,
                };
            }
        }
        alloc
            .namespaces
            .insert(name, NamespaceRecord { layout, workers });
    }
    alloc.answers = doc
        .answers
        .iter()
        .map(|a| {
            (
                (a.namespace.clone(), a.incarnation, a.request_id),
                grant_of(a),
            )
        })
        .collect();
    Ok(State {
        alloc,
        recent: doc.recent,
        store: doc.store,
    })
}

fn encode(state: &State, grace_ms: u64, now_ms: u64) -> Vec<u8> {
    let mut namespaces = HashMap::new();
    for (name, ns) in &state.alloc.namespaces {
        let workers = ns
            .workers
            .iter()
            .filter(|(_, w)| w.used)
            .map(|(i, w)| WorkerDoc {
                worker: i,
                holder: w.holder,
                lease_expiry: w.lease_expiry,
                high_water: w.high_water,
                fencing: w.fencing,
            })
            .collect();
        namespaces.insert(
            name.clone(),
            NamespaceDoc {
                layout: ns.layout.into(),
                workers,
            },
        );
    }
    // Keep the answers a retry may still ask for: while the lease lives.
    let mut answers: Vec<GrantDoc> = state
        .alloc
        .answers
        .iter()
        .filter(|(_, g)| {
            state.alloc.namespaces.get(&g.namespace).is_some_and(|ns| {
                let grace = grace_ms.div_ceil(ns.layout.tick_ms());
                g.end.saturating_add(grace) > ns.layout.tick_at(now_ms)
            })
        })
        .map(|((_, _, req), g)| grant_doc(g, *req))
        .collect();
    answers.sort_by_key(|a| (a.namespace.clone(), a.worker, a.start));
    let skip = state.recent.len().saturating_sub(RECENT_GRANTS);
    let doc = StateDoc {
        format: FORMAT,
        namespaces,
        answers,
        recent: state
            .recent
            .iter()
            .skip(skip)
            .map(|g| GrantDoc {
                namespace: g.namespace.clone(),
                ..*g
            })
            .collect(),
        store: state.store.clone(),
    };
    let mut out = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    out.push(b'\n');
    out
}

impl FileAuthority {
    /// The authority of the state file at `path` (created on first grant).
    pub fn new(path: impl Into<PathBuf>, options: Options) -> FileAuthority {
        FileAuthority {
            path: path.into(),
            options,
            clock: Arc::new(SystemClock),
        }
    }

    /// Times grants by `clock` instead of the system clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> FileAuthority {
        self.clock = clock;
        self
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Locks and reads the file, and checks it against its sidecar: a
    /// file found missing, replaced or older than what this host's
    /// processes last wrote is quarantined (written at once).
    fn lock(&self) -> Result<(Locked, State, Sidecar), GrantError> {
        let locked = lockfile::lock(&self.path, self.options.timeout)?;
        let bytes = locked.read()?;
        let found = bytes.is_some();
        let mut state = decode(&self.path, bytes)?;
        let side = Sidecar::open(locked.path());
        let now_ms = self.clock.now_ms();
        // The sidecar's end is believed as it is: a process with a longer
        // lead than this one's may hold it.
        let (mark, changed) = side.check(found.then_some(&state.store), now_ms, None);
        state.store = mark;
        if changed && state.store.quarantine_until_ms > now_ms {
            self.write(&locked, &mut state, &side, 0)?;
        }
        Ok((locked, state, side))
    }

    /// Writes the state as the file's next version and records it in the
    /// sidecar, with a grant ending at `until_ms` (0: none).
    fn write(
        &self,
        locked: &Locked,
        state: &mut State,
        side: &Sidecar,
        until_ms: u64,
    ) -> Result<(), GrantError> {
        state.store.serial += 1;
        let now_ms = self.clock.now_ms();
        locked.write(&encode(state, self.options.lease_grace_ms, now_ms))?;
        side.record(&state.store, until_ms);
        Ok(())
    }
}

/// The forgotten-grant check ([`grantid::forgotten_grant`]) of a renewal
/// against the file's high-water for the worker, bounded by the file's
/// lead and skew at `now` (ticks).
fn forgotten(state: &State, request: &GrantRequest, options: &Options, now: u64) -> Claim {
    let Some(worker) = request.worker else {
        return Claim::Consistent;
    };
    let high_water = state
        .alloc
        .namespaces
        .get(&request.namespace)
        .and_then(|ns| ns.workers.get(worker))
        .map_or(0, |w| w.high_water);
    let bound = grantid::evidence_bound(
        now,
        Some(options.max_lead_ms),
        options.clock_skew_ms,
        request.layout.tick_ms(),
    );
    grantid::forgotten_grant(worker, request.not_before, high_water, bound)
}

/// The latest end (Unix ms) of any interval the file records as granted.
fn latest_end_ms(state: &State) -> u64 {
    state
        .alloc
        .namespaces
        .values()
        .flat_map(|ns| {
            ns.workers
                .iter()
                .map(move |(_, w)| ns.layout.unix_ms_of(w.high_water))
        })
        .max()
        .unwrap_or(0)
}

impl GrantSource for FileAuthority {
    fn max_lead_ms(&self) -> Option<u64> {
        Some(self.options.max_lead_ms)
    }

    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        crate::kernel::check_namespace(&request.namespace)?;
        let (locked, mut state, side) = self.lock()?;
        let now_ms = self.clock.now_ms();
        let layout = request.layout;
        state.alloc.lease_grace = self.options.lease_grace_ms.div_ceil(layout.tick_ms());
        state.alloc.max_lead_ms = Some(self.options.max_lead_ms);
        let key = (
            request.namespace.clone(),
            request.incarnation,
            request.request_id,
        );
        let replay = state.alloc.answers.contains_key(&key);
        // Another layout can never succeed: the rule refuses it, during a
        // quarantine too.
        let another_layout = state
            .alloc
            .namespaces
            .get(&request.namespace)
            .is_some_and(|ns| ns.layout != layout.without_datacenter_bits());
        // Past the layout check the namespace is registered with the
        // request's layout, whatever the answer (the rule's order).
        let registers =
            !replay && !another_layout && !state.alloc.namespaces.contains_key(&request.namespace);
        if registers {
            state
                .alloc
                .register(&request.namespace, layout.without_datacenter_bits());
        }
        let answer = if !replay && !another_layout {
            match sidecar::gate(&state.store, now_ms, request.worker) {
                Err(e) => Err(e),
                Ok(()) => match forgotten(&state, request, &self.options, layout.tick_at(now_ms)) {
                    Claim::Impossible(why) => Err(GrantError::Lost(why)),
                    Claim::Forgotten(why) => {
                        let latest = layout
                            .unix_ms_of(request.not_before)
                            .max(latest_end_ms(&state));
                        sidecar::quarantine(
                            &mut state.store,
                            now_ms,
                            latest,
                            &self.options,
                            why.clone(),
                        );
                        self.write(&locked, &mut state, &side, 0)?;
                        return Err(GrantError::Lost(why));
                    }
                    Claim::Consistent => state.alloc.allocate(request, layout.tick_at(now_ms)),
                },
            }
        } else {
            state.alloc.allocate(request, layout.tick_at(now_ms))
        };
        let grant = match answer {
            Ok(grant) => grant,
            Err(e) => {
                if registers {
                    self.write(&locked, &mut state, &side, 0)?;
                }
                return Err(e);
            }
        };
        if replay {
            // The first answer may never have reached the sidecar (a write
            // that failed after its rename, a crash between the two).
            side.record(&state.store, layout.unix_ms_of(grant.end));
            return Ok(grant);
        }
        state.recent.push(grant_doc(&grant, request.request_id));
        self.write(&locked, &mut state, &side, layout.unix_ms_of(grant.end))?;
        Ok(grant)
    }

    fn release(&self, last: &Grant) {
        let Ok((locked, mut state, side)) = self.lock() else {
            return;
        };
        let now_ms = self.clock.now_ms();
        let Some(layout) = state
            .alloc
            .namespaces
            .get(&last.namespace)
            .map(|n| n.layout)
        else {
            return;
        };
        state.alloc.release(last, layout.tick_at(now_ms));
        let _ = self.write(&locked, &mut state, &side, 0);
    }
}

impl Authority for FileAuthority {
    fn init(&self) -> Result<String, Error> {
        let (locked, mut state, side) = self.lock().map_err(unavailable)?;
        if !self.path.exists() {
            self.write(&locked, &mut state, &side, 0)
                .map_err(unavailable)?;
            return Ok(format!("created state file {}", self.path.display()));
        }
        Ok(format!("state file {} is ready", self.path.display()))
    }

    fn fence(&self) -> Result<String, Error> {
        let (locked, mut state, side) = self.lock().map_err(unavailable)?;
        let latest = latest_end_ms(&state).max(side.latest_end_ms());
        let until = sidecar::fence(&mut state.store, self.clock.now_ms(), latest, &self.options);
        self.write(&locked, &mut state, &side, 0)
            .map_err(unavailable)?;
        Ok(format!(
            "state file {}: quarantine until Unix ms {until} (max_lead_ms {} + clock_skew_ms {}): \
             no grant before it, and every renewal before it loses its worker",
            self.path.display(),
            self.options.max_lead_ms,
            self.options.clock_skew_ms
        ))
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        let (_locked, state, _) = self.lock().map_err(unavailable)?;
        Ok(sidecar::recorded(&state.store))
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        let (locked, mut state, side) = self.lock().map_err(unavailable)?;
        let was = sidecar::lift(&mut state.store);
        self.write(&locked, &mut state, &side, 0)
            .map_err(unavailable)?;
        let store = format!("state file {}", self.path.display());
        Ok(crate::kernel::lifted(
            &store,
            was.as_ref(),
            self.clock.now_ms(),
        ))
    }

    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        let (_locked, state, _) = self.lock().map_err(unavailable)?;
        let mut out = Vec::new();
        for (name, ns) in &state.alloc.namespaces {
            if namespace.is_some_and(|n| n != name) {
                continue;
            }
            for (i, w) in ns.workers.iter().filter(|(_, w)| w.used) {
                out.push(WorkerStatus {
                    namespace: name.clone(),
                    layout: ns.layout,
                    worker: i,
                    holder: w.holder,
                    lease_expiry: w.lease_expiry,
                    high_water: w.high_water,
                    fencing: w.fencing,
                });
            }
        }
        out.sort_by(|a, b| (&a.namespace, a.worker).cmp(&(&b.namespace, b.worker)));
        Ok(out)
    }
}
