//! Redis's eviction policy is checked at `init` and on first use: an
//! evicting policy is refused. Its own test binary, because it changes the
//! shared test server's configuration (test binaries run one at a time).
//! A Redis Cluster (three masters of its own) is refused by name.

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

/// A real 3-master Redis Cluster, on free ports, of this test alone.
fn cluster(dir: &std::path::Path) -> Option<Vec<common::Server>> {
    let mut nodes = Vec::new();
    for i in 0..3 {
        let port = common::free_port();
        let own = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&own).unwrap();
        let args = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            own.display().to_string(),
            "--cluster-enabled".into(),
            "yes".into(),
            "--cluster-config-file".into(),
            own.join("nodes.conf").display().to_string(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
        ];
        nodes.push(common::Server::start("redis-server", args, port)?);
    }
    let mut create = std::process::Command::new("redis-cli");
    create.args(["--cluster", "create"]);
    for n in &nodes {
        create.arg(format!("127.0.0.1:{}", n.port));
    }
    let out = create
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli");
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Some(nodes)
}

#[test]
fn a_redis_cluster_is_refused_by_name_at_init_and_at_start() {
    if common::redis_url().is_none() {
        return;
    }
    let scratch = common::Scratch::new("redis-cluster");
    let Some(nodes) = cluster(&scratch.0) else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/", nodes[0].port);
    let e = open(&url).unwrap().init().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("cluster mode"), "{e}");
    let r = from_url(&url).unwrap().acquire(&common::request(
        &common::namespace("cluster"),
        1,
        1,
        None,
        0,
        10,
        common::small_layout(),
    ));
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains("cluster mode")),
        "{r:?}"
    );
}
