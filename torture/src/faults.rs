//! The faults the harness injects while the workers run, each verified:
//! a fault that did not take effect is reported, not counted.

use std::time::{Duration, Instant};

use crate::fleet::{Fleet, Launch};
use crate::pgserver::{PgServer, StopMode};

/// Fault kinds the harness schedules (clock steps run inside workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of a random worker, restarted with a fresh incarnation.
    Kill,
    /// SIGSTOP past the grant, takeover of its worker, SIGCONT.
    Stop,
    /// PostgreSQL stopped, then started again.
    Postgres,
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
    let slots: Vec<usize> = (0..fleet.live.len())
        .filter(|&s| !fleet.proc(s).stopped && fleet.proc(s).launch.fake_grant.is_none())
        .collect();
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
