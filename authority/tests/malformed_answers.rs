//! A store that answers wrongly: PostgreSQL whose `grantid.acquire` and
//! MySQL whose `grantid_acquire` are replaced by ones returning hostile
//! rows, and worker records edited by hand in PostgreSQL, MySQL and Redis. Every case is a typed error (an invalid
//! grant, or `Unavailable` from `status`), never a panic, a wrapped number
//! or a truncated layout (authority/src/answer.rs). Each case runs in a
//! database of its own (a new PostgreSQL database, a Redis database
//! number), so no other test sees the damage.

mod common;

use common::{random, request, small_layout};
use grantid::{ErrorKind, GrantError, GrantSource};
use grantid_authority::{Authority, Options, PgAuthority, RedisAuthority};

/// A PostgreSQL database of its own, dropped at the end.
struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    fn new(admin: &str) -> Database {
        let name = format!("grantid_hostile_{:x}", random());
        let mut c = postgres::Client::connect(admin, postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let (base, _) = admin.rsplit_once('/').expect("a URL with a database name");
        Database {
            admin: admin.to_owned(),
            url: format!("{base}/{name}"),
            name,
        }
    }

    fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A database of its own with the schema in place, the authority on it and
/// a client; `None` (skip) without PostgreSQL.
fn database() -> Option<(Database, PgAuthority, postgres::Client)> {
    let db = Database::new(&common::postgres_url()?);
    let authority = PgAuthority::new(&db.url, Options::default()).unwrap();
    authority.init_new_deployment().unwrap();
    let client = db.client();
    Some((db, authority, client))
}

/// Replaces `grantid.acquire` (the form the adapter calls) by a function
/// that returns the row of table `grantid.hostile`.
fn install_hostile_acquire(c: &mut postgres::Client) {
    let r = request("hostile", 1, 1, None, 0, 10, small_layout());
    let arity = grantid_authority::protocol::postgres_acquire(&r, &Options::default(), None)
        .unwrap()
        .params
        .len() as i16;
    let args: String = c
        .query_one(
            "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p \
             WHERE p.pronamespace = 'grantid'::regnamespace AND p.proname = 'acquire' \
               AND p.pronargs = $1",
            &[&arity],
        )
        .unwrap()
        .get(0);
    c.batch_execute(&format!(
        "CREATE TABLE grantid.hostile (status text, worker bigint, grant_id bigint, \
             start_tick bigint, end_tick bigint, message text);
         DROP FUNCTION grantid.acquire({args});
         CREATE FUNCTION grantid.acquire({args}) RETURNS TABLE (status text, worker bigint, \
             grant_id bigint, start_tick bigint, end_tick bigint, message text)
           LANGUAGE sql AS 'SELECT * FROM grantid.hostile';"
    ))
    .unwrap();
}

#[test]
fn postgres_hostile_acquire_rows_are_typed_errors() {
    let Some((_db, authority, mut c)) = database() else {
        return;
    };
    install_hostile_acquire(&mut c);
    let r = request("hostile", 1, 1, None, 0, 10, small_layout());
    let good = "'granted', 1, 1, 100, 110, NULL";
    c.batch_execute(&format!("INSERT INTO grantid.hostile VALUES ({good})"))
        .unwrap();
    let grant = authority.acquire(&r).unwrap();
    assert_eq!(
        (grant.worker, grant.grant_id, grant.start, grant.end),
        (1, 1, 100, 110)
    );
    for (row, needle) in [
        (
            "'granted', 1, -1, 100, 110, NULL",
            "grant_id -1 is out of range",
        ),
        ("'granted', 1, 1, -5, 110, NULL", "start -5 is out of range"),
        ("'granted', 1, 1, 110, 110, NULL", "not before end"),
        ("'granted', 1, 1, 120, 110, NULL", "not before end"),
        (
            "'granted', 4, 1, 100, 110, NULL",
            "does not fit in 2 worker bits",
        ),
        ("'granted', -1, 1, 100, 110, NULL", "worker -1"),
        ("'granted', 1, 1, NULL, 110, NULL", "start is missing"),
        (
            "'granted', 1, 1, 100, 9223372036854775807, NULL",
            "past the timestamp",
        ),
        ("'Granted', 1, 1, 100, 110, NULL", "unknown status"),
        ("NULL, 1, 1, 100, 110, NULL", "no status"),
    ] {
        c.batch_execute(&format!(
            "TRUNCATE grantid.hostile; INSERT INTO grantid.hostile VALUES ({row})"
        ))
        .unwrap();
        match authority.acquire(&r) {
            Err(GrantError::Invalid(why)) => {
                assert!(
                    why.contains("malformed answer") && why.contains(needle),
                    "{row}: {why}"
                )
            }
            other => panic!("{row}: expected an invalid grant, got {other:?}"),
        }
    }
    c.batch_execute(
        "TRUNCATE grantid.hostile; \
         INSERT INTO grantid.hostile VALUES ('lost', NULL, NULL, NULL, NULL, 'held by 7')",
    )
    .unwrap();
    assert!(matches!(authority.acquire(&r), Err(GrantError::Lost(m)) if m.contains("held by 7")));
}

#[test]
fn postgres_hostile_worker_records_are_typed_errors() {
    let Some((_db, authority, mut c)) = database() else {
        return;
    };
    // 296 bits was read as 296 as u8 = 40; worker -1 as 4294967295.
    c.batch_execute(
        "INSERT INTO grantid.namespaces (namespace, timestamp_bits, worker_bits, sequence_bits, \
             epoch_ms, tick_ms) VALUES ('wide', 296, 2, 8, 0, 1), ('negative', 40, 2, 8, 0, 1);
         INSERT INTO grantid.workers (namespace, worker, high_water) \
             VALUES ('wide', 0, 5), ('negative', -1, 5);",
    )
    .unwrap();
    for (ns, needle) in [
        ("wide", "timestamp_bits 296 is out of range"),
        ("negative", "worker -1 is out of range"),
    ] {
        let e = authority.status(Some(ns)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.message().contains(needle), "{ns}: {e}");
    }
}

/// `HSET key field value ...`.
fn hset(c: &mut redis::Connection, key: &str, fields: &[&str]) {
    let _: () = redis::cmd("HSET").arg(key).arg(fields).query(c).unwrap();
}

const GOOD_LAYOUT: &[&str] = &[
    "timestamp_bits",
    "40",
    "worker_bits",
    "2",
    "sequence_bits",
    "8",
    "epoch_ms",
    "0",
    "tick_ms",
    "1",
];

#[test]
fn redis_hostile_worker_records_are_typed_errors() {
    let Some(url) = common::redis_url() else {
        return;
    };
    // A database number of its own (the tests use 0).
    let url = format!("{}/13", url.trim_end_matches('/'));
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let authority = RedisAuthority::new(&url, Options::default()).unwrap();
    let good_worker = [
        "holder",
        "3",
        "lease_expiry",
        "4",
        "high_water",
        "5",
        "fencing",
        "6",
    ];
    for (ns, layout_field, worker, needle) in [
        (
            "bits",
            ["timestamp_bits", "296"],
            good_worker,
            "timestamp_bits 296 is out of range",
        ),
        (
            "tick",
            ["tick_ms", "-1"],
            good_worker,
            "tick_ms -1 is out of range",
        ),
        (
            "epoch",
            ["epoch_ms", "soon"],
            good_worker,
            "epoch_ms is missing or not an integer",
        ),
        (
            "hw",
            ["tick_ms", "1"],
            [
                "holder",
                "3",
                "lease_expiry",
                "4",
                "high_water",
                "-5",
                "fencing",
                "6",
            ],
            "high_water -5 is out of range",
        ),
    ] {
        let p = format!("grantid:{{hostile-{ns}}}");
        hset(&mut c, &format!("{p}:layout"), GOOD_LAYOUT);
        hset(&mut c, &format!("{p}:layout"), &layout_field);
        hset(&mut c, &format!("{p}:w:0"), &worker);
        let e = authority
            .status(Some(&format!("hostile-{ns}")))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.message().contains(needle), "{ns}: {e}");
    }
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
}

