//! Fuzz harnesses for the core's parsers: `parse_id`, `Layout`,
//! `Grant::validate`, `PublicIds`. Random inputs under `cargo test`,
//! libFuzzer under `cargo bolero test` (see scripts/fuzz.sh).

use grantid::{ErrorKind, Grant, GrantRequest, Layout, PublicIds, parse_id};

#[test]
fn parse_id_text() {
    bolero::check!().for_each(|bytes: &[u8]| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        match parse_id(text) {
            Ok(id) => {
                assert!(id <= i64::MAX as u64);
                // Whatever parses prints back to an equal value.
                assert_eq!(parse_id(&id.to_string()).unwrap(), id);
                assert_eq!(parse_id(&format!("{id:#x}")).unwrap(), id);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{text:?}: {e}"),
        }
    });
}

#[test]
fn parse_id_numbers() {
    bolero::check!().with_type::<u64>().for_each(|&n| {
        let ok = n <= i64::MAX as u64;
        assert_eq!(parse_id(&n.to_string()).is_ok(), ok);
        assert_eq!(parse_id(&format!("0X{n:X}")).is_ok(), ok);
        assert!(parse_id(&format!(" {n}")).is_err());
        assert!(parse_id(&format!("+{n}")).is_err());
    });
}

#[test]
fn layout_new_encode_decode() {
    bolero::check!()
        .with_type::<(u8, u8, u8, u64, u64, u64, u64, u64, u64)>()
        .for_each(|&(t, w, s, epoch, tick, ts, worker, seq, id)| {
            let layout = match Layout::with_all(t, w, s, epoch, tick) {
                Ok(layout) => layout,
                Err(e) => return assert_eq!(e.kind(), ErrorKind::InvalidArgument),
            };
            assert!(layout.total_bits() <= 63);
            match layout.encode(ts, worker, seq) {
                Ok(encoded) => {
                    assert!(encoded <= i64::MAX as u64);
                    let d = layout.decode(encoded).unwrap();
                    assert_eq!((d.timestamp, d.worker, d.sequence), (ts, worker, seq));
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                    assert!(
                        ts >= layout.timestamp_limit()
                            || worker >= layout.worker_count()
                            || seq >= layout.sequence_count()
                    );
                }
            }
            match layout.decode(id) {
                Ok(d) => assert_eq!(
                    layout.encode(d.timestamp, d.worker, d.sequence).unwrap(),
                    id
                ),
                Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument),
            }
            let _ = layout.tick_at(epoch);
            let _ = layout.unix_ms_of(ts);
        });
}

#[test]
fn grant_validate() {
    bolero::check!()
        .with_type::<(
            u8,
            u8,
            u8,
            bool,
            u32,
            u64,
            u64,
            u64,
            u64,
            Option<u32>,
            u64,
            u64,
        )>()
        .for_each(
            |&(t, w, s, same_ns, gw, ginc, start, end, inc, rw, not_before, now)| {
                let Ok(layout) = Layout::new(t, w, s) else {
                    return;
                };
                let request = GrantRequest {
                    namespace: "ns".into(),
                    incarnation: inc & 3,
                    request_id: 1,
                    worker: rw,
                    not_before,
                    now,
                    duration: 1,
                    layout,
                };
                let grant = Grant {
                    namespace: if same_ns { "ns" } else { "other" }.into(),
                    worker: gw,
                    incarnation: ginc & 3,
                    grant_id: 1,
                    start,
                    end,
                };
                let rule = same_ns
                    && grant.incarnation == request.incarnation
                    && u64::from(gw) < layout.worker_count()
                    && rw.is_none_or(|w| w == gw)
                    && not_before <= start
                    && start < end
                    && end <= layout.timestamp_limit();
                assert_eq!(
                    grant.validate(&request).is_ok(),
                    rule,
                    "{grant:?} {request:?}"
                );
            },
        );
}

#[test]
fn public_ids_decode() {
    bolero::check!()
        .with_type::<([u8; 16], u64)>()
        .for_each(|(key, value)| {
            let ids = PublicIds::new(key).unwrap();
            match ids.decode(*value) {
                Ok(id) => assert_eq!(ids.encode(id).unwrap(), *value),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                    assert!(*value == 0 || *value > i64::MAX as u64);
                }
            }
        });
}

#[test]
fn public_ids_decode_str() {
    let ids = PublicIds::new(&[7u8; 16]).unwrap();
    bolero::check!().for_each(|bytes: &[u8]| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        match ids.decode_str(text) {
            Ok(id) => assert!(ids.encode_str(id).unwrap().eq_ignore_ascii_case(text)),
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{text:?}"),
        }
    });
}

#[test]
fn public_ids_key_text() {
    bolero::check!().for_each(|bytes: &[u8]| {
        if let Ok(text) = std::str::from_utf8(bytes)
            && let Err(e) = PublicIds::from_hex(text)
        {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
    });
}
