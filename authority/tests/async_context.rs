//! Every authority called from inside a caller's tokio runtime: from an
//! async function on a current-thread runtime, and from a `spawn_blocking`
//! thread. A runtime of the authority's own cannot block there, so the
//! call runs on a thread of its own (authority/src/blocking.rs); it never
//! panics with "Cannot start a runtime from within a runtime".

mod common;

use common::{namespace, random, request, small_layout};

/// Init, a grant, the status that shows it, its release, and the drop of
/// the authority, all on the calling thread.
fn round_trip(url: &str) {
    let authority = grantid_authority::open(url).unwrap();
    authority.init().unwrap_or_else(|e| panic!("{url}: {e}"));
    let ns = namespace("async");
    let grant = authority
        .acquire(&request(&ns, random(), 1, None, 0, 1_000, small_layout()))
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(grant.end > grant.start, "{grant:?}");
    let workers = authority.status(Some(&ns)).unwrap();
    assert!(
        workers.iter().any(|w| w.worker == grant.worker),
        "{url}: {workers:?}"
    );
    authority.release(&grant);
    drop(authority);
}

/// `round_trip` in an async function, then on a `spawn_blocking` thread.
async fn inside_a_runtime(url: Option<String>) {
    let Some(url) = url else { return };
    round_trip(&url);
    tokio::task::spawn_blocking(move || round_trip(&url))
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres() {
    inside_a_runtime(common::postgres_url()).await;
}

#[tokio::test]
async fn mysql() {
    inside_a_runtime(common::mysql_url()).await;
}

#[tokio::test]
async fn redis() {
    inside_a_runtime(common::redis_url()).await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcd() {
    inside_a_runtime(common::etcd_url()).await;
}

#[tokio::test]
async fn file() {
    inside_a_runtime(Some(format!(
        "file:{}",
        common::temp_path("async").display()
    )))
    .await;
}
