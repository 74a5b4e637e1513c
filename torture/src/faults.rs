//! The faults the harness injects while the workers run, each verified:
//! a fault that did not take effect is reported, not counted.

use std::time::{Duration, Instant};

use crate::fleet::{Fleet, Launch};
use crate::pgserver::{PgServer, StopMode};
use crate::redisserver::RedisServer;
use crate::status::Status;

/// Fault kinds the harness schedules (clock steps run inside workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of a random worker, restarted with a fresh incarnation.
    Kill,
    /// SIGSTOP past the grant, takeover of its worker, SIGCONT.
    Stop,
    /// PostgreSQL stopped, then started again.
    Postgres,
    /// Redis killed with SIGKILL and restarted empty, then the operator's
    /// `init` (state-loss mode).
    RedisEmpty,
    /// Redis killed with SIGKILL and restarted from a snapshot taken seconds
    /// earlier (state-loss mode).
    RedisStale,
}

impl Fault {
    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::Postgres => "postgres",
            Fault::RedisEmpty => "redis-empty",
            Fault::RedisStale => "redis-stale",
        }
    }

    /// True for the faults that lose the authority's state.
    pub fn loses_state(self) -> bool {
        matches!(self, Fault::RedisEmpty | Fault::RedisStale)
    }
}

/// What the state-loss faults of one kind did.
#[derive(Debug, Default, Clone)]
pub struct LossLog {
    /// Restarts that lost the state as intended (verified on the server).
    pub restarts: u64,
    /// Live workers that saw a lease loss or uncertain retries.
    pub seen: u64,
    /// Live workers (and the process started after the restart) that were
    /// granted and issued again.
    pub recovered: u64,
    /// Workers expected to do both, summed over restarts.
    pub expected: u64,
    /// Per restart: from the restarted server's first answer until every
    /// live worker had a fresh grant and issued again (from the status
    /// files, polled every 20 ms; they are rewritten every 100 ms).
    pub unavailable: Vec<Duration>,
}

impl LossLog {
    /// `min / median / max` of [`LossLog::unavailable`], in seconds.
    pub fn spread(&self) -> Option<(f64, f64, f64)> {
        let mut v: Vec<f64> = self.unavailable.iter().map(Duration::as_secs_f64).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some((v[0], median, v[v.len() - 1]))
    }
}

/// What was injected and verified.
#[derive(Debug, Default, Clone)]
pub struct FaultLog {
    /// kill -9 + restart (the restart got a grant).
    pub kills: u64,
    /// SIGSTOP faults.
    pub stops: u64,
    /// ... whose worker value was then granted to another process.
    pub takeovers: u64,
    /// ... whose process, resumed, saw the loss of its worker.
    pub losses_seen: u64,
    /// PostgreSQL stops and restarts.
    pub pg_restarts: u64,
    /// Live workers that saw the authority uncertain during an outage.
    pub pg_uncertain_seen: u64,
    /// Live workers that issued again after the restart.
    pub pg_recovered: u64,
    /// Live workers expected to do both, summed over outages.
    pub pg_expected: u64,
    /// `fork()`s of the Python worker.
    pub py_forks: u64,
    /// Forked children that recorded IDs and exited cleanly.
    pub py_children_ok: u64,
    /// Forked children that failed.
    pub py_children_failed: u64,
    /// Redis restarted empty.
    pub redis_empty: LossLog,
    /// Redis restarted from a stale snapshot.
    pub redis_stale: LossLog,
    /// Faults that did not take effect, with the reason.
    pub failures: Vec<String>,
}

/// Timing the faults need.
#[derive(Debug, Clone, Copy)]
pub struct FaultTiming {
    /// Horizon of the workers (ms): how far their committed time may lead.
    pub horizon_ms: u64,
    /// Lease grace of the authority (ms).
    pub lease_grace_ms: u64,
    /// How long PostgreSQL stays down (ms).
    pub pg_down_ms: u64,
    /// The layout's epoch (Unix ms; ticks are 1 ms).
    pub epoch_ms: u64,
    /// How long Redis stays down per state-loss fault (ms).
    pub redis_down_ms: u64,
    /// The age of the snapshot a stale restart loads (ms).
    pub stale_ms: u64,
}

