//! A tenant of `grantid serve` cannot stop another one's IDs: on every
//! engine, a token bound to one namespace sends `GrantService.Acquire`
//! renewals that claim the store lost a grant (one from the layout's last
//! tick, one just beyond the worker's high-water), and an unscoped token
//! one from the last tick; a client of another namespace, with its own
//! token, gets every ID it asks for before and after (docs/SERVICE.md,
//! "Threat model").

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Ca, free_port, put, scratch, serve, service_url};
use grantid::{Generator, GrantError, GrantRequest, GrantSource, Layout};

const TENANT: &str = "tenant-token-0123456789abcdef";
const ORDERS: &str = "orders-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdefab";

/// A name no other run uses.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn request(
    layout: Layout,
    namespace: &str,
    request_id: u64,
    worker: Option<u32>,
    not_before: u64,
) -> GrantRequest {
    GrantRequest {
        namespace: namespace.into(),
        incarnation: 0x5eed_0000_0000_0001,
        request_id,
        worker,
        not_before,
        now: 0,
        duration: 1_000,
        layout,
    }
}

/// IDs of `n` asked for by a new generator of `namespace` on `url`.
fn ids_issued(layout: Layout, url: &str, namespace: &str, n: usize) -> usize {
    let generator =
        match Generator::builder(layout, namespace, grantid_authority::from_url(url).unwrap())
            .startup_timeout(Duration::from_secs(5))
            .start()
        {
            Ok(g) => g,
            Err(e) => {
                eprintln!("{namespace}: no start: {e}");
                return 0;
            }
        };
    let issued = (0..n).filter(|_| generator.next_id().is_ok()).count();
    generator.close();
    issued
}

fn assert_not_evidence(what: &str, answer: Result<grantid::Grant, GrantError>) {
    match answer {
        Err(GrantError::Lost(why)) => assert!(why.contains(grantid::NOT_EVIDENCE), "{what}: {why}"),
        other => panic!("{what}: {other:?}"),
    }
}

/// The three claims against a server on the authority `url`; another
/// tenant's IDs before and after.
fn one_tenant_cannot_stop_another(engine: &str, url: &str) {
    claims_through_a_server(engine, url, Layout::default(), &[]);
}

/// [`one_tenant_cannot_stop_another`] with clients of `layout` and the
/// server's `args`; a scoped tenant's plain renewal is granted first.
fn claims_through_a_server(engine: &str, url: &str, layout: Layout, args: &[&str]) {
    let dir = scratch(&format!("hostile-{engine}"));
    let ca = Ca::new("grantid hostile CA");
    let (cert, key) = ca.issue(&dir, "server", &["127.0.0.1"]);
    let ca_pem = put(&dir, "ca.pem", &ca.pem);
    let (tenant_ns, orders_ns) = (unique("tenant-a"), unique("orders"));
    let tokens = put(
        &dir,
        "tokens",
        &format!("{TENANT} {tenant_ns}\n{ORDERS} {orders_ns}\n{ADMIN}\n"),
    );
    let path = |p: &PathBuf| p.display().to_string();
    let port = free_port();
    let mut srv = serve(
        &dir,
        port,
        url,
        &[
            "--tls-cert",
            &path(&cert),
            "--tls-key",
            &path(&key),
            "--token-file",
            &path(&tokens),
        ]
        .into_iter()
        .chain(args.iter().copied())
        .collect::<Vec<_>>(),
    );
    let via = |name: &str, token: &str| {
        let file = put(&dir, name, token);
        format!(
            "grpcs://127.0.0.1:{port}?timeout_ms=3000&tls_ca={}&token_file={}",
            path(&ca_pem),
            path(&file)
        )
    };
    let orders = via("orders.token", ORDERS);
    assert_eq!(
        ids_issued(layout, &orders, &orders_ns, 1_000),
        1_000,
        "{engine}: before"
    );

    let tenant = grantid_authority::from_url(&via("tenant.token", TENANT)).unwrap();
    let held = tenant
        .acquire(&request(layout, &tenant_ns, 1, None, 0))
        .unwrap();
    let renewal = request(layout, &tenant_ns, 5, Some(held.worker), held.end);
    let held = tenant
        .acquire(&renewal)
        .unwrap_or_else(|e| panic!("{engine}: a scoped renewal within the high-water: {e:?}"));
    let last_tick = layout.timestamp_limit() - 1;
    let far = request(layout, &tenant_ns, 2, Some(held.worker), last_tick);
    let scoped_far = tenant.acquire(&far);
    let near = request(layout, &tenant_ns, 3, Some(held.worker), held.end + 1);
    let scoped_near = tenant.acquire(&near);
    let admin = grantid_authority::from_url(&via("admin.token", ADMIN)).unwrap();
    let far = request(layout, &tenant_ns, 4, Some(held.worker), last_tick);
    let unscoped_far = admin.acquire(&far);

    let after = ids_issued(layout, &orders, &orders_ns, 1_000);
    eprintln!("{engine}: IDs of another namespace after the claims: {after} of 1000");
    assert_not_evidence("a scoped claim from the last tick", scoped_far);
    assert_not_evidence("a scoped claim within the bound", scoped_near);
    assert_not_evidence("an unscoped claim from the last tick", unscoped_far);
    assert_eq!(after, 1_000, "{engine}: after");
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert_eq!(
        log.matches("event=loss_claim_refused").count(),
        3,
        "{engine}: {log}"
    );
    srv.kill().unwrap();
    srv.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn file() {
    let dir = scratch("hostile-file-state");
    let url = format!("file:{}", dir.join("state.json").display());
    one_tenant_cannot_stop_another("file", &url);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server's authority restricted to one datacenter: a scoped claim is
/// weighed against the datacenter's worker in the store, where the store
/// keeps it (datacenter 0: the worker values agree, the layouts do not).
#[test]
fn file_behind_a_datacenter() {
    let layout = Layout::default().with_datacenter_bits(2).unwrap();
    for datacenter in [0, 1] {
        let dir = scratch(&format!("hostile-dc-{datacenter}"));
        let url = format!(
            "file:{}?datacenter={datacenter}",
            dir.join("state.json").display()
        );
        claims_through_a_server("file", &url, layout, &["--datacenter-bits", "2"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn postgres_behind_a_datacenter() {
    if let Some(url) = service_url("GRANTID_TEST_POSTGRES_URL") {
        let layout = Layout::default().with_datacenter_bits(2).unwrap();
        let url = format!("{url}?datacenter=3");
        // The server's own namespace in the split (a shared store holds
        // `server-own` unsplit).
        let own = unique("server-dc");
        let args = ["--datacenter-bits", "2", "--namespace", &own];
        claims_through_a_server("postgres", &url, layout, &args);
    }
}

#[test]
fn static_with_a_state_file() {
    let dir = scratch("hostile-static-state");
    let url = format!("static:5?state={}", dir.join("static.json").display());
    one_tenant_cannot_stop_another("static", &url);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres() {
    if let Some(url) = service_url("GRANTID_TEST_POSTGRES_URL") {
        one_tenant_cannot_stop_another("postgres", &url);
    }
}

#[test]
fn redis() {
    if let Some(url) = service_url("GRANTID_TEST_REDIS_URL") {
        one_tenant_cannot_stop_another("redis", &url);
    }
}

#[test]
fn mysql() {
    if let Some(url) = service_url("GRANTID_TEST_MYSQL_URL") {
        one_tenant_cannot_stop_another("mysql", &url);
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd() {
    if let Some(url) = service_url("GRANTID_TEST_ETCD_URL") {
        one_tenant_cannot_stop_another("etcd", &url);
    }
}
