//! The deployment fuzzer's hostile client (docs/RELIABILITY.md,
//! "Deployment fuzzer"): a token holder of a `grantid serve` that sends
//! crafted `GrantService` calls, and a peer that holds idle and slow
//! connections, while the case's fleet runs; then the probe that checks
//! every other namespace still issues.
//!
//! * **Calls**, through the `grpcs://` client with the hostile's token:
//!   `Status` of each namespace it targets (the holders, high-water marks
//!   and fencing tokens it then attacks); renewals that claim a lost grant
//!   from the layout's last tick, from just past the bound any grant could
//!   reach, and (a scoped token only) from within it; renewals and releases
//!   of workers other incarnations hold; and, in a namespace of its own,
//!   grants of its own.
//! * **Connections**: per server, [`IDLE`] TCP connections that never send
//!   a byte and one that sends a byte every 500 ms, each opened again once
//!   the server closes it.
//! * **The probe** ([`probe`]): a new generator of a namespace, with a
//!   token of its own, must issue within a bound that covers every
//!   quarantine the case's own faults can start.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use grantid::{Generator, Grant, GrantError, GrantRequest, Layout};

/// Idle connections held per server.
pub const IDLE: usize = 32;
/// `--max-connections` of a case's servers with a hostile client: below
/// what the idle connections would hold, so the cap is met.
pub const MAX_CONNECTIONS: usize = 24;
/// The clock-skew allowance the hostile assumes the store adds (the
/// default; a case draws 200 ms at most otherwise).
const SKEW_MS: u64 = 1_000;
/// How far ahead of the clock a claim within the bound starts, in ms:
/// within the shortest `max_lead_ms` a case draws (1,500).
const NEAR_MS: u64 = 1_000;
/// How far past the bound a "just past the bound" claim starts, in ms:
/// room for the two clocks (one host) and the call's transit.
const PAST_MS: u64 = 2_000;

/// What the hostile's token may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Bound to a namespace of its own.
    Own,
    /// Bound to a namespace of the fleet's (it attacks those holders).
    Shared,
    /// Bound to no namespace: it sends only claims past the bound (an
    /// unscoped token's claim within the bound is evidence by design).
    Unscoped,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Own => "scoped to its own namespace",
            Scope::Shared => "scoped to a fleet namespace",
            Scope::Unscoped => "unscoped",
        }
    }
}

/// A drawn hostile client.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scope: Scope,
    /// The namespaces its calls are about (the token's, when scoped).
    pub targets: Vec<String>,
    /// Its calls' seed.
    pub seed: u64,
}

impl Plan {
    /// The namespace its token is bound to (`None`: unscoped).
    pub fn bound_to(&self) -> Option<&str> {
        match self.scope {
            Scope::Own | Scope::Shared => self.targets.first().map(String::as_str),
            Scope::Unscoped => None,
        }
    }
}

/// Counts by what was sent and what came back.
pub type Tally = BTreeMap<&'static str, u64>;

/// A running hostile client; [`Hostile::stop`] ends it.
#[derive(Debug)]
pub struct Hostile {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tally: Arc<Mutex<Tally>>,
}

fn count(tally: &Mutex<Tally>, what: &'static str) {
    if let Ok(mut t) = tally.lock() {
        *t.entry(what).or_default() += 1;
    }
}

impl Hostile {
    /// Starts the calls on `url` (the hostile's `grpcs://` URL) and the
    /// connections to `ports`.
    pub fn start(plan: Plan, url: String, ports: Vec<u16>) -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::new()));
        let mut threads = Vec::new();
        {
            let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
            threads.push(std::thread::spawn(move || {
                calls(&plan, &url, &stop, &tally)
            }));
        }
        for port in ports {
            let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
            threads.push(std::thread::spawn(move || connections(port, &stop, &tally)));
        }
        Hostile {
            stop,
            threads,
            tally,
        }
    }

    /// Stops every thread; what they sent and saw.
    pub fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The answer's kind, for the tally.