const STARTUP: Duration = Duration::from_secs(30);

fn now_ms() -> u64 {
    grantid::Clock::now_ms(&grantid::SystemClock)
}

fn pick(fleet: &Fleet, not: Option<usize>) -> usize {
    loop {
        let s = fastrand::usize(..fleet.live.len());
        if Some(s) != not || fleet.live.len() == 1 {
            return s;
        }
    }
}

/// Kills `slot` and restarts it with `launch`; waits for its first grant.
fn restart(fleet: &mut Fleet, slot: usize, launch: Launch) -> Result<Option<u32>, String> {
    fleet.kill9(slot);
    fleet.spawn(slot, launch)?;
    Ok(fleet
        .wait_status(slot, STARTUP, |s| s.has("worker"))
        .map(|s| s.get("worker") as u32))
}

/// `kill -9` of a random worker and its restart.
pub fn kill(fleet: &mut Fleet, log: &mut FaultLog) -> Result<(), String> {
    let slot = pick(fleet, None);
    let mut launch = fleet.proc(slot).launch;
    launch.prefer_worker = None;
    match restart(fleet, slot, launch)? {
        Some(_) => log.kills += 1,
        None => log
            .failures
            .push(format!("kill -9: the restart of slot {slot} got no grant")),
    }
    Ok(())
}

/// SIGSTOP of a worker for longer than its committed grants and its lease
/// grace; another process (a kill -9 restart of another slot) is made to
/// take its worker value; then SIGCONT, after which the stopped process
/// must report the loss of its worker.
pub fn stop(fleet: &mut Fleet, t: FaultTiming, log: &mut FaultLog) -> Result<(), String> {
    if fleet.live.len() < 2 {
        return Err("the SIGSTOP fault needs at least 2 processes".into());
    }
    let a = pick(fleet, None);
    let Some(before) = fleet.wait_status(a, STARTUP, |s| s.has("worker") && s.has("grant_end"))
    else {
        log.failures
            .push(format!("SIGSTOP: slot {a} never reported a grant"));
        return Ok(());
    };
    let worker = before.get("worker") as u32;
    if !fleet.pause(a, true) {
        log.failures
            .push(format!("SIGSTOP: slot {a} is not running"));
        return Ok(());
    }
    log.stops += 1;
    // The status may trail the process by one snapshot: allow a horizon.
    let free_at = t.epoch_ms + before.get("grant_end") + t.horizon_ms + t.lease_grace_ms + 200;
    while now_ms() < free_at {
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = pick(fleet, Some(a));
    let mut launch = fleet.proc(b).launch;
    launch.prefer_worker = Some(worker);
    let got = restart(fleet, b, launch)?;
    if got == Some(worker) {
        log.takeovers += 1;
    } else {
        log.failures.push(format!(
            "SIGSTOP: worker {worker} of stopped slot {a} went to {got:?}, not to slot {b}"
        ));
    }
    let losses = fleet
        .proc(a)
        .read_status()
        .map_or(0, |s| s.get("lease_losses"));
    fleet.pause(a, false);
    let resumed = fleet.wait_status(a, Duration::from_secs(15), |s| {
        s.get("lease_losses") > losses
    });
    if resumed.is_some() {
        log.losses_seen += 1;
    } else if got == Some(worker) {
        log.failures.push(format!(
            "SIGSTOP: slot {a}, resumed, did not report losing worker {worker}"
        ));
    }
    Ok(())
}

/// The slots whose process runs (not stopped) on the authority (no fake
/// grant): those an authority fault must reach.
fn running_slots(fleet: &Fleet) -> Vec<usize> {
    (0..fleet.live.len())
        .filter(|&s| !fleet.proc(s).stopped && fleet.proc(s).launch.fake_grant.is_none())
        .collect()
}

/// PostgreSQL stopped (crash-like or clean, alternately) for `pg_down_ms`,
/// then started; every live worker must report uncertainty and then issue
/// again.
pub fn postgres(
    fleet: &mut Fleet,
    pg: &mut PgServer,
    t: FaultTiming,
    log: &mut FaultLog,
) -> Result<(), String> {
    let mode = if log.pg_restarts.is_multiple_of(2) {
        StopMode::Immediate
    } else {
        StopMode::Fast
    };
    let slots = running_slots(fleet);
    let before: Vec<(u64, u64)> = slots
        .iter()
        .map(|&s| {
            fleet
                .proc(s)
                .read_status()
                .map_or((0, 0), |st| (st.get("uncertain_retries"), st.get("ids")))
        })
        .collect();
    pg.stop(mode)?;
    let down = Instant::now();
    std::thread::sleep(Duration::from_millis(t.pg_down_ms));
    let mid: Vec<u64> = slots
        .iter()
        .map(|&s| fleet.proc(s).read_status().map_or(0, |st| st.get("ids")))
        .collect();
    pg.start_again()?;
    let downtime = down.elapsed();
    log.pg_restarts += 1;
    let (mut seen, mut recovered) = (0u64, 0u64);
    for (i, &s) in slots.iter().enumerate() {
        let uncertain = before[i].0;
        if fleet
            .wait_status(s, Duration::from_secs(2), |st| {
                st.get("uncertain_retries") > uncertain
            })
            .is_some()
        {
            seen += 1;
        }
        if fleet
            .wait_status(s, Duration::from_secs(20), |st| {
                st.get("ids") > mid[i] + 1000
            })
            .is_some()
        {
            recovered += 1;
        }
    }
    let n = slots.len() as u64;
    log.pg_expected += n;
    log.pg_uncertain_seen += seen;
    log.pg_recovered += recovered;
    if seen < n || recovered < n {
        log.failures.push(format!(
            "postgres restart {} ({mode:?}, down {:?}): {seen}/{n} workers saw uncertainty, {recovered}/{n} issued again",
            log.pg_restarts,
            downtime
        ));
    }
    Ok(())
}

/// What a state-loss fault needs besides the fleet.
#[derive(Debug)]
pub struct LossFault<'a> {
    /// The server to kill and restart.
    pub server: &'a mut RedisServer,
    /// The workers' authority URL (with grantid's options), for `init`.
    pub url: &'a str,
    /// Restart from a snapshot taken `stale_ms` earlier (else empty).
    pub stale: bool,
    /// FAULT INJECTION: hide the loss from the authority after the restart.
    pub defeat: bool,
}

