//! Regressions of the authority safety review (issue 21): each test
//! reproduces a way the authorities could repeat IDs, hang, or answer
//! wrongly, on the real component (fork(), file system, servers).

mod common;

use std::time::{Duration, Instant};

use common::{acquire_in_child, namespace, request, small_layout, temp_path};
use grantid::{ErrorKind, Generator, GrantError, GrantSource, Layout, MemoryAuthority};
use grantid_authority::{FileAuthority, Options, from_url};

#[test]
fn memory_authority_refuses_a_fork_child() {
    let source = MemoryAuthority::new();
    let ns = namespace("memfork");
    source
        .acquire(&request(&ns, 1, 1, None, 0, 10, small_layout()))
        .unwrap();
    assert!(
        !acquire_in_child(&source, &ns),
        "a fork() child was granted from its stale copy of the parent's state"
    );
    // The parent goes on.
    source
        .acquire(&request(&ns, 2, 1, None, 0, 10, small_layout()))
        .unwrap();
}

#[test]
fn a_permanent_refusal_fails_start_up_at_once() {
    let url = format!("file:{}", temp_path("refusal").display());
    let ns = namespace("refusal");
    let first = Generator::builder(
        Layout::new(41, 4, 8).unwrap(),
        ns.as_str(),
        from_url(&url).unwrap(),
    )
    .start()
    .unwrap();
    first.close();
    let t0 = Instant::now();
    let err = Generator::builder(
        Layout::new(41, 5, 7).unwrap(),
        ns.as_str(),
        from_url(&url).unwrap(),
    )
    .startup_timeout(Duration::from_secs(30))
    .start()
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.message().contains("another layout"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "start-up retried a permanent refusal for {:?}",
        t0.elapsed()
    );
}

#[test]
fn file_authority_serves_the_whole_worker_range() {
    let l = Layout::with_all(30, 32, 1, grantid::DEFAULT_EPOCH_MS, 1_000).unwrap();
    let file = FileAuthority::new(temp_path("wide"), Options::default());
    let ns = namespace("wide");
    let g = file
        .acquire(&request(&ns, 1, 1, Some(u32::MAX), 0, 10, l))
        .unwrap();
    assert_eq!(g.worker, u32::MAX);
    let g0 = file.acquire(&request(&ns, 2, 1, None, 0, 10, l)).unwrap();
    assert_eq!(g0.worker, 0);
    let r = file.acquire(&request(&ns, 3, 1, Some(u32::MAX), 0, 10, l));
    assert!(
        matches!(r, Err(GrantError::Lost(ref m)) if m.contains("held by")),
        "{r:?}"
    );
}