fn answer(result: &Result<Grant, GrantError>) -> &'static str {
    match result {
        Ok(_) => "answered: granted",
        Err(GrantError::Lost(why)) if why.contains(grantid::NOT_EVIDENCE) => {
            "answered: lost, not evidence"
        }
        Err(GrantError::Lost(why)) if why.contains("PERMISSION_DENIED") => {
            "answered: permission denied"
        }
        Err(GrantError::Lost(_)) => "answered: lost",
        Err(GrantError::Refused(why)) if why.contains("PERMISSION_DENIED") => {
            "answered: permission denied"
        }
        Err(GrantError::Refused(_)) => "answered: refused",
        Err(GrantError::Unavailable(why)) if why.contains("PERMISSION_DENIED") => {
            "answered: permission denied"
        }
        Err(GrantError::Unavailable(_) | GrantError::Invalid(_)) => "answered: unavailable",
    }
}

/// The calls, every 50 to 250 ms (half of them claims within the bound), after a first half second (the fleet
/// holds grants by then).
fn calls(plan: &Plan, url: &str, stop: &AtomicBool, tally: &Mutex<Tally>) {
    let mut rng = fastrand::Rng::with_seed(plan.seed);
    let incarnation = rng.u64(..);
    let mut request_id = 0u64;
    std::thread::sleep(Duration::from_millis(500));
    let mut client = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(rng.u64(50..250)));
        let Some(source) = client.as_ref() else {
            match grantid_authority::open(url) {
                Ok(c) => client = Some(c),
                Err(_) => count(tally, "client not connected"),
            }
            continue;
        };
        let lead = source.max_lead_ms().unwrap_or(7_000);
        let namespace = &plan.targets[rng.usize(..plan.targets.len())];
        let workers = match source.status(Some(namespace)) {
            Ok(w) => {
                count(tally, "status");
                w
            }
            Err(e) => {
                count(
                    tally,
                    if e.message().contains("PERMISSION_DENIED") {
                        "status: permission denied"
                    } else {
                        "status: failed"
                    },
                );
                continue;
            }
        };
        let layout = workers.first().map_or_else(Layout::default, |w| w.layout);
        let tick = layout.tick_ms();
        let now = layout.tick_at(now_ms());
        request_id += 1;
        let mut request = GrantRequest {
            namespace: namespace.clone(),
            incarnation,
            request_id,
            worker: None,
            not_before: 0,
            now: 0,
            duration: 200u64.div_ceil(tick),
            layout,
        };
        let target = (!workers.is_empty()).then(|| &workers[rng.usize(..workers.len())]);
        // Half the calls are claims within the bound (which only a scoped
        // token sends): a store that took them as evidence would stay
        // quarantined.
        let roll = rng.u8(..10);
        let action = if roll >= 6 { 3 } else { roll };
        let (what, result) = match (action, target) {
            (0, _) | (_, None) if plan.scope == Scope::Own => {
                ("sent: a grant of its own", source.acquire(&request))
            }
            (_, None) => continue,
            (1, Some(w)) => {
                request.worker = Some(w.worker);
                request.not_before = layout.timestamp_limit() - 1;
                ("sent: a claim from the last tick", source.acquire(&request))
            }
            (2, Some(w)) => {
                request.worker = Some(w.worker);
                request.not_before = now + (lead + SKEW_MS + PAST_MS).div_ceil(tick);
                ("sent: a claim past the bound", source.acquire(&request))
            }
            (3, Some(w)) if plan.scope != Scope::Unscoped => {
                // Within every bound a case draws, past the worker's
                // high-water.
                request.worker = Some(w.worker);
                request.not_before = (now + NEAR_MS / tick).max(w.high_water + 1);
                ("sent: a claim within the bound", source.acquire(&request))
            }
            (4, Some(w)) if w.holder.is_some_and(|h| h != incarnation) => {
                request.worker = Some(w.worker);
                request.not_before = w.high_water;
                (
                    "sent: a renewal of another incarnation's worker",
                    source.acquire(&request),
                )
            }
            (5, Some(w)) if w.holder.is_some_and(|h| h != incarnation) => {
                // As its holder: the holder's incarnation and fencing token.
                let grant = Grant {
                    namespace: namespace.clone(),
                    worker: w.worker,
                    incarnation: w.holder.unwrap_or_default(),
                    grant_id: w.fencing,
                    start: w.high_water.saturating_sub(1),
                    end: w.high_water,
                };
                source.release(&grant);
                count(tally, "sent: a release of another incarnation's grant");
                continue;
            }
            _ => continue,
        };
        count(tally, what);
        count(tally, answer(&result));
    }
}

