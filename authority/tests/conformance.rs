//! The conformance suite: the allocation rule's acquire / renew / release /
//! expiry / ordering / refusal cases, run identically on every authority
//! that chooses workers (the in-memory `grantid::MemoryAuthority`, file,
//! PostgreSQL, Redis, MySQL / MariaDB, and etcd with the `etcd` feature), so
//! they cannot drift apart. The engines come from GRANTID_TEST_POSTGRES_URL,
//! GRANTID_TEST_REDIS_URL, GRANTID_TEST_MYSQL_URL and GRANTID_TEST_ETCD_URL
//! (see scripts/with-services.sh). The static authority, which never chooses,
//! passes the cases that apply to it in tests/static_worker.rs.

mod common;

use std::sync::Arc;

use common::{Kind, namespace, request, small_layout, source};
use grantid::{GrantError, Layout, ManualClock};

/// Unix ms of tick `t` of the small layout.
fn ms(t: u64) -> u64 {
    small_layout().unix_ms_of(t)
}

fn idempotent_retry(kind: Kind) {
    let clock = ManualClock::new(ms(1_000));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("retry");
    let l = small_layout();
    let g1 = s.acquire(&request(&ns, 11, 1, None, 0, 100, l)).unwrap();
    assert_eq!(
        (g1.start, g1.end),
        (1_000, 1_100),
        "authority time, not request.now"
    );
    assert_eq!(g1.grant_id, 1);
    clock.advance(500);
    let again = s.acquire(&request(&ns, 11, 1, None, 0, 100, l)).unwrap();
    assert_eq!(again, g1, "a retry returns the recorded grant");
    let g2 = s
        .acquire(&request(&ns, 11, 2, Some(g1.worker), g1.end, 100, l))
        .unwrap();
    assert_eq!((g2.start, g2.end, g2.grant_id), (1_500, 1_600, 2));
}

fn stolen_worker_is_lost(kind: Kind) {
    let clock = ManualClock::new(ms(1_000));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("steal");
    let l = small_layout();
    let a = s.acquire(&request(&ns, 1, 1, None, 0, 100, l)).unwrap();
    // Another incarnation asks for the same worker while A's lease lives.
    let refused = s.acquire(&request(&ns, 2, 1, Some(a.worker), 0, 100, l));
    assert!(
        matches!(refused, Err(GrantError::Lost(ref m)) if m.contains("held by")),
        "{refused:?}"
    );
    // A's lease expires (end 1100 + grace 50); B takes the worker.
    clock.set(ms(1_200));
    let b = s
        .acquire(&request(&ns, 2, 2, Some(a.worker), 0, 100, l))
        .unwrap();
    assert_eq!(b.worker, a.worker);
    assert!(b.start >= a.end);
    // A's renewal is now lost.
    let renewal = s.acquire(&request(&ns, 1, 2, Some(a.worker), a.end, 100, l));
    assert!(matches!(renewal, Err(GrantError::Lost(_))), "{renewal:?}");
}

fn expired_lease_is_recycled(kind: Kind) {
    let clock = ManualClock::new(ms(1_000));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("recycle");
    let l = small_layout();
    // Fill the 4 workers; worker 0's holder pushes its high-water far ahead.
    let mut first = Vec::new();
    for inc in 1..=4u64 {
        first.push(s.acquire(&request(&ns, inc, 1, None, 0, 10, l)).unwrap());
    }
    let workers: Vec<u32> = first.iter().map(|g| g.worker).collect();
    assert_eq!(workers, [0, 1, 2, 3], "never-used workers first");
    let far = s
        .acquire(&request(&ns, 1, 2, Some(0), first[0].end, 4_000, l))
        .unwrap();
    assert_eq!(far.end, 5_010);
    let full = s.acquire(&request(&ns, 9, 1, None, 0, 10, l));
    assert!(
        matches!(full, Err(GrantError::Lost(ref m)) if m.contains("no free worker")),
        "{full:?}"
    );
    // Workers 1..3 expire at 1060; worker 0 at 5060. The longest-expired
    // goes first; every new first grant starts at or after the old high-water.
    clock.set(ms(1_100));
    let r = s.acquire(&request(&ns, 9, 1, None, 0, 10, l)).unwrap();
    assert_eq!(r.worker, 1);
    assert!(r.start >= first[1].end);
    clock.set(ms(6_000));
    let mut seen = Vec::new();
    for inc in 20..23u64 {
        let g = s.acquire(&request(&ns, inc, 1, None, 0, 10, l)).unwrap();
        seen.push(g.worker);
    }
    seen.sort();
    assert_eq!(
        seen,
        [1, 2, 3],
        "longest-expired first (worker 0 expired last)"
    );
    // Worker 0 last, by a new holder, after its far high-water.
    let g0 = s.acquire(&request(&ns, 23, 1, None, 0, 10, l)).unwrap();
    assert_eq!(g0.worker, 0);
    assert_eq!(g0.start, 6_000);
    assert!(g0.start >= far.end);
    let g0 = s.acquire(&request(&ns, 30, 1, Some(0), 0, 10, l));
    assert!(
        matches!(g0, Err(GrantError::Lost(_))),
        "worker 0 was just taken: {g0:?}"
    );
}

