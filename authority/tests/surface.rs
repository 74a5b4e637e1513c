//! `from_url` and the generator on every backend: IDs issued end to end,
//! malformed URLs, unreachable servers, `fork()` children.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{acquire_in_child, namespace, random, request, small_layout};
use grantid::{ErrorKind, Generator, GrantError, GrantSource, Layout, ManualClock};
use grantid_authority::{Options, StaticAuthority, from_url};

fn issue_ids(url: &str) {
    let ns = namespace("e2e");
    let source = from_url(url).unwrap();
    let generator = Generator::builder(Layout::default(), ns.as_str(), source)
        .startup_timeout(Duration::from_secs(10))
        .start()
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let ids = generator.next_ids(5_000).unwrap();
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let worker = generator.stats().worker.unwrap();
    assert_eq!(generator.decode(ids[0]).unwrap().worker, u64::from(worker));
    generator.close();
}

#[test]
fn generator_on_file() {
    issue_ids(&format!("file:{}", common::temp_path("e2e").display()));
}

#[test]
fn generator_on_static() {
    issue_ids("static:7");
    issue_ids(&format!(
        "static:8?state={}",
        common::temp_path("e2e-static").display()
    ));
}

#[test]
fn generator_on_postgres() {
    if let Some(url) = common::postgres_url() {
        issue_ids(&url);
    }
}

#[test]
fn generator_on_redis() {
    if let Some(url) = common::redis_url() {
        issue_ids(&url);
    }
}

#[test]
fn malformed_urls_are_invalid_arguments() {
    for (url, needle) in [
        ("", "no scheme"),
        ("mysql://x", "unknown scheme"),
        ("static:web", "not a worker number"),
        ("postgres://h:notaport/db", "authority URL"),
        ("redis://h:notaport/", "authority URL"),
        ("file:/x?lease_grace_ms=-1", "not a whole number"),
    ] {
        let e = from_url(url)
            .err()
            .unwrap_or_else(|| panic!("{url} was accepted"));
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.message().contains(needle), "{url}: {e}");
    }
}

#[test]
fn unreachable_servers_are_unavailable_not_errors_of_from_url() {
    // Port 1 on localhost: connection refused. A loopback listener that
    // never answers (its backlog accepts the connection, nobody reads):
    // the client-side deadline.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    for url in [
        "postgres://postgres@127.0.0.1:1/postgres?timeout_ms=500".to_owned(),
        "redis://127.0.0.1:1/?timeout_ms=500".to_owned(),
        format!("postgres://postgres@127.0.0.1:{port}/postgres?timeout_ms=300"),
        format!("redis://127.0.0.1:{port}/?timeout_ms=300"),
    ] {
        let url = url.as_str();
        let source = from_url(url).unwrap();
        let t0 = Instant::now();
        let r = source.acquire(&request("ns", 1, 1, None, 0, 10, small_layout()));
        assert!(matches!(r, Err(GrantError::Unavailable(_))), "{url}: {r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{url}: took {:?}",
            t0.elapsed()
        );
    }
    drop(silent);
}

#[test]
fn static_worker_from_env_and_range() {
    let var = format!("GRANTID_TEST_POD_{:x}", random());
    // SAFETY: this test alone reads or writes this uniquely named variable.
    unsafe { std::env::set_var(&var, "web-3") };
    let s = from_url(&format!("static:env:{var}")).unwrap();
    let g = s
        .acquire(&request("ns", 1, 1, None, 0, 10, small_layout()))
        .unwrap();
    assert_eq!(g.worker, 3);
    let too_big = from_url("static:4").unwrap();
    let r = too_big.acquire(&request("ns", 1, 1, None, 0, 10, small_layout()));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("does not fit")),
        "{r:?}"
    );
    let r = s.acquire(&request("ns", 1, 2, Some(2), 0, 10, small_layout()));
    assert!(matches!(r, Err(GrantError::Refused(_))), "{r:?}");
}

#[test]
fn static_state_file_keeps_high_water_across_restarts_and_clock_steps() {
    let l = small_layout();
    let path = common::temp_path("static");
    let clock = ManualClock::new(l.unix_ms_of(10_000));
    let first =
        StaticAuthority::new(2, Some(path.clone()), Options::default()).with_clock(clock.clone());
    let g1 = first.acquire_for_test(&request("ns", 1, 1, None, 0, 100, l));
    assert_eq!((g1.start, g1.end), (10_000, 10_100));
    // "Restart" with the clock an hour back: continues after the high-water.
    clock.set(l.unix_ms_of(10_000) - 3_600_000);
    let second = StaticAuthority::new(2, Some(path), Options::default()).with_clock(clock.clone());
    // The high-water is an hour ahead: no first grant that far in the future
    // (every call would fail with NotYetValid), but a wait...
    let r = second.acquire(&request("ns", 2, 1, None, 0, 100, l));
    assert!(
        matches!(r, Err(GrantError::Unavailable(ref m)) if m.contains("waits")),
        "{r:?}"
    );
    // ...until the clock is back within 100 ms of it.
    clock.set(l.unix_ms_of(10_050));
    let g2 = second.acquire_for_test(&request("ns", 2, 1, None, 0, 100, l));
    assert_eq!(g2.start, 10_100);
    clock.set(l.unix_ms_of(10_000) - 3_600_000);
    // Without a state file a restart forgets it: the documented caveat.
    let bare = StaticAuthority::new(2, None, Options::default()).with_clock(clock);
    let g3 = bare.acquire_for_test(&request("ns", 3, 1, None, 0, 100, l));
    assert!(
        g3.start < g1.end,
        "without state the clock step repeats time"
    );
}

trait AcquireForTest {
    fn acquire_for_test(&self, r: &grantid::GrantRequest) -> grantid::Grant;
}

impl<S: grantid::GrantSource> AcquireForTest for S {
    fn acquire_for_test(&self, r: &grantid::GrantRequest) -> grantid::Grant {
        self.acquire(r).unwrap()
    }
}

fn fork_child_uses_its_own_connection(url: &str) {
    let source = from_url(url).unwrap();
    let ns = namespace("fork");
    let l = small_layout();
    // The parent's connection is open before the fork.
    let g = source.acquire(&request(&ns, 1, 1, None, 0, 10, l)).unwrap();
    assert!(acquire_in_child(&*source, &ns), "the child got no grant");
    // The parent's connection still works after the child exited.
    let g2 = source
        .acquire(&request(&ns, 1, 2, Some(g.worker), g.end, 10, l))
        .unwrap();
    assert!(g2.start >= g.end);
}

#[test]
fn fork_child_on_postgres() {
    if let Some(url) = common::postgres_url() {
        fork_child_uses_its_own_connection(&url);
    }
}

#[test]
fn fork_child_on_redis() {
    if let Some(url) = common::redis_url() {
        fork_child_uses_its_own_connection(&url);
    }
}

#[test]
fn fork_child_of_bare_static_is_refused() {
    let source = from_url("static:1").unwrap();
    assert!(!acquire_in_child(&*source, "ns"));
    let with_state = from_url(&format!(
        "static:1?state={}",
        common::temp_path("fork-static").display()
    ))
    .unwrap();
    assert!(acquire_in_child(&*with_state, "ns"));
}
