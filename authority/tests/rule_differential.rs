//! The etcd engine against the rule: random sequences of requests (a
//! first grant, a renewal by the holder or by another incarnation, a
//! release, a retry of the same request, another layout, a worker outside
//! it) with time advancing past grants and leases, each sent to the etcd
//! authority (GRANTID_TEST_ETCD_URL, scripts/with-services.sh) and to
//! `grantid::Allocator` with the same clock and options. Every answer must
//! be the same: the worker, the interval and the fencing number of a grant,
//! or the kind of a refusal. A sequence that differs is printed with its
//! seed; `GRANTID_RULE_SEED=N` replays one.
#![cfg(feature = "etcd")]

mod common;

use grantid::{
    Allocator, Clock, Grant, GrantError, GrantRequest, GrantSource, Layout, ManualClock,
};
use grantid_authority::{EtcdAuthority, Options};

/// xorshift64*: the sequences replay from their seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What is compared: a grant's worker, interval and fencing number, or the
/// kind of the answer.
fn outcome(r: &Result<Grant, GrantError>) -> String {
    match r {
        Ok(g) => format!(
            "grant worker {} [{}, {}) #{}",
            g.worker, g.start, g.end, g.grant_id
        ),
        Err(GrantError::Lost(_)) => "Lost".into(),
        Err(GrantError::Unavailable(_)) => "Unavailable".into(),
        Err(GrantError::Refused(_)) => "Refused".into(),
        Err(e) => format!("{e:?}"),
    }
}

struct Holder {
    incarnation: u64,
    next_request: u64,
    last: Option<Grant>,
}

