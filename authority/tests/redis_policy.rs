//! Redis's eviction policy is checked at `init` and on first use: an
//! evicting policy is refused. Its own test binary, because it changes the
//! shared test server's configuration (test binaries run one at a time).

mod common;

use grantid::{ErrorKind, GrantError};
use grantid_authority::{from_url, open};

struct Restore(redis::Connection, String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _: Result<(), _> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(&self.1)
            .query(&mut self.0);
    }
}

#[test]
fn an_evicting_policy_is_refused_at_init_and_on_first_use() {
    let Some(url) = common::redis_url() else {
        return;
    };
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query(&mut con)
        .unwrap();
    assert_eq!(before[1], "noeviction");
    let report = open(&url).unwrap().init().unwrap();
    assert!(report.contains("maxmemory-policy noeviction"), "{report}");
    assert!(report.contains("appendfsync"), "{report}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut con)
        .unwrap();
    let _restore = Restore(con, before[1].clone());
    let e = open(&url).unwrap().init().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("allkeys-lru"), "{e}");
    let r = from_url(&url).unwrap().acquire(&common::request(
        &common::namespace("evict"),
        1,
        1,
        None,
        0,
        10,
        common::small_layout(),
    ));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("noeviction")),
        "{r:?}"
    );
}
