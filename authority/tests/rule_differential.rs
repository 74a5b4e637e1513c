//! Every engine against the rule: random sequences of requests (a first
//! grant, a renewal by the holder or by another incarnation, a renewal
//! from beyond the worker's high-water (a store that forgot a grant), one
//! at, just past and far beyond the latest end of any grant the store
//! could have made (`grantid::evidence_bound`: not evidence past it), a
//! release, a retry of the same request, the operator's fence, another
//! layout, a worker outside it; half the sequences start fenced, so a
//! namespace's first requests get no grant and register it all the same)
//! with time advancing past grants, leases
//! and quarantines, each sent to an engine and to `grantid::rule::decide`
//! over a store of its own (`Model`) with the same clock and options. Every
//! answer must be the same: the worker, the interval and the fencing token
//! of a grant, or the kind of a refusal, and for one made by a quarantine
//! its end. A sequence that differs is printed with its seed;
//! `GRANTID_RULE_SEED=N` replays one, `GRANTID_RULE_CASES=N` runs N
//! sequences per engine (default 6), `GRANTID_RULE_STEPS=N` makes them N
//! requests long (default 150).
//!
//! The engines: file, static with a state file (one worker, no holder
//! kept: the rule with `Policy::only_worker`, its grants' holders
//! dropped), PostgreSQL (GRANTID_TEST_POSTGRES_URL), Redis
//! (GRANTID_TEST_REDIS_URL), MySQL / MariaDB (GRANTID_TEST_MYSQL_URL) and
//! etcd (GRANTID_TEST_ETCD_URL), on stores of this test alone
//! (`common::stores`): a quarantine holds a whole store.
//!
//! What is not compared:
//! * the engines' own clocks. Authority time is injected into every engine
//!   (`with_injected_clock`, passed as `p_now_ms` to the SQL and as the
//!   script's `now_ms`; the file's clock), so the same time reaches every
//!   engine and the rule; reading the server's clock instead
//!   (`clock_timestamp()`, `UTC_TIMESTAMP(6)`, Redis `TIME`) is not.
//! * a retry after its grant's lease has ended, or of a request older than
//!   the incarnation's latest: the file keeps an answer while its lease
//!   lives, Redis the latest answer of each incarnation, SQL until pruned.
//!   A retry here repeats the request just made, while its lease lives.
//! * the stores' identity checks (a Redis `run_id`, a PostgreSQL system
//!   identifier or timeline, a MySQL server id), which no sequence changes:
//!   tests/state_loss.rs and tests/state_loss_servers.rs cover them.
//! * several callers with different options on one namespace (its longest
//!   lead and skew): one sequence has one set; tests/recorded.rs covers it.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use grantid::rule::{self, Decision, Policy, Quarantine, Registered, View, Workers};
use grantid::{Clock, Grant, GrantError, GrantRequest, Layout, ManualClock};
use grantid_authority::{
    Authority, FileAuthority, MysqlAuthority, Options, PgAuthority, RedisAuthority, StaticAuthority,
};

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

/// A store as `decide` sees it, for one namespace: what it reads, and
/// what its decisions write.
struct Model {
    registered: Option<Registered>,
    workers: Workers,
    answers: HashMap<(u64, u64), Grant>,
    quarantine: Option<Quarantine>,
    policy: Policy,
    /// A static worker with a state file: one worker, and no holder kept
    /// (the operator promises one process at a time).
    holderless: bool,
}

impl Model {
    fn new(options: &Options, tick_ms: u64) -> Model {
        Model {
            registered: None,
            workers: Workers::default(),
            answers: HashMap::new(),
            quarantine: None,
            policy: Policy {
                lease_grace: options.lease_grace_ms.div_ceil(tick_ms),
                max_lead_ms: Some(options.max_lead_ms),
                clock_skew_ms: options.clock_skew_ms,
                only_worker: None,
            },
            holderless: false,
        }
    }

    /// The model of `static:N?state=PATH`.
    fn static_worker(mut self, worker: u32) -> Model {
        self.policy.only_worker = Some(worker);
        self.holderless = true;
        self
    }

