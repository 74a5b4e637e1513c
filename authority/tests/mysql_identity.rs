//! The MySQL / MariaDB identity and the multi-primary refusal (issue 27,
//! item 6), on MariaDB servers the tests start themselves:
//!
//! * the identity is `server_id` (plus `server_uuid` on MySQL), not
//!   MariaDB's `server_uid`, a hash of the host's MAC address and the port:
//!   a server restarted on another port (as a container restarted with a
//!   new MAC address) is not quarantined, and its holders renew; a new
//!   `server_id` (a failover to a replica) still is;
//! * a Galera node (`wsrep_on = ON`, a one-node cluster bootstrapped with
//!   the package galera-4, which scripts/lib/services.sh installs) is
//!   refused at `init` and at every grant, and granted once wsrep is off.
//!
//! The servers need the packages mariadb-server and galera-4; without them
//! the tests skip with a note (they fail under GRANTID_REQUIRE_SERVICES=1).

mod common;

use std::path::Path;

use grantid::{ErrorKind, GrantError, Layout};
use grantid_authority::open;

use common::{Scratch, Server, free_port, mariadb, required};

/// Galera's provider, from the Debian package galera-4.
const GALERA: &str = "/usr/lib/galera/libgalera_smm.so";

fn layout() -> Layout {
    Layout::new(41, 2, 8).unwrap()
}

/// Kills `server` and starts it again on the same data with a new port.
fn restart_on_another_port(server: &mut Server) {
    server.kill();
    let port = free_port();
    for a in &mut server.args {
        if a.starts_with("--port=") {
            *a = format!("--port={port}");
        }
    }
    server.port = port;
    server.spawn().unwrap();
}

#[test]
fn mariadb_identity_is_the_server_id_and_a_restart_on_another_port_is_not_a_loss() {
    if common::service("GRANTID_TEST_MYSQL_URL").is_none() {
        return;
    }
    let scratch = Scratch::new("mariadb-identity");
    let Some(mut server) = mariadb(&scratch.0, &[]) else {
        return;
    };
    let url = |port: u16| format!("mysql://root@127.0.0.1:{port}/grantid_test?timeout_ms=10000");
    let before = url(server.port);
    open(&before).unwrap().init_new_deployment().unwrap();
    let ns = common::namespace("identity");
    let g = open(&before)
        .unwrap()
        .acquire(&common::request(&ns, 1, 1, None, 0, 10, layout()))
        .unwrap();
    // The identity recorded, and the one the server reports: server_id only.
    let server_id = common::mariadb_cli(&before, "SELECT @@server_id");
    let recorded = common::mariadb_cli(&before, "SELECT identity FROM grantid_store");
    let reported = common::mariadb_cli(&before, "CALL grantid_identity(@i); SELECT @i");
    assert_eq!(recorded.trim(), format!("server_id={}", server_id.trim()));
    assert_eq!(reported, recorded);
    let uid_before = common::mariadb_cli(&before, "SELECT @@server_uid");

    // Killed and started on another port: MariaDB's server_uid (a hash of
    // the MAC address and the port) changes, as in a container restarted
    // with a new MAC address; the server and its data are the same.
    restart_on_another_port(&mut server);
    let after = url(server.port);
    let uid_after = common::mariadb_cli(&after, "SELECT @@server_uid");
    assert_ne!(uid_before, uid_after, "the server_uid did not change");
    let authority = open(&after).unwrap();
    // The holder renews (no quarantine would answer Lost), and a new
    // incarnation is granted at once.
    let renewed = authority
        .acquire(&common::request(
            &ns,
            1,
            2,
            Some(g.worker),
            g.end,
            10,
            layout(),
        ))
        .unwrap();
    assert_eq!(renewed.worker, g.worker);
    authority
        .acquire(&common::request(&ns, 2, 1, None, 0, 10, layout()))
        .unwrap();

    // Another server_id (a failover to a replica, which replication
    // requires to have its own) is still a new identity: quarantined.
    common::mariadb_cli(&after, "SET GLOBAL server_id = 7");
    common::waits(
        authority.acquire(&common::request(&ns, 3, 1, None, 0, 10, layout())),
        "identity changed",
    );
}

/// A one-node Galera cluster (bootstrapped: `gcomm://`) on free ports, or
/// `None` (with a note) when galera-4 or MariaDB is not installed.
fn galera(dir: &Path) -> Option<Server> {
    if !Path::new(GALERA).exists() {
        if required() {
            panic!("{GALERA} is missing: apt-get install galera-4 (scripts/lib/services.sh does)");
        }
        eprintln!("note: {GALERA} is missing (apt-get install galera-4); skipping");
        return None;
    }
    let (gcomm, ist) = (free_port(), free_port());
    let extra = [
        "--wsrep-on=ON".to_owned(),
        format!("--wsrep-provider={GALERA}"),
        "--wsrep-cluster-address=gcomm://".into(),
        "--wsrep-node-address=127.0.0.1".into(),
        format!(
            "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{gcomm};\
             ist.recv_addr=127.0.0.1:{ist}"
        ),
        "--binlog-format=ROW".into(),
        "--default-storage-engine=InnoDB".into(),
        "--innodb-autoinc-lock-mode=2".into(),
    ];
    mariadb(dir, &extra)
}

fn refused(r: Result<grantid::Grant, GrantError>, needle: &str) {
    assert!(
        matches!(r, Err(GrantError::Refused(ref m)) if m.contains(needle)),
        "{needle}: {r:?}"
    );
}

#[test]
fn a_galera_node_is_refused_at_init_and_at_every_grant() {
    if common::service("GRANTID_TEST_MYSQL_URL").is_none() {
        return;
    }
    let scratch = Scratch::new("galera");
    let Some(server) = galera(&scratch.0) else {
        return;
    };
    let url = format!(
        "mysql://root@127.0.0.1:{}/grantid_test?timeout_ms=10000",
        server.port
    );
    assert_eq!(
        common::mariadb_cli(&url, "SELECT @@GLOBAL.wsrep_on").trim(),
        "1"
    );
    let ns = common::namespace("galera");
    let req = |inc| common::request(&ns, inc, 1, None, 0, 10, layout());

    // Before the schema exists: init and a first grant are refused.
    let e = open(&url).unwrap().init().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(
        e.message().contains("Galera") && e.message().contains("wsrep_on = OFF"),
        "{e}"
    );
    refused(open(&url).unwrap().acquire(&req(1)), "wsrep_on = ON");

    // With wsrep off, the same server is a single primary: granted.
    common::mariadb_cli(&url, "SET GLOBAL wsrep_on = OFF");
    let authority = open(&url).unwrap();
    authority.init_new_deployment().unwrap();
    authority.acquire(&req(2)).unwrap();

    // On again: the procedure refuses every grant (on the open connection
    // and on a new one), in the words of the adapter's check, and init
    // says so.
    common::mariadb_cli(&url, "SET GLOBAL wsrep_on = ON");
    let why = e.message().strip_prefix("mysql: ").unwrap().to_owned();
    refused(authority.acquire(&req(3)), &why);
    refused(open(&url).unwrap().acquire(&req(4)), &why);
    let e = authority.init().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.message().contains("wsrep_on = ON"), "{e}");
    drop(server);
}