/// A MySQL database of its own (on GRANTID_TEST_MYSQL_URL's server), with
/// the schema in place, and the authority on it; dropped at the end.
struct MysqlDatabase {
    admin: String,
    url: String,
    name: String,
}

impl MysqlDatabase {
    fn new() -> Option<(MysqlDatabase, Box<dyn Authority>)> {
        let admin = common::mysql_url()?;
        let name = format!("grantid_hostile_{:x}", random());
        common::mariadb_cli(&admin, &format!("CREATE DATABASE {name}"));
        let (base, _) = admin.split('?').next()?.rsplit_once('/')?;
        let db = MysqlDatabase {
            url: format!("{base}/{name}"),
            admin,
            name,
        };
        let authority = grantid_authority::open(&db.url).unwrap();
        authority.init_new_deployment().unwrap();
        Some((db, authority))
    }

    fn run(&self, sql: &str) -> String {
        common::mariadb_cli(&self.url, sql)
    }
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        common::mariadb_cli(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {}", self.name),
        );
    }
}

/// MySQL's answers are read as every store's are (authority/src/answer.rs):
/// a malformed one is an invalid grant, a worker outside the layout too.
#[test]
fn mysql_hostile_acquire_rows_are_typed_errors() {
    let Some((db, authority)) = MysqlDatabase::new() else {
        return;
    };
    let args = db.run(
        "SELECT GROUP_CONCAT(CONCAT(PARAMETER_MODE, ' ', PARAMETER_NAME, ' ', DTD_IDENTIFIER) \
         ORDER BY ORDINAL_POSITION) FROM information_schema.PARAMETERS \
         WHERE SPECIFIC_SCHEMA = DATABASE() AND SPECIFIC_NAME = 'grantid_acquire'",
    );
    db.run(&format!(
        "CREATE TABLE grantid_hostile (status VARCHAR(32), worker BIGINT, grant_id BIGINT, \
             start_tick BIGINT, end_tick BIGINT, message VARCHAR(255)); \
         DROP PROCEDURE grantid_acquire; \
         CREATE PROCEDURE grantid_acquire({}) SELECT * FROM grantid_hostile;",
        args.trim()
    ));
    let r = request("hostile", 1, 1, None, 0, 10, small_layout());
    db.run("INSERT INTO grantid_hostile VALUES ('granted', 1, 1, 100, 110, NULL)");
    let grant = authority.acquire(&r).unwrap();
    assert_eq!(
        (grant.worker, grant.grant_id, grant.start, grant.end),
        (1, 1, 100, 110)
    );
    for (row, needle) in [
        (
            "'granted', 1, -1, 100, 110, NULL",
            "grant_id -1 is out of range",
        ),
        ("'granted', 1, 1, 110, 110, NULL", "not before end"),
        (
            "'granted', 4, 1, 100, 110, NULL",
            "does not fit in 2 worker bits",
        ),
        ("'granted', 1, 1, NULL, 110, NULL", "start is missing"),
        ("'Granted', 1, 1, 100, 110, NULL", "unknown status"),
        ("NULL, 1, 1, 100, 110, NULL", "no status"),
    ] {
        db.run(&format!(
            "DELETE FROM grantid_hostile; INSERT INTO grantid_hostile VALUES ({row})"
        ));
        match authority.acquire(&r) {
            Err(GrantError::Invalid(why)) => assert!(
                why.contains("mysql: malformed answer") && why.contains(needle),
                "{row}: {why}"
            ),
            other => panic!("{row}: expected an invalid grant, got {other:?}"),
        }
    }
    // No row at all.
    db.run("DELETE FROM grantid_hostile");
    assert!(
        matches!(authority.acquire(&r), Err(GrantError::Invalid(m)) if m.contains("no status"))
    );
    db.run("INSERT INTO grantid_hostile VALUES ('lost', NULL, NULL, NULL, NULL, 'held by 7')");
    assert!(matches!(authority.acquire(&r), Err(GrantError::Lost(m)) if m.contains("held by 7")));
}

/// A worker record MySQL holds outside its layout is `Unavailable` from
/// `status`, as in the other stores.
#[test]
fn mysql_hostile_worker_records_are_typed_errors() {
    let Some((db, authority)) = MysqlDatabase::new() else {
        return;
    };
    db.run(
        "INSERT INTO grantid_namespaces (namespace, timestamp_bits, worker_bits, sequence_bits, \
             epoch_ms, tick_ms) VALUES ('outside', 40, 2, 8, 0, 1); \
         INSERT INTO grantid_workers (namespace, worker, high_water) VALUES ('outside', 9, 5);",
    );
    let e = authority.status(Some("outside")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("does not fit in 2 worker bits"), "{e}");
}