    /// A quarantine until `until_ms` (or later, if one runs), from `now_ms`.
    fn quarantine(&mut self, now_ms: u64, until_ms: u64, reason: String) {
        let old = self.quarantine.take().unwrap_or_default();
        self.quarantine = Some(Quarantine {
            until_ms: old.until_ms.max(until_ms),
            since_ms: old.since_ms.max(now_ms),
            reason,
        });
    }

    fn acquire(&mut self, request: &GrantRequest, now_ms: u64) -> Result<Grant, GrantError> {
        let key = (request.incarnation, request.request_id);
        let view = View {
            registered: self.registered.as_ref(),
            workers: &self.workers,
            answer: self.answers.get(&key),
            quarantine: self.quarantine.as_ref(),
        };
        let now = request.layout.tick_at(now_ms);
        let decision = rule::decide(&view, request, &self.policy, now_ms, now);
        match &decision {
            Decision::Grant {
                grant,
                record,
                namespace,
                ..
            } => {
                let mut record = record.clone();
                if self.holderless {
                    record.holder = None;
                    record.lease_expiry = 0;
                }
                *self.workers.record(grant.worker) = record;
                self.registered = Some(*namespace);
                self.answers.insert(key, grant.clone());
            }
            Decision::Answer {
                quarantine,
                namespace,
                ..
            } => {
                if let Some(namespace) = namespace {
                    self.registered = Some(*namespace);
                }
                if let Some((until, why)) = quarantine {
                    self.quarantine(now_ms, *until, why.clone());
                }
            }
            _ => {}
        }
        decision.answer()
    }

    fn release(&mut self, last: &Grant, now: u64) {
        if let Some(rec) = self.workers.get_mut(last.worker)
            && let Some(released) = rule::release(rec, last.incarnation, now)
        {
            *rec = released;
        }
    }

    /// The operator's fence at `now_ms`.
    fn fence(&mut self, now_ms: u64) {
        let p = self.policy;
        let until = now_ms + p.max_lead_ms.unwrap_or_default() + p.clock_skew_ms;
        self.quarantine(now_ms, until, "fenced by the operator".into());
    }
}

/// What is compared: a grant's worker, interval and fencing token, or the
/// kind of the answer, with the end of the quarantine that made it or the
/// forgotten grant that started one.
fn outcome(r: &Result<Grant, GrantError>) -> String {
    let (kind, message) = match r {
        Ok(g) => {
            return format!(
                "grant worker {} [{}, {}) #{}",
                g.worker, g.start, g.end, g.grant_id
            );
        }
        Err(GrantError::Lost(m)) => ("Lost", m),
        Err(GrantError::Unavailable(m)) => ("Unavailable", m),
        Err(GrantError::Refused(m)) => ("Refused", m),
        Err(e) => return format!("{e:?}"),
    };
    if let Some(after) = message.split("no grant before Unix ms ").nth(1) {
        let until: String = after.chars().take_while(char::is_ascii_digit).collect();
        format!("{kind}: quarantine until Unix ms {until}")
    } else if message.contains(grantid::NOT_EVIDENCE) {
        format!("{kind}: not evidence")
    } else if message.contains("forgot a grant") {
        format!("{kind}: a forgotten grant")
    } else {
        kind.into()
    }
}

/// The engine `name` on the store at `url`, with `options`, its
/// authority time `clock`.
fn engine(name: &str, url: &str, options: Options, clock: Arc<dyn Clock>) -> Box<dyn Authority> {
    match name {
        "file" => {
            let path = url.strip_prefix("file:").expect("a file: URL");
            Box::new(FileAuthority::new(path, options).with_clock(clock))
        }
        "static" => {
            let (worker, path) = static_url(url);
            Box::new(StaticAuthority::new(worker, Some(path.into()), options).with_clock(clock))
        }
        "postgres" => Box::new(
            PgAuthority::new(url, options)
                .unwrap()
                .with_injected_clock(clock),
        ),
        "redis" => Box::new(
            RedisAuthority::new(url, options)
                .unwrap()
                .with_injected_clock(clock),
        ),
        "mysql" => Box::new(
            MysqlAuthority::new(&url.replace("mariadb://", "mysql://"), options)
                .unwrap()
                .with_injected_clock(clock),
        ),
        #[cfg(feature = "etcd")]
        "etcd" => Box::new(
            grantid_authority::EtcdAuthority::from_url(url, options)
                .unwrap()
                .with_injected_clock(clock),
        ),
        #[cfg(feature = "dynamodb")]
        "dynamodb" => Box::new(
            grantid_authority::DynamoAuthority::from_url(url, options)
                .unwrap()
                .with_injected_clock(clock),
        ),
        _ => unreachable!("no engine {name}"),
    }
}

