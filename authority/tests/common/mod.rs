//! Helpers shared by the integration tests: which engines are reachable,
//! request builders, and the disjointness check.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use grantid::{Clock, Grant, GrantRequest, GrantSource, Layout};
use grantid_authority::{FileAuthority, Options, PgAuthority, RedisAuthority};

/// A server URL from the environment, or `None` (with a note) when the test
/// should skip. Under `GRANTID_REQUIRE_SERVICES=1` a missing URL fails.
pub fn service(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var("GRANTID_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("{var} is not set and GRANTID_REQUIRE_SERVICES=1");
            }
            eprintln!("note: {var} is not set; skipping (scripts/with-services.sh sets it)");
            None
        }
    }
}

/// The test PostgreSQL, declared a new deployment once (so its first use
/// does not start a state-loss quarantine).
pub fn postgres_url() -> Option<String> {
    static DECLARED: std::sync::Once = std::sync::Once::new();
    let url = service("GRANTID_TEST_POSTGRES_URL")?;
    DECLARED.call_once(|| {
        grantid_authority::open(&url)
            .unwrap()
            .init_new_deployment()
            .unwrap();
    });
    Some(url)
}

/// The test Redis, declared a new deployment once (so its first use does
/// not start a state-loss quarantine).
pub fn redis_url() -> Option<String> {
    static DECLARED: std::sync::Once = std::sync::Once::new();
    let url = service("GRANTID_TEST_REDIS_URL")?;
    DECLARED.call_once(|| {
        grantid_authority::open(&url)
            .unwrap()
            .init_new_deployment()
            .unwrap();
    });
    Some(url)
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh random 64-bit value.
pub fn random() -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("random bytes");
    u64::from_le_bytes(b)
}

/// A namespace no other test run uses.
pub fn namespace(tag: &str) -> String {
    format!("test-{tag}-{:016x}", random())
}

pub fn temp_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir()
        .join(format!("grantid-authority-tests-{}", std::process::id()))
        .join(format!("{tag}-{:x}.json", random()))
}

/// A small layout: 40 timestamp bits, 2 worker bits (4 workers), 1 ms ticks.
pub fn small_layout() -> Layout {
    Layout::new(40, 2, 8).unwrap()
}

pub fn request(
    ns: &str,
    incarnation: u64,
    request_id: u64,
    worker: Option<u32>,
    not_before: u64,
    duration: u64,
    layout: Layout,
) -> GrantRequest {
    GrantRequest {
        namespace: ns.to_owned(),
        incarnation,
        request_id,
        worker,
        not_before,
        now: 0,
        duration,
        layout,
    }
}

/// Which backend a rule test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    File,
    Postgres,
    Redis,
}

/// A source of `kind` whose authority time is `clock`, with `grace_ms` of
/// lease grace. `None` when the engine is not available (skip).
pub fn source(kind: Kind, clock: Arc<dyn Clock>, grace_ms: u64) -> Option<Box<dyn GrantSource>> {
    let options = Options {
        lease_grace_ms: grace_ms,
        ..Options::default()
    };
    Some(match kind {
        Kind::Memory => Box::new(
            grantid::MemoryAuthority::new()
                .with_lease_grace(grace_ms)
                .with_clock(clock),
        ),
        // The rule's cases step the clock by hours: no bounded lead here
        // (tests/state_loss.rs covers it).
        Kind::File => Box::new(
            FileAuthority::new(
                temp_path("rule"),
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .with_clock(clock),
        ),
        Kind::Postgres => Box::new(
            PgAuthority::new(
                &postgres_url()?,
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .unwrap()
            .with_injected_clock(clock),
        ),
        Kind::Redis => Box::new(
            RedisAuthority::new(
                &redis_url()?,
                Options {
                    max_lead_ms: 1 << 40,
                    ..options
                },
            )
            .unwrap()
            .with_injected_clock(clock),
        ),
    })
}

/// Panics unless the grants of each worker are pairwise disjoint; returns
/// how many workers were seen.
pub fn assert_disjoint(grants: &[Grant]) -> usize {
    // (start, end, grant_id) per (namespace, worker).
    type Spans = Vec<(u64, u64, u64)>;
    let mut by_worker: BTreeMap<(String, u32), Spans> = BTreeMap::new();
    for g in grants {
        assert!(g.start < g.end, "empty grant {g:?}");
        by_worker
            .entry((g.namespace.clone(), g.worker))
            .or_default()
            .push((g.start, g.end, g.grant_id));
    }
    for ((ns, w), v) in &mut by_worker {
        v.sort();
        for pair in v.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "{ns} worker {w}: grants {:?} and {:?} overlap",
                pair[0],
                pair[1]
            );
            assert!(
                pair[0].2 < pair[1].2,
                "{ns} worker {w}: fencing epochs do not increase with time: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    by_worker.len()
}

/// Forks; the child acquires through the same source and reports through a
/// pipe whether it got a grant. Returns the child's answer.
pub fn acquire_in_child(source: &dyn grantid::GrantSource, ns: &str) -> bool {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid two-element array for pipe(2).
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child only uses the source (opening its own connection),
    // writes one byte and calls _exit; it never returns into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = source
            .acquire(&request(ns, 77, 1, None, 0, 10, small_layout()))
            .is_ok();
        let b = [u8::from(ok)];
        // SAFETY: writes one byte from a valid buffer, then exits.
        unsafe {
            libc::write(fds[1], b.as_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    let mut b = [0u8; 1];
    // SAFETY: reads one byte into a valid buffer; waits for our own child.
    unsafe {
        libc::close(fds[1]);
        libc::read(fds[0], b.as_mut_ptr().cast(), 1);
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
    }
    b[0] == 1
}