fn sum(fleet: &Fleet, slots: &[usize], key: &str) -> u64 {
    slots
        .iter()
        .filter_map(|&s| fleet.proc(s).read_status())
        .map(|st| st.get(key))
        .sum()
}

/// Redis loses its state under the running workers: SIGKILL, `redis_down_ms`
/// down, a restart on the same port, empty (then `init` again, as an
/// operator would) or from a snapshot `SAVE`d `stale_ms` earlier (workers
/// kept being granted meanwhile: those grants are what the restart
/// forgets). What came back is checked on the server (a new `run_id`; no
/// store record, or the old one). Then one process is replaced by a new one
/// (a process started after the loss), and every live worker must report a
/// lease loss or uncertain retries, then a fresh grant and new IDs; the time
/// from the restart until the last of them is the fault's unavailability.
pub fn redis_loss(
    fleet: &mut Fleet,
    f: LossFault<'_>,
    t: FaultTiming,
    log: &mut FaultLog,
) -> Result<(), String> {
    let what = if f.stale {
        "redis-stale"
    } else {
        "redis-empty"
    };
    let slots = running_slots(fleet);
    if slots.is_empty() {
        return Err(format!("{what}: no worker process runs on the authority"));
    }
    let old_run_id = f.server.run_id()?;
    if f.stale {
        f.server.save()?;
        let at_save = sum(fleet, &slots, "grants_acquired");
        std::thread::sleep(Duration::from_millis(t.stale_ms));
        if sum(fleet, &slots, "grants_acquired") <= at_save {
            log.failures.push(format!(
                "{what}: no grant after the snapshot, so nothing to forget"
            ));
        }
    }
    f.server.kill9();
    // Long enough for every status file to be rewritten after the kill: the
    // baselines below hold every grant made before it.
    std::thread::sleep(Duration::from_millis(t.redis_down_ms.max(250)));
    let before: Vec<Status> = slots
        .iter()
        .map(|&s| fleet.proc(s).read_status().unwrap_or_default())
        .collect();
    f.server.restart(f.stale)?;
    let restarted = Instant::now();
    let new_run_id = f.server.run_id()?;
    let (recorded, reason) = f.server.store_record()?;
    let reason = reason.unwrap_or_default();
    // A worker's call may reach the new server before these reads: it then
    // found what is checked here and quarantined the store for it.
    let lost = if f.stale {
        recorded.as_deref() == Some(old_run_id.as_str())
            || reason.contains(&format!("run_id changed from {old_run_id}"))
    } else {
        recorded.is_none() || reason.contains("no grantid state")
    };
    if new_run_id == old_run_id || !lost {
        log.failures.push(format!(
            "{what}: the restart did not lose the state (run_id {old_run_id} -> {new_run_id}, \
             store record {recorded:?}, {reason:?})"
        ));
        return Ok(());
    }
    if !f.stale {
        // The operator's step after a Redis restart.
        if let Err(e) = grantid_authority::open(f.url).and_then(|a| a.init()) {
            log.failures.push(format!("{what}: authority init: {e}"));
        }
    }
    if f.defeat {
        f.server.defeat_quarantine()?;
    }
    // A process started after the loss: the one holding the highest worker
    // value is replaced, so that the new one's first grant (in an empty
    // store the lowest value not granted since the restart) names a value
    // another live process holds: a loss that went unnoticed would then
    // hand one worker value to two processes.
    let newcomer = slots
        .iter()
        .copied()
        .max_by_key(|&s| fleet.proc(s).read_status().map_or(0, |st| st.get("worker")))
        .expect("checked non-empty above");
    let mut launch = fleet.proc(newcomer).launch;
    launch.prefer_worker = None;
    fleet.kill9(newcomer);
    fleet.spawn(newcomer, launch)?;
    let loss = if f.stale {
        &mut log.redis_stale
    } else {
        &mut log.redis_empty
    };
    loss.restarts += 1;
    let n = slots.len();
    let (mut seen, mut back) = (vec![false; n], vec![None::<Instant>; n]);
    let deadline = restarted + Duration::from_secs(30);
    while back.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, &s) in slots.iter().enumerate() {
            let Some(st) = fleet.proc(s).read_status() else {
                continue;
            };
            if s == newcomer {
                seen[i] = true;
                if back[i].is_none() && st.has("worker") && st.get("ids") > 0 {
                    back[i] = Some(Instant::now());
                }
                continue;
            }
            let b = &before[i];
            seen[i] |= st.get("lease_losses") > b.get("lease_losses")
                || st.get("uncertain_retries") > b.get("uncertain_retries");
            if back[i].is_none()
                && st.get("grants_acquired") > b.get("grants_acquired")
                && st.get("ids") > b.get("ids")
            {
                back[i] = Some(Instant::now());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seen_n = seen.iter().filter(|&&x| x).count() as u64;
    let back_n = back.iter().filter(|x| x.is_some()).count() as u64;
    loss.expected += n as u64;
    loss.seen += seen_n;
    loss.recovered += back_n;
    if back_n == n as u64 {
        let last = back.iter().flatten().max().copied().unwrap_or(restarted);
        loss.unavailable.push(last - restarted);
    }
    if seen_n < n as u64 || back_n < n as u64 {
        log.failures.push(format!(
            "{what} {}: {seen_n}/{n} workers saw the loss or uncertainty, {back_n}/{n} issued again",
            loss.restarts
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_min_median_max() {
        let mut l = LossLog::default();
        assert_eq!(l.spread(), None);
        l.unavailable = [1300, 1100, 1700].map(Duration::from_millis).to_vec();
        assert_eq!(l.spread(), Some((1.1, 1.3, 1.7)));
        l.unavailable.push(Duration::from_millis(1500));
        assert_eq!(l.spread(), Some((1.1, 1.4, 1.7)));
    }
}