fn high_water_never_moves_back(kind: Kind) {
    let clock = ManualClock::new(ms(10_000));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("clockback");
    let l = small_layout();
    let g1 = s.acquire(&request(&ns, 1, 1, None, 0, 100, l)).unwrap();
    // The authority's clock steps back an hour.
    clock.set(ms(10_000) - 3_600_000);
    let g2 = s
        .acquire(&request(&ns, 1, 2, Some(g1.worker), 0, 100, l))
        .unwrap();
    assert_eq!(g2.start, g1.end, "continues from the high-water");
    // A new incarnation taking the worker after expiry starts after it too.
    clock.set(ms(10_300));
    let g3 = s
        .acquire(&request(&ns, 2, 1, Some(g1.worker), 0, 100, l))
        .unwrap();
    assert!(g3.start >= g2.end);
    clock.set(ms(0));
    let g4 = s
        .acquire(&request(&ns, 2, 2, Some(g1.worker), 0, 100, l))
        .unwrap();
    assert_eq!(g4.start, g3.end);
}

fn other_layout_is_refused(kind: Kind) {
    let clock = ManualClock::new(ms(1_000));
    let Some(s) = source(kind, clock, 50) else {
        return;
    };
    let ns = namespace("layout");
    s.acquire(&request(&ns, 1, 1, None, 0, 10, small_layout()))
        .unwrap();
    let other = Layout::new(40, 3, 8).unwrap();
    let r = s.acquire(&request(&ns, 2, 1, None, 0, 10, other));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")),
        "{r:?}"
    );
    let epoch = small_layout().with_epoch_ms(0).unwrap();
    let r = s.acquire(&request(&ns, 3, 1, None, 0, 10, epoch));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")),
        "{r:?}"
    );
    // A worker outside the layout can never be granted: refused too.
    let r = s.acquire(&request(&ns, 4, 1, Some(4), 0, 10, small_layout()));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("outside")),
        "{r:?}"
    );
}

fn usable_now_goes_first_and_a_far_first_grant_waits(kind: Kind) {
    let clock = ManualClock::new(ms(1_000));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("order");
    let l = small_layout();
    let mut first = Vec::new();
    for inc in 1..=4u64 {
        first.push(s.acquire(&request(&ns, inc, 1, None, 0, 10, l)).unwrap());
    }
    // Worker 0 renews far ahead, then is released first; worker 1 is
    // released later but is usable now.
    let far = s
        .acquire(&request(&ns, 1, 2, Some(0), first[0].end, 2_000, l))
        .unwrap();
    assert_eq!(far.end, 3_010);
    clock.set(ms(1_020));
    s.release(&far);
    clock.set(ms(1_030));
    s.release(&first[1]);
    clock.set(ms(1_040));
    let g = s.acquire(&request(&ns, 9, 1, None, 0, 10, l)).unwrap();
    assert_eq!(
        (g.worker, g.start),
        (1, 1_040),
        "a worker usable now before one released earlier with a future high-water"
    );
    // Only worker 0 is free, its high-water ~2 s ahead: no first grant
    // that far in the future (the generator would fail with NotYetValid).
    let r = s.acquire(&request(&ns, 10, 1, None, 0, 10, l));
    assert!(
        matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("ahead")),
        "{r:?}"
    );
    // Within 100 ms of it, the grant is made, after the high-water.
    clock.set(ms(2_950));
    for (inc, w) in [(9, 1), (3, 2), (4, 3)] {
        s.acquire(&request(&ns, inc, 5, Some(w), 0, 200, l))
            .unwrap();
    }
    let g = s.acquire(&request(&ns, 10, 2, None, 0, 10, l)).unwrap();
    assert_eq!((g.worker, g.start), (0, 3_010));
}

