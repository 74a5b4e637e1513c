//! Every read the DynamoDB engine makes is consistent. No implementation
//! of the API that runs here models a stale read, so this test records
//! what the engine sends: a proxy between the engine and moto reads each
//! request's operation (`X-Amz-Target`) and body while the engine grants,
//! renews, releases, reports and fences. Each `GetItem`, `Query` and
//! `Scan` must ask `ConsistentRead`; `TransactGetItems` is serializable by
//! itself; no other read is allowed.
#![cfg(feature = "dynamodb")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use grantid::{Generator, Layout};
use grantid_authority::{from_url, open};

/// (operation, body) of every request the proxy passed on.
type Log = Arc<Mutex<Vec<(String, String)>>>;

/// Passes one client connection on to `upstream`, recording its requests.
fn relay(client: TcpStream, upstream: String, log: Log) {
    let server = TcpStream::connect(upstream).unwrap();
    let mut back = server.try_clone().unwrap();
    let mut to_client = client.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut back, &mut to_client);
    });
    let mut reader = BufReader::new(client);
    let mut server = server;
    loop {
        let mut head = Vec::new();
        let mut length = 0;
        let mut target = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if lower.starts_with("x-amz-target:") {
                target = line.split_once(':').unwrap().1.trim().to_owned();
            }
            head.extend_from_slice(line.as_bytes());
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let op = target.rsplit('.').next().unwrap_or_default().to_owned();
        log.lock()
            .unwrap()
            .push((op, String::from_utf8_lossy(&body).into_owned()));
        if server.write_all(&head).is_err() || server.write_all(&body).is_err() {
            return;
        }
    }
}

#[test]
fn every_read_is_consistent() {
    let Some(endpoint) = common::dynamodb_endpoint() else {
        return;
    };
    let upstream = endpoint.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let log: Log = Arc::default();
    {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, log) = (upstream.clone(), Arc::clone(&log));
                std::thread::spawn(move || relay(client, upstream, log));
            }
        });
    }
    let url = format!(
        "dynamodb://grantid_reads_{:x}?region=us-east-1&endpoint=http://127.0.0.1:{port}",
        common::random() >> 16
    );
    let authority = open(&url).unwrap();
    authority.init_new_deployment().unwrap();
    // First grants, renewals and releases of two generators.
    let layout = Layout::new(41, 3, 8).unwrap();
    let generators: Vec<Generator> = (0..2)
        .map(|_| {
            Generator::builder(layout, "reads", from_url(&url).unwrap())
                .grant_duration_ms(100)
                .horizon_ms(300)
                .start()
                .unwrap()
        })
        .collect();
    for g in &generators {
        g.next_ids(1_000).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    for g in generators {
        g.close();
    }
    assert_eq!(authority.status(Some("reads")).unwrap().len(), 2);
    assert!(!authority.status(None).unwrap().is_empty());
    authority.fence().unwrap();
    authority.lift_quarantine().unwrap();

    let log = log.lock().unwrap();
    let ops: std::collections::BTreeSet<&str> = log.iter().map(|(op, _)| op.as_str()).collect();
    for wanted in [
        "TransactGetItems",
        "Query",
        "Scan",
        "TransactWriteItems",
        "DescribeTable",
    ] {
        assert!(ops.contains(wanted), "no {wanted} among {ops:?}");
    }
    for (op, body) in log.iter() {
        match op.as_str() {
            "GetItem" | "Query" | "Scan" | "BatchGetItem" => assert!(
                body.contains("\"ConsistentRead\":true"),
                "a read that may be stale: {op} {body}"
            ),
            "TransactGetItems" | "TransactWriteItems" | "DescribeTable" | "CreateTable" => {}
            other => panic!("an operation the engine should not send: {other} {body}"),
        }
    }
    eprintln!("{} requests: {ops:?}", log.len());
}
