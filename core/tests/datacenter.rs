//! The generator's datacenter (docs/AUTHORITIES.md, "Regions"): the
//! option, a source's report, and a grant outside the datacenter.

use std::time::Duration;

use grantid::{
    ErrorKind, Generator, Grant, GrantError, GrantRequest, GrantSource, Layout, MemoryAuthority,
};

/// 41 / 5 datacenter + 5 worker / 12: the Snowflake service layout.
fn layout() -> Layout {
    Layout::new(41, 10, 12)
        .unwrap()
        .with_datacenter_bits(5)
        .unwrap()
}

/// Grants worker `worker` (a full worker value) from a memory authority,
/// and reports `datacenter`.
struct Fixed {
    inner: MemoryAuthority,
    worker: u32,
    datacenter: Option<u32>,
}

impl GrantSource for Fixed {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        // Always the fixed worker, asked for by number: the inner authority
        // keeps its high-water, so a renewal is checked against it.
        self.inner.acquire(&GrantRequest {
            worker: Some(self.worker),
            ..request.clone()
        })
    }
    fn datacenter(&self) -> Option<u32> {
        self.datacenter
    }
}

fn fixed(worker: u32, datacenter: Option<u32>) -> Fixed {
    Fixed {
        inner: MemoryAuthority::new(),
        worker,
        datacenter,
    }
}

fn start(source: Fixed, own: Option<u32>) -> Result<Generator, grantid::Error> {
    let mut b = Generator::builder(layout(), "regions", source)
        .startup_timeout(Duration::from_millis(300))
        .backoff(Duration::from_millis(5), Duration::from_millis(20));
    if let Some(dc) = own {
        b = b.datacenter(dc);
    }
    b.start()
}

#[test]
fn ids_carry_the_generators_datacenter() {
    // Worker 3 of datacenter 2 is worker value 2 * 32 + 3 = 67.
    let g = start(fixed(67, None), Some(2)).unwrap();
    assert_eq!(g.datacenter(), Some(2));
    for id in g.next_ids(1000).unwrap() {
        let d = g.decode(id).unwrap();
        assert_eq!((d.worker, d.datacenter, d.datacenter_worker), (67, 2, 3));
    }
}

#[test]
fn the_sources_datacenter_is_taken_and_checked() {
    let g = start(fixed(67, Some(2)), None).unwrap();
    assert_eq!(g.datacenter(), Some(2));
    let g = start(fixed(67, Some(2)), Some(2)).unwrap();
    assert_eq!(g.datacenter(), Some(2));
    fails(
        start(fixed(67, Some(2)), Some(1)),
        ErrorKind::InvalidArgument,
        "datacenter 1, but its authority grants the workers of datacenter 2",
    );
}

fn fails(result: Result<Generator, grantid::Error>, kind: ErrorKind, needle: &str) {
    let e = result.unwrap_err();
    assert_eq!(e.kind(), kind, "{e}");
    assert!(e.message().contains(needle), "{e} lacks {needle:?}");
}

#[test]
fn a_grant_of_another_datacenter_is_never_used() {
    // The authority hands out worker 3 of datacenter 0 to a generator of
    // datacenter 1: every grant is invalid, start-up fails, no ID is issued.
    fails(
        start(fixed(3, None), Some(1)),
        ErrorKind::Unavailable,
        "worker 3 is in datacenter 0, this generator is in datacenter 1",
    );
}

#[test]
fn a_datacenter_that_does_not_fit_is_refused() {
    for (source, own, needle) in [
        (
            None,
            Some(32),
            "datacenter 32 does not fit in 5 datacenter bits",
        ),
        (
            Some(40),
            None,
            "datacenter 40 does not fit in 5 datacenter bits",
        ),
    ] {
        fails(
            start(fixed(0, source), own),
            ErrorKind::InvalidArgument,
            needle,
        );
    }
    fails(
        Generator::builder(Layout::default(), "regions", MemoryAuthority::new())
            .datacenter(0)
            .start(),
        ErrorKind::InvalidArgument,
        "no datacenter bits",
    );
}
