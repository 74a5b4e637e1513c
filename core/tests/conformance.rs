//! Runs conformance/vectors.json, the file every binding runs too.

use grantid::{ErrorKind, Layout, parse_id};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read vectors.json"))
        .expect("parse vectors.json")
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn id(v: &Value) -> u64 {
    v["id"].as_str().expect("ids are strings").parse().unwrap()
}

fn kind(v: &Value) -> ErrorKind {
    ErrorKind::from_code(v["kind"].as_str().unwrap()).expect("a known kind")
}

fn layout_of(v: &Value) -> Result<Layout, grantid::Error> {
    let bits = |k: &str| u8::try_from(u(v, k)).expect("bits fit in u8");
    Layout::with_all(
        bits("timestamp_bits"),
        bits("worker_bits"),
        bits("sequence_bits"),
        u(v, "epoch_ms"),
        u(v, "tick_ms"),
    )?
    .with_datacenter_bits(bits("datacenter_bits"))
}

#[test]
fn encode_and_decode_vectors() {
    let doc = vectors();
    let layouts = doc["layouts"].as_array().unwrap();
    assert!(layouts.len() >= 5);
    let mut checked = 0;
    for l in layouts {
        let layout = layout_of(l).unwrap();
        for e in l["encode"].as_array().unwrap() {
            let (t, w, s) = (u(e, "timestamp"), u(e, "worker"), u(e, "sequence"));
            assert_eq!(layout.encode(t, w, s).unwrap(), id(e), "{} {e}", l["name"]);
            let d = layout.decode(id(e)).unwrap();
            assert_eq!((d.timestamp, d.worker, d.sequence), (t, w, s));
            assert_eq!(d.unix_ms, u(e, "unix_ms"));
            let (dc, dw) = (u(e, "datacenter"), u(e, "datacenter_worker"));
            assert_eq!((d.datacenter, d.datacenter_worker), (dc, dw), "{e}");
            assert_eq!(layout.worker_value(dc, dw).unwrap(), w);
            checked += 1;
        }
        for e in l["encode_invalid"].as_array().unwrap() {
            let err = layout
                .encode(u(e, "timestamp"), u(e, "worker"), u(e, "sequence"))
                .unwrap_err();
            assert_eq!(err.kind(), kind(e), "{e}");
        }
        for e in l["decode_invalid"].as_array().unwrap() {
            assert_eq!(layout.decode(id(e)).unwrap_err().kind(), kind(e), "{e}");
        }
    }
    assert!(checked >= 50, "only {checked} vectors");
    // The seed's 41 / 5 / 5 / 12 layout is among them.
    assert!(layouts.iter().any(|l| u(l, "datacenter_bits") == 5
        && u(l, "worker_bits") == 10
        && u(l, "timestamp_bits") == 41));
}

#[test]
fn invalid_layouts_are_refused_naming_the_field() {
    for v in vectors()["invalid_layouts"].as_array().unwrap() {
        let err = layout_of(v).unwrap_err();
        assert_eq!(err.kind(), kind(v), "{v}");
        let field = v["field"].as_str().unwrap();
        assert!(err.message().contains(field), "{err} should name {field}");
    }
}

#[test]
fn id_strings() {
    let doc = vectors();
    for v in doc["parse_valid"].as_array().unwrap() {
        assert_eq!(parse_id(v["text"].as_str().unwrap()).unwrap(), id(v));
    }
    for v in doc["parse_invalid"].as_array().unwrap() {
        let text = v.as_str().unwrap();
        assert_eq!(
            parse_id(text).unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "{text:?}"
        );
    }
}