fn end_is_capped_and_release_frees(kind: Kind) {
    let l = Layout::new(12, 2, 8).unwrap();
    let clock = ManualClock::new(l.unix_ms_of(4_090));
    let Some(s) = source(kind, clock.clone(), 50) else {
        return;
    };
    let ns = namespace("cap");
    let g = s.acquire(&request(&ns, 1, 1, None, 0, 100, l)).unwrap();
    assert_eq!(
        (g.start, g.end),
        (4_090, 4_096),
        "capped at 2^timestamp_bits"
    );
    let r = s.acquire(&request(&ns, 1, 2, Some(g.worker), g.end, 100, l));
    assert!(
        matches!(r, Err(GrantError::Lost(ref m)) if m.contains("no timestamp space")),
        "{r:?}"
    );
    // Released: another incarnation may take the worker before expiry.
    let ns2 = namespace("release");
    clock.set(l.unix_ms_of(100));
    let a = s.acquire(&request(&ns2, 1, 1, None, 0, 100, l)).unwrap();
    s.release(&a);
    let b = s
        .acquire(&request(&ns2, 2, 1, Some(a.worker), 0, 100, l))
        .unwrap();
    assert!(b.start >= a.end);
}

/// One module of the suite's tests per engine, and [`RUN_ON`], the
/// engines they run on.
macro_rules! rule_tests {
    ([$($(#[$attr:meta])* $engine:ident => $kind:ident),*], $tests:tt) => {
        /// The engines the suite runs on, in every build.
        const RUN_ON: &[&str] = &[$(stringify!($engine)),*];
        $( engine_tests!($(#[$attr])* $engine, $kind, $tests); )*
    };
}

macro_rules! engine_tests {
    ($(#[$attr:meta])* $engine:ident, $kind:ident, [$($name:ident),*]) => {
        $(#[$attr])*
        mod $engine { $( #[test] fn $name() { super::$name(super::Kind::$kind) } )* }
    };
}

rule_tests!(
    [
        memory => Memory,
        file => File,
        postgres => Postgres,
        redis => Redis,
        mysql => Mysql,
        #[cfg(feature = "etcd")]
        etcd => Etcd,
        #[cfg(feature = "dynamodb")]
        dynamodb => Dynamodb
    ],
    [
        idempotent_retry,
        stolen_worker_is_lost,
        expired_lease_is_recycled,
        high_water_never_moves_back,
        other_layout_is_refused,
        end_is_capped_and_release_frees,
        usable_now_goes_first_and_a_far_first_grant_waits
    ]
);

#[test]
fn every_engine_of_the_table_runs_the_suite() {
    common::stores::assert_covers(
        "conformance.rs",
        RUN_ON,
        &[(
            "static",
            "one worker, no choice: rule_differential.rs compares it with the rule, \
             static_worker.rs tests its state file",
        )],
    );
}

#[test]
fn injected_clock_is_shared() {
    // The helper's clock is the one the sources read (guards the tests
    // above against silently using the wall clock).
    let clock = ManualClock::new(ms(42));
    let s = source(Kind::File, clock as Arc<dyn grantid::Clock>, 0).unwrap();
    let g = s
        .acquire(&request(
            &namespace("clock"),
            1,
            1,
            None,
            0,
            1,
            small_layout(),
        ))
        .unwrap();
    assert_eq!(g.start, 42);
}