/// The worker and state file of a `static:N?state=PATH` URL.
fn static_url(url: &str) -> (u32, &str) {
    let (worker, path) = url
        .strip_prefix("static:")
        .and_then(|u| u.split_once("?state="))
        .expect("a static:N?state=PATH URL");
    (worker.parse().expect("a static worker"), path)
}

struct Holder {
    incarnation: u64,
    next_request: u64,
    last: Option<Grant>,
}

/// A holder of a new incarnation; its index.
fn new_holder(holders: &mut Vec<Holder>, rng: &mut Rng) -> usize {
    holders.push(Holder {
        incarnation: rng.next(),
        next_request: 0,
        last: None,
    });
    holders.len() - 1
}

/// One sequence of `steps` requests from `seed` on engine `name` (store
/// `url`), from the time of `clock` on.
fn run(
    name: &str,
    url: &str,
    clock: &Arc<ManualClock>,
    seed: u64,
    steps: usize,
    seen: &mut BTreeMap<String, usize>,
) {
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
        clock_skew_ms: [0, 50, 1_000][rng.below(3) as usize],
        ..Options::default()
    };
    let grace = options.lease_grace_ms.div_ceil(tick_ms);
    let authority = engine(name, url, options.clone(), clock.clone());
    let mut model = Model::new(&options, tick_ms);
    if name == "static" {
        model = model.static_worker(static_url(url).0);
    }

    let ns = common::namespace("rule-diff");
    let mut holders: Vec<Holder> = Vec::new();
    // The request just made, and its grant.
    let mut previous: Option<(GrantRequest, Option<Grant>)> = None;
    let mut history: Vec<String> = Vec::new();
    // Half the sequences start fenced: the namespace's first requests are
    // answered without a grant, and register it all the same.
    if rng.below(2) == 0 {
        authority.fence().unwrap();
        model.fence(clock.now_ms());
        history.push("start: fence".into());
    }
    for step in 0..steps {
        // Time: often still, sometimes past grants and leases, sometimes to
        // the edge of a lease (its last tick, its expiry, the tick after).
        let before = clock.now_ms();
        // The worker and holder of the lease whose edge the clock is at.
        let mut at_edge = None;
        match rng.below(12) {
            0..=3 => {}
            4..=6 => clock.advance(rng.below(50)),
            7 | 8 => clock.advance(100 + rng.below(1_500)),
            9 | 10 => clock.advance(2_000 + rng.below(8_000)),
            _ => {
                let grants: Vec<&Grant> = holders.iter().filter_map(|h| h.last.as_ref()).collect();
                if !grants.is_empty() {
                    let g = grants[rng.below(grants.len() as u64) as usize];
                    let edge = g.end + grace + rng.below(3);
                    let edge_ms = layout.unix_ms_of(edge.saturating_sub(1));
                    clock.set(edge_ms.max(before));
                    at_edge = Some((g.worker, g.incarnation));
                }
            }
        }
        let now_ms = clock.now_ms();
        let advance = now_ms - before;
        let now = layout.tick_at(now_ms);
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
        // A retry while the answer is kept: a refusal, or a grant whose
        // lease lives.
        let retry = previous
            .as_ref()
            .filter(|(_, g)| g.as_ref().is_none_or(|g| now < g.end + grace));
        let op = rng.below(100);
        let (what, request) = if let Some((w, holder)) = at_edge.filter(|_| rng.below(2) == 0) {
            // At the edge of a lease, another incarnation asks for its
            // worker, or for any.
            let others: Vec<usize> = (0..holders.len())
                .filter(|i| holders[*i].incarnation != holder)
                .collect();
            let i = match others.len() as u64 {
                n if n > 0 && rng.below(4) > 0 => others[rng.below(n) as usize],
                _ => new_holder(&mut holders, &mut rng),
            };
            let worker = (rng.below(2) == 0).then_some(w);
            ("take-over", new_request(&mut holders, i, worker, 0, layout))
        } else if op < 30 || holders.is_empty() {
            // A first grant, by a new incarnation or one that lost its worker.
            let i = if op.is_multiple_of(3) || holders.is_empty() {
                new_holder(&mut holders, &mut rng)
            } else {
                rng.below(holders.len() as u64) as usize
            };
            ("acquire", new_request(&mut holders, i, None, 0, layout))
        } else if op < 61 && !held.is_empty() {
            // A renewal by the holder, from the end of its grant; or from
            // beyond it (its grants end later than the store recorded: the
            // store forgot one).
            let i = held[rng.below(held.len() as u64) as usize];
            let last = holders[i].last.clone().unwrap();
            // The latest end of a grant the store could have made: at it a
            // claim is evidence, past it (up to the layout's last tick) not.
            let bound = grantid::evidence_bound(
                now,
                Some(options.max_lead_ms),
                options.clock_skew_ms,
                tick_ms,
            )
            .unwrap();
            let (what, not_before) = match op {
                58.. => ("renew-ahead", last.end + 1 + rng.below(50)),
                56 | 57 => match rng.below(3) {
                    0 => ("renew-at-bound", bound),
                    1 => ("renew-past-bound", bound + 1),
                    _ => ("renew-far", layout.timestamp_limit() - 1),
                },
                _ if rng.below(8) == 0 => ("renew", 0),
                _ => ("renew", last.end),
            };
            let r = new_request(&mut holders, i, Some(last.worker), not_before, layout);
            (what, r)
        } else if op < 68 {
            // A renewal of any worker by any incarnation; half the time of
            // a worker held (taken over at the edge of its lease, or not).
            let i = rng.below(holders.len() as u64) as usize;
            let w = match held.len() as u64 {
                n if n > 0 && rng.below(2) == 0 => {
                    holders[held[rng.below(n) as usize]]
                        .last
                        .as_ref()
                        .unwrap()
                        .worker
                }
                _ => rng.below(4) as u32,
            };
            (
                "renew-any",
                new_request(&mut holders, i, Some(w), 0, layout),
            )
        } else if op < 80 && !held.is_empty() {
            let i = held[rng.below(held.len() as u64) as usize];
            let last = holders[i].last.take().unwrap();
            authority.release(&last);
            model.release(&last, now);
            history.push(format!(
                "{step}: +{advance} ms (tick {now}) release worker {} by {:#x}",
                last.worker, last.incarnation
            ));
            previous = None;
            continue;
        } else if let Some((r, _)) = retry.filter(|_| op < 91) {
            ("retry", r.clone())
        } else if op < 95 {
            let i = rng.below(holders.len() as u64) as usize;
            let w = 4 + rng.below(4) as u32;
            ("outside", new_request(&mut holders, i, Some(w), 0, layout))
        } else if op < 99 {
            let i = rng.below(holders.len() as u64) as usize;
            (
                "other-layout",
                new_request(&mut holders, i, None, 0, other_layout),
            )
        } else {
            authority.fence().unwrap();
            model.fence(now_ms);
            history.push(format!("{step}: +{advance} ms (tick {now}) fence"));
            continue;
        };
        let by_engine = authority.acquire(&request);
        let by_rule = model.acquire(&request, now_ms);
        history.push(format!(
            "{step}: +{advance} ms (tick {now}) {what} {:#x}/{} worker {:?} not_before {} \
             duration {}: {}",
            request.incarnation,
            request.request_id,
            request.worker,
            request.not_before,
            request.duration,
            outcome(&by_engine)
        ));
        assert_eq!(
            outcome(&by_engine),
            outcome(&by_rule),
            "{name} and the rule differ at step {step} (seed {seed}; GRANTID_RULE_SEED={seed} \
             replays it), tick {tick_ms} ms, {options:?}\n  request: {request:?}\n  {name}: \
             {by_engine:?}\n  rule: {by_rule:?}\nthe sequence:\n{}",
            history.join("\n")
        );
        *seen.entry(kind(&by_engine, what)).or_default() += 1;
        if let Ok(g) = &by_engine {
            let i = holders
                .iter()
                .position(|h| h.incarnation == g.incarnation)
                .unwrap();
            holders[i].last = Some(g.clone());
        } else if matches!(by_engine, Err(GrantError::Lost(_))) && request.worker.is_some() {
            let i = holders
                .iter()
                .position(|h| h.incarnation == request.incarnation)
                .unwrap();
            if holders[i].last.as_ref().map(|g| g.worker) == request.worker {
                holders[i].last = None;
            }
        }
        previous = Some((request, by_engine.ok()));
    }
    // The records the decisions left: the same too.
    let records = |mut v: Vec<(u32, Option<u64>, u64, u64, u64)>| {
        v.retain(|r| r.4 > 0);
        v
    };
    let by_engine = records(
        authority
            .status(Some(&ns))
            .unwrap()
            .into_iter()
            .map(|w| (w.worker, w.holder, w.lease_expiry, w.high_water, w.fencing))
            .collect(),
    );
    let by_rule = records(
        model
            .workers
            .iter()
            .map(|(w, r)| (w, r.holder, r.lease_expiry, r.high_water, r.fencing))
            .collect(),
    );
    assert_eq!(
        by_engine,
        by_rule,
        "{name} and the rule keep other worker records (worker, holder, lease expiry, \
         high-water, fencing) after seed {seed}; the sequence:\n{}",
        history.join("\n")
    );
}

