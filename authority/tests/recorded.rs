//! What every process's safety depends on is recorded in the store, on
//! every engine (docs/AUTHORITIES.md, "State loss" and "Regions"):
//!
//! * the full layout with its datacenter split: a split layout and an
//!   unsplit one whose worker bits equal the split's per-datacenter bits
//!   never share a namespace's workers;
//! * the longest `max_lead_ms` (and `clock_skew_ms`) any process used: a
//!   fence by a process with the default lead still waits out the longest
//!   grant another process may hold;
//! * the holders' evidence: a renewal whose grants end beyond the store's
//!   high-water proves the store forgot a grant; it is `Lost`, and nothing
//!   is granted until those grants have ended.
//!
//! Each test runs on stores of its own (a state file, a PostgreSQL and a
//! MariaDB database, a Redis database index, a throwaway etcd), since a
//! fence or a quarantine holds a whole store.

mod common;

use common::stores::stores;
use grantid::{GrantError, GrantSource, Layout};
use grantid_authority::open;

/// `url` with the query option `option` added.
fn with(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// 1 ms ticks, 4 workers.
fn layout() -> Layout {
    Layout::new(41, 2, 8).unwrap()
}

/// Unix ms now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The end of the quarantine a waiting first grant reports ("no grant
/// before Unix ms N").
fn quarantined_until(name: &str, r: Result<grantid::Grant, GrantError>) -> u64 {
    let Err(GrantError::Unavailable(m)) = &r else {
        panic!("{name}: a first grant during a quarantine waits: {r:?}");
    };
    let after = m
        .split("no grant before Unix ms ")
        .nth(1)
        .unwrap_or_else(|| panic!("{name}: {m}"));
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

#[test]
fn a_split_layout_and_an_unsplit_one_never_share_a_namespace() {
    let split = Layout::new(40, 4, 8)
        .unwrap()
        .with_datacenter_bits(1)
        .unwrap();
    // The split's per-datacenter part: 3 worker bits, as this one.
    let unsplit = Layout::new(40, 3, 8).unwrap();
    for s in stores("split", 11) {
        let regional = open(&with(&s.url, "datacenter=1")).unwrap();
        let whole = open(&s.url).unwrap();
        for (i, (first, second)) in [(&regional, &whole), (&whole, &regional)]
            .into_iter()
            .enumerate()
        {
            let ns = common::namespace("split");
            let layouts = if i == 0 {
                [split, unsplit]
            } else {
                [unsplit, split]
            };
            first
                .acquire(&common::request(&ns, 1, 1, None, 0, 10, layouts[0]))
                .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            let r = second.acquire(&common::request(&ns, 2, 1, None, 0, 10, layouts[1]));
            assert!(
                matches!(r, Err(GrantError::Refused(ref m)) if m.contains("another layout")),
                "{}: the second layout on one namespace is refused: {r:?}",
                s.name
            );
        }
    }
}

#[test]
fn a_fence_waits_out_the_longest_lead_any_process_used() {
    let l = layout();
    for s in stores("lead", 12) {
        let ns = common::namespace("lead");
        let long = open(&with(&s.url, "max_lead_ms=30000")).unwrap();
        let g = long
            .acquire(&common::request(&ns, 1, 1, None, 0, 25_000, l))
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        let end_ms = l.unix_ms_of(g.end);
        assert!(
            end_ms > now_ms() + 20_000,
            "{}: a long grant: {g:?}",
            s.name
        );
        // The runbook's fence, from a process with the default lead.
        let short = open(&s.url).unwrap();
        short.fence().unwrap();
        let until = quarantined_until(
            s.name,
            short.acquire(&common::request(&ns, 2, 1, None, 0, 10, l)),
        );
        assert!(
            until >= end_ms + grantid_authority::DEFAULT_CLOCK_SKEW_MS,
            "{}: the quarantine ends at {until}, before the long grant (until {end_ms}) plus \
             the skew allowance",
            s.name
        );
    }
}

#[test]
fn a_renewal_beyond_the_high_water_is_lost_and_quarantines() {
    renewal_beyond_the_high_water("forgot", 13, 1);
}

#[test]
fn a_renewal_beyond_the_high_water_is_evidence_whoever_the_store_says_holds_the_worker() {
    // A store restored to a copy in which another incarnation still holds
    // the worker: the renewal's grants lie beyond the worker's high-water,
    // which a store that forgot nothing never sees from anyone, so it is a
    // loss to quarantine, not only a worker held by another.
    renewal_beyond_the_high_water("foreign", 14, 3);
}

/// Incarnation 1 is granted a worker; `renewer` renews it with grants that
/// end 5 s past what the store knows (the store was restored from a copy
/// older than its last grants): `Lost`, and nothing is granted until those
/// grants have ended plus the skew allowance.
fn renewal_beyond_the_high_water(tag: &'static str, redis_db: u8, renewer: u64) {
    let l = layout();
    for s in stores(tag, redis_db) {
        let ns = common::namespace(tag);
        let a = open(&s.url).unwrap();
        let g = a
            .acquire(&common::request(&ns, 1, 1, None, 0, 100, l))
            .unwrap_or_else(|e| panic!("{}: {e}", s.name));
        let claimed = g.end + 5_000;
        let r = a.acquire(&common::request(
            &ns,
            renewer,
            2,
            Some(g.worker),
            claimed,
            100,
            l,
        ));
        assert!(
            matches!(r, Err(GrantError::Lost(ref m)) if m.contains("forgot a grant")),
            "{}: {r:?}",
            s.name
        );
        let until = quarantined_until(
            s.name,
            a.acquire(&common::request(&ns, 2, 1, None, 0, 10, l)),
        );
        assert!(
            until >= l.unix_ms_of(claimed) + grantid_authority::DEFAULT_CLOCK_SKEW_MS,
            "{}: the quarantine ends at {until}, before the renewing holder's grants (until {})",
            s.name,
            l.unix_ms_of(claimed)
        );
    }
}