/// One sequence of `steps` requests from `seed`.
fn run(url: &str, seed: u64, steps: usize) {
    let mut rng = Rng(seed | 1);
    let tick_ms = [1, 7, 10][rng.below(3) as usize];
    let layout = Layout::new(40, 2, 8)
        .unwrap()
        .with_tick_ms(tick_ms)
        .unwrap();
    let other_layout = Layout::new(40, 2, 9)
        .unwrap()
        .with_tick_ms(tick_ms)
        .unwrap();
    let options = Options {
        lease_grace_ms: [0, 40, 500][rng.below(3) as usize],
        max_lead_ms: [300, 7_000][rng.below(2) as usize],
        ..Options::default()
    };
    // An hour ahead of the host: past any quarantine another test left.
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    let clock = ManualClock::new(start_ms);
    let etcd = EtcdAuthority::from_url(url, options.clone())
        .unwrap()
        .with_injected_clock(clock.clone());
    let mut core = Allocator::new(options.lease_grace_ms.div_ceil(tick_ms));
    core.max_lead_ms = Some(options.max_lead_ms);

    let ns = common::namespace("rule-diff");
    let mut holders: Vec<Holder> = Vec::new();
    let mut previous: Option<GrantRequest> = None;
    let mut history: Vec<String> = Vec::new();
    for step in 0..steps {
        // Time: often still, sometimes past grants and leases, sometimes to
        // the edge of a lease (its last tick, its expiry, the tick after).
        let before = clock.now_ms();
        match rng.below(12) {
            0..=3 => {}
            4..=6 => clock.advance(rng.below(50)),
            7 | 8 => clock.advance(100 + rng.below(1_500)),
            9 | 10 => clock.advance(2_000 + rng.below(8_000)),
            _ => {
                if let Some(g) = holders.iter().filter_map(|h| h.last.as_ref()).next() {
                    let edge = g.end + options.lease_grace_ms / tick_ms + rng.below(3);
                    let edge_ms = layout.unix_ms_of(edge.saturating_sub(1));
                    clock.set(edge_ms.max(before));
                }
            }
        }
        let advance = clock.now_ms() - before;
        let now = layout.tick_at(clock.now_ms());
        let duration = 1 + rng.below(1_000 / tick_ms + 1);
        let new_request = |holders: &mut Vec<Holder>, i: usize, worker, not_before, l| {
            let h = &mut holders[i];
            h.next_request += 1;
            GrantRequest {
                namespace: ns.clone(),
                incarnation: h.incarnation,
                request_id: h.next_request,
                worker,
                not_before,
                now,
                duration,
                layout: l,
            }
        };
        let held: Vec<usize> = (0..holders.len())
            .filter(|i| holders[*i].last.is_some())
            .collect();
        let op = rng.below(100);
        let (what, request) = if op < 30 || holders.is_empty() {
            // A first grant, by a new incarnation or one that lost its worker.
            let i = if op.is_multiple_of(3) || holders.is_empty() {
                holders.push(Holder {
                    incarnation: rng.next(),
                    next_request: 0,
                    last: None,
                });
                holders.len() - 1
            } else {
                rng.below(holders.len() as u64) as usize
            };
            ("acquire", new_request(&mut holders, i, None, 0, layout))
        } else if op < 60 && !held.is_empty() {
            // A renewal by the holder, from the end of its grant.
            let i = held[rng.below(held.len() as u64) as usize];
            let last = holders[i].last.clone().unwrap();
            let not_before = if rng.below(8) == 0 { 0 } else { last.end };
            let r = new_request(&mut holders, i, Some(last.worker), not_before, layout);
            ("renew", r)
        } else if op < 68 {
            // A renewal of any worker by any incarnation.
            let i = rng.below(holders.len() as u64) as usize;
            let w = rng.below(4) as u32;
            (
                "renew-any",
                new_request(&mut holders, i, Some(w), 0, layout),
            )
        } else if op < 80 && !held.is_empty() {
            let i = held[rng.below(held.len() as u64) as usize];
            let last = holders[i].last.take().unwrap();
            let now_ticks = layout.tick_at(clock.now_ms());
            etcd.release(&last);
            core.release(&last, now_ticks);
            history.push(format!(
                "{step}: +{advance} ms release worker {} by {:#x}",
                last.worker, last.incarnation
            ));
            previous = None;
            continue;
        } else if op < 92 && previous.is_some() {
            ("retry", previous.clone().unwrap())
        } else if op < 96 {
            let i = rng.below(holders.len() as u64) as usize;
            let w = 4 + rng.below(4) as u32;
            ("outside", new_request(&mut holders, i, Some(w), 0, layout))
        } else {
            let i = rng.below(holders.len() as u64) as usize;
            (
                "other-layout",
                new_request(&mut holders, i, None, 0, other_layout),
            )
        };
        let by_etcd = etcd.acquire(&request);
        let by_rule = core.allocate(&request, layout.tick_at(clock.now_ms()));
        history.push(format!(
            "{step}: +{advance} ms (tick {now}) {what} {:#x}/{} worker {:?} not_before {} \
             duration {}: {}",
            request.incarnation,
            request.request_id,
            request.worker,
            request.not_before,
            request.duration,
            outcome(&by_etcd)
        ));
        assert_eq!(
            outcome(&by_etcd),
            outcome(&by_rule),
            "seed {seed}, tick {tick_ms} ms, {options:?}: etcd {by_etcd:?} and the rule \
             {by_rule:?} differ at step {step}; the sequence:\n{}",
            history.join("\n")
        );
        if let Ok(g) = &by_etcd {
            let i = holders
                .iter()
                .position(|h| h.incarnation == g.incarnation)
                .unwrap();
            holders[i].last = Some(g.clone());
        } else if matches!(by_etcd, Err(GrantError::Lost(_))) && request.worker.is_some() {
            let i = holders
                .iter()
                .position(|h| h.incarnation == request.incarnation)
                .unwrap();
            if holders[i].last.as_ref().map(|g| g.worker) == request.worker {
                holders[i].last = None;
            }
        }
        previous = Some(request);
    }
}

#[test]
fn etcd_decides_as_the_rule() {
    let Some(url) = common::etcd_url() else {
        return;
    };
    let seeds: Vec<u64> = match std::env::var("GRANTID_RULE_SEED") {
        Ok(s) => vec![s.parse().expect("GRANTID_RULE_SEED: a number")],
        Err(_) => (0..8).map(|_| getrandom::u64().unwrap()).collect(),
    };
    let threads: Vec<_> = seeds
        .into_iter()
        .map(|seed| {
            let url = url.clone();
            std::thread::spawn(move || run(&url, seed, 150))
        })
        .collect();
    for t in threads {
        if let Err(e) = t.join() {
            std::panic::resume_unwind(e);
        }
    }
}

#[test]
fn the_sequences_replay_from_their_seed() {
    let draw = |seed: u64| {
        let mut r = Rng(seed | 1);
        (0..4).map(|_| r.below(1_000)).collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}