/// An answer's kind, for the tally of what the sequences reached.
fn kind(r: &Result<Grant, GrantError>, what: &str) -> String {
    let o = outcome(r);
    let o = match o.split_once(" until") {
        Some((head, _)) => head.to_owned(),
        None if o.starts_with("grant") => "grant".into(),
        None => o,
    };
    format!("{what}: {o}")
}

/// A number from the environment variable `var`, else `default`.
fn setting(var: &str, default: u64) -> u64 {
    std::env::var(var).map_or(default, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("{var}: a number, not {s:?}"))
    })
}

/// Runs the sequences on a store of engine `name` of its own, one after
/// the other, each a day after the one before (past any quarantine it
/// started).
fn compare(name: &'static str, redis_db: u8) {
    let Some(store) = common::stores::store(name, "rule_diff", redis_db) else {
        return;
    };
    let seeds: Vec<u64> = match std::env::var("GRANTID_RULE_SEED") {
        Ok(s) => vec![s.parse().expect("GRANTID_RULE_SEED: a number")],
        Err(_) => (0..setting("GRANTID_RULE_CASES", 6))
            .map(|_| getrandom::u64().unwrap())
            .collect(),
    };
    let steps = setting("GRANTID_RULE_STEPS", 150) as usize;
    // An hour ahead of the host: past the store's declaration.
    let host_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let clock = ManualClock::new(host_ms + 3_600_000);
    let t0 = Instant::now();
    let mut seen = BTreeMap::new();
    for seed in &seeds {
        run(name, &store.url, &clock, *seed, steps, &mut seen);
        clock.advance(86_400_000);
    }
    eprintln!(
        "{name}: {} sequences of {steps} requests decided as the rule in {:.1} s: {seen:?}",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// One test per engine (`<engine>::decides_as_the_rule`) and
/// [`COMPARED`], the engines they run on.
macro_rules! compared {
    ($($(#[$attr:meta])* $engine:ident $redis_db:literal),*) => {
        /// The engines compared with the rule, in every build.
        const COMPARED: &[&str] = &[$(stringify!($engine)),*];
        $(
            $(#[$attr])*
            mod $engine {
                #[test]
                fn decides_as_the_rule() {
                    super::compare(stringify!($engine).trim_start_matches("r#"), $redis_db);
                }
            }
        )*
    };
}

// `static` is a keyword: its module is `r#static`, its name "static".
compared!(
    file 0,
    r#static 0,
    postgres 0,
    redis 15,
    mysql 0,
    #[cfg(feature = "etcd")] etcd 0,
    #[cfg(feature = "dynamodb")] dynamodb 0
);

#[test]
fn every_engine_of_the_table_is_compared() {
    let names: Vec<&str> = COMPARED
        .iter()
        .map(|n| n.trim_start_matches("r#"))
        .collect();
    common::stores::assert_covers("rule_differential.rs", &names, &[]);
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