/// [`IDLE`] silent connections to `port` and one that sends a byte every
/// 500 ms, each opened again once the server closed it.
fn connections(port: u16, stop: &AtomicBool, tally: &Mutex<Tally>) {
    let open = || {
        let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut held: Vec<Option<TcpStream>> = (0..=IDLE).map(|_| None).collect();
    let mut tick = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for (i, slot) in held.iter_mut().enumerate() {
            let closed = match slot.as_mut() {
                None => false,
                Some(s) => {
                    let mut buf = [0u8; 256];
                    let gone = match s.read(&mut buf) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    };
                    // The slow one: a TLS record header, a byte at a time.
                    gone || (i == IDLE && tick.is_multiple_of(5) && s.write_all(&[0x16]).is_err())
                }
            };
            if closed {
                count(tally, "connections closed by the server");
                *slot = None;
            }
            if slot.is_none() {
                *slot = open();
                count(
                    tally,
                    if slot.is_some() {
                        "connections opened"
                    } else {
                        "connections refused"
                    },
                );
            }
        }
        tick += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long [`probe`] waits at most: the longest quarantine a case's own
/// faults start (the drawn `max_lead_ms` of 7,000 at most, plus the default
/// 1,000 ms skew), a renewal's time to detect it, and slack for a loaded
/// host.
pub const PROBE_WITHIN: Duration = Duration::from_secs(14);

/// A new generator of `namespace` on `url` (the layout the namespace is
/// registered with, else the default; a namespace with a datacenter split
/// is not probed, as `Status` does not report the split) and its first
/// 100 IDs within [`PROBE_WITHIN`], then IDs for `hold` more; the time to
/// the first 100, or `Err` with why it stopped.
pub fn probe(url: &str, namespace: &str, hold: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let layout = loop {
        match grantid_authority::open(url).and_then(|a| a.status(Some(namespace))) {
            Ok(w) => break w.first().map_or_else(Layout::default, |w| w.layout),
            Err(e) if started.elapsed() > PROBE_WITHIN => return Err(format!("status: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    // One datacenter's part (a split namespace): the whole layout, from
    // datacenter 0 (`datacenter=0`, as the fleet's processes ask).
    let source = grantid_authority::from_url(url).map_err(|e| e.to_string())?;
    let builder = Generator::builder(layout, namespace, source);
    let generator = builder
        .horizon_ms(300)
        .grant_duration_ms(200)
        .startup_timeout(PROBE_WITHIN.saturating_sub(started.elapsed()))
        .start()
        .map_err(|e| e.to_string())?;
    let issued = (0..100).try_for_each(|_| generator.next_id().map(drop));
    let first = started.elapsed();
    // Then on through renewals: a store quarantined again meanwhile
    // refuses them (`LeaseLost`); a renewal late on a loaded host
    // (`Unavailable`) is waited out.
    let held = Instant::now();
    let kept = issued.and_then(|()| {
        while held.elapsed() < hold {
            match generator.next_id() {
                Err(e) if e.kind() == grantid::ErrorKind::Unavailable => {}
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    });
    generator.close();
    kept.map_err(|e| e.to_string())?;
    Ok(first)
}
