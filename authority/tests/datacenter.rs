//! `datacenter=N` on every backend (docs/AUTHORITIES.md, "Regions"): only
//! that datacenter's workers, a store shared by two datacenters without a
//! duplicate, and the mismatches refused at start-up.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{namespace, postgres_url, redis_url, temp_path};
use grantid::{ErrorKind, Generator, Layout};

/// 41 / 5 datacenter + 5 worker / 12.
fn split(datacenter_bits: u8) -> Layout {
    Layout::new(41, 10, 12)
        .unwrap()
        .with_datacenter_bits(datacenter_bits)
        .unwrap()
}

fn with(url: &str, query: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{query}")
}

fn start(url: &str, ns: &str, layout: Layout) -> Result<Generator, grantid::Error> {
    let source = grantid_authority::from_url(url)?;
    Generator::builder(layout, ns, source)
        // Short grants, so that the rounds below renew; a horizon with
        // room for a slow renewal (an fsync on a busy disk).
        .grant_duration_ms(100)
        .horizon_ms(1000)
        .startup_timeout(Duration::from_secs(5))
        .backoff(Duration::from_millis(5), Duration::from_millis(50))
        .start()
}

fn refused(result: Result<Generator, grantid::Error>, needle: &str) {
    let e = result.map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains(needle), "{e} lacks {needle:?}");
}

/// Two datacenters on one store, renewals, a release, and the mismatches.
fn regions_on(base: &str) {
    let ns = namespace("regions");
    let dc0 = with(base, "datacenter=0");
    let dc1 = with(base, "datacenter=1");
    let gens = [
        (0, start(&dc0, &ns, split(5)).unwrap()),
        (1, start(&dc1, &ns, split(5)).unwrap()),
        (1, start(&dc1, &ns, split(5)).unwrap()),
    ];
    let mut seen = HashSet::new();
    for round in 0..3 {
        for (dc, g) in &gens {
            assert_eq!(g.datacenter(), Some(*dc));
            for id in g.next_ids(3000).unwrap() {
                assert!(seen.insert(id), "{base}: duplicate {id}");
                let d = g.decode(id).unwrap();
                assert_eq!(d.datacenter, u64::from(*dc), "{base}: {id}");
                assert!(d.datacenter_worker < 32);
            }
        }
        if round < 2 {
            // Past a grant and a renewal.
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    let authority = grantid_authority::open(&dc0).unwrap();
    assert_eq!(authority.datacenter(), Some(0));
    let status = authority.status(Some(&ns)).unwrap();
    assert_eq!(status.len(), 3, "{status:?}");
    for w in &status {
        // The store keeps workers within the datacenter, in the reduced
        // layout.
        assert_eq!(w.layout.worker_bits(), 5);
        assert!(w.worker < 32 && w.holder.is_some(), "{w:?}");
    }
    let first = gens[0].1.stats().worker.unwrap();
    gens[0].1.close();
    let released = authority.status(Some(&ns)).unwrap();
    let mine = released.iter().find(|w| w.worker == first % 32).unwrap();
    assert_eq!(mine.holder, None, "close() released worker {first}");

    // The same store without the split, or with another one, is another
    // layout of the namespace: refused at start-up.
    refused(start(base, &ns, Layout::new(41, 10, 12).unwrap()), "layout");
    refused(start(&dc1, &ns, split(3)), "layout");
    // datacenter= that the layout cannot hold.
    let other = namespace("regions-bad");
    refused(start(&dc1, &other, Layout::default()), "no datacenter bits");
    refused(
        start(&with(base, "datacenter=32"), &other, split(5)),
        "does not fit in 5 datacenter bits",
    );
    // The generator's own datacenter must agree with the URL's.
    let source = grantid_authority::from_url(&dc1).unwrap();
    refused(
        Generator::builder(split(5), &ns, source)
            .datacenter(0)
            .start(),
        "authority grants the workers of datacenter 1",
    );
}

#[test]
fn file_regions() {
    let path = temp_path("regions");
    regions_on(&format!("file:{}", path.display()));
}

#[test]
fn postgres_regions() {
    if let Some(url) = postgres_url() {
        regions_on(&url);
    }
}

#[test]
fn redis_regions() {
    if let Some(url) = redis_url() {
        regions_on(&url);
    }
}

#[test]
fn static_worker_within_its_datacenter() {
    let ns = namespace("regions-static");
    let g = start("static:3?datacenter=1", &ns, split(5)).unwrap();
    let d = g.decode(g.next_id().unwrap()).unwrap();
    assert_eq!((d.worker, d.datacenter, d.datacenter_worker), (35, 1, 3));
    drop(g);
    // Worker 32 does not fit in a datacenter of 5 worker bits.
    refused(start("static:32?datacenter=1", &ns, split(5)), "32");
}

/// Without `datacenter=` a store serves the whole worker field, whatever the
/// layout's split: it registers the encoding, so generators with and without
/// the split share one pool of worker values, and renewals keep working
/// after the state is read back.
fn whole_field_on(base: &str) {
    let ns = namespace("regions-whole");
    let split_gen = start(base, &ns, split(5)).unwrap();
    let flat_gen = start(base, &ns, Layout::new(41, 10, 12).unwrap()).unwrap();
    let mut seen = HashSet::new();
    for _ in 0..3 {
        for g in [&split_gen, &flat_gen] {
            for id in g.next_ids(2000).unwrap() {
                assert!(seen.insert(id), "{base}: duplicate {id}");
            }
        }
        // Past a grant: renewals read the registered layout back.
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(split_gen.stats().lease_losses, 0);
    assert_ne!(split_gen.stats().worker, flat_gen.stats().worker);
}

#[test]
fn whole_field_without_datacenter() {
    whole_field_on(&format!("file:{}", temp_path("regions-whole").display()));
    if let Some(url) = postgres_url() {
        whole_field_on(&url);
    }
    if let Some(url) = redis_url() {
        whole_field_on(&url);
    }
}

/// Sessions of one `datacenter=` URL (`open_sessions`, as `grantid serve`
/// forwards on): a release that comes on another session than its acquire
/// still releases.
fn sessions_share_layouts_on(base: &str) {
    let ns = namespace("regions-sessions");
    let sessions = grantid_authority::open_sessions(&with(base, "datacenter=1"), 2).unwrap();
    assert_eq!(sessions.len(), 2);
    let request = grantid::GrantRequest {
        namespace: ns.clone(),
        incarnation: 7,
        request_id: 1,
        worker: None,
        not_before: 0,
        now: 0,
        duration: 100,
        layout: split(5),
    };
    let grant = sessions[0].acquire(&request).unwrap();
    assert_eq!(grant.worker >> 5, 1, "{grant:?}");
    sessions[1].release(&grant);
    let status = sessions[1].status(Some(&ns)).unwrap();
    let mine = status
        .iter()
        .find(|w| w.worker == grant.worker % 32)
        .unwrap();
    assert_eq!(
        mine.holder, None,
        "the release on the other session was lost"
    );
}

#[test]
fn postgres_sessions_share_layouts() {
    if let Some(url) = postgres_url() {
        sessions_share_layouts_on(&url);
    }
}

#[test]
fn redis_sessions_share_layouts() {
    if let Some(url) = redis_url() {
        sessions_share_layouts_on(&url);
    }
}
