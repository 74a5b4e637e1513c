//! Between the protocol's messages and the core's types. Reading a message
//! checks every field: a missing layout, a width that does not fit, a bad
//! layout are `InvalidArgument` errors naming the field.

use grantid::{Error, ErrorKind, Grant, GrantRequest, Layout};

use crate::v1;

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, message)
}

fn width(name: &str, bits: u32) -> Result<u8, Error> {
    u8::try_from(bits).map_err(|_| invalid(format!("layout.{name} = {bits} is too large")))
}

impl From<&Layout> for v1::Layout {
    fn from(l: &Layout) -> v1::Layout {
        v1::Layout {
            timestamp_bits: l.timestamp_bits().into(),
            worker_bits: l.worker_bits().into(),
            sequence_bits: l.sequence_bits().into(),
            epoch_ms: l.epoch_ms(),
            tick_ms: l.tick_ms(),
            datacenter_bits: l.datacenter_bits().into(),
            split_bits: l.split_bits().into(),
        }
    }
}

/// The core layout of a protocol layout (validated like any layout).
pub fn layout_from_proto(l: &v1::Layout) -> Result<Layout, Error> {
    if l.split_bits != 0 {
        if l.datacenter_bits != 0 {
            return Err(invalid(
                "layout.split_bits is set: layout.datacenter_bits must be 0".to_owned(),
            ));
        }
        return Layout::registered(
            width("timestamp_bits", l.timestamp_bits)?,
            width("worker_bits", l.worker_bits)?,
            width("sequence_bits", l.sequence_bits)?,
            l.epoch_ms,
            l.tick_ms,
            width("split_bits", l.split_bits)?,
        );
    }
    Layout::with_all(
        width("timestamp_bits", l.timestamp_bits)?,
        width("worker_bits", l.worker_bits)?,
        width("sequence_bits", l.sequence_bits)?,
        l.epoch_ms,
        l.tick_ms,
    )?
    .with_datacenter_bits(width("datacenter_bits", l.datacenter_bits)?)
}

impl From<&GrantRequest> for v1::GrantRequest {
    fn from(r: &GrantRequest) -> v1::GrantRequest {
        v1::GrantRequest {
            namespace: r.namespace.clone(),
            incarnation: r.incarnation,
            request_id: r.request_id,
            worker: r.worker,
            not_before: r.not_before,
            now: r.now,
            duration: r.duration,
            layout: Some((&r.layout).into()),
        }
    }
}

/// The core request of a protocol request: the namespace must be set, the
/// layout present and valid, the duration at least 1.
pub fn grant_request_from_proto(r: &v1::GrantRequest) -> Result<GrantRequest, Error> {
    if r.namespace.is_empty() {
        return Err(invalid("request.namespace is empty".into()));
    }
    let layout = r
        .layout
        .as_ref()
        .ok_or_else(|| invalid("request.layout is missing".into()))?;
    let layout = layout_from_proto(layout)?;
    if r.duration == 0 {
        return Err(invalid("request.duration must be at least 1".into()));
    }
    Ok(GrantRequest {
        namespace: r.namespace.clone(),
        incarnation: r.incarnation,
        request_id: r.request_id,
        worker: r.worker,
        not_before: r.not_before,
        now: r.now,
        duration: r.duration,
        layout,
    })
}

impl From<&Grant> for v1::Grant {
    fn from(g: &Grant) -> v1::Grant {
        v1::Grant {
            namespace: g.namespace.clone(),
            worker: g.worker,
            incarnation: g.incarnation,
            grant_id: g.grant_id,
            start: g.start,
            end: g.end,
        }
    }
}

/// The core grant of a protocol grant (its fields are checked against the
/// request by [`Grant::validate`], by the generator that receives it).
pub fn grant_from_proto(g: &v1::Grant) -> Grant {
    Grant {
        namespace: g.namespace.clone(),
        worker: g.worker,
        incarnation: g.incarnation,
        grant_id: g.grant_id,
        start: g.start,
        end: g.end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips() {
        let request = GrantRequest {
            namespace: "ns".into(),
            incarnation: u64::MAX,
            request_id: 9,
            worker: Some(3),
            not_before: 10,
            now: 11,
            duration: 12,
            layout: Layout::with_all(30, 5, 8, 1_000, 2)
                .unwrap()
                .with_datacenter_bits(2)
                .unwrap(),
        };
        let wire = v1::GrantRequest::from(&request);
        assert_eq!(grant_request_from_proto(&wire).unwrap(), request);
        // One datacenter's part (a `grpc://...?datacenter=N` client): the
        // split travels, so the server's store registers it.
        let part = GrantRequest {
            layout: request.layout.datacenter_part().unwrap(),
            ..request.clone()
        };
        let wire = v1::GrantRequest::from(&part);
        let back = grant_request_from_proto(&wire).unwrap();
        assert_eq!(back.layout.split_bits(), 2);
        assert_eq!(back, part);
        let grant = Grant {
            namespace: "ns".into(),
            worker: 3,
            incarnation: u64::MAX,
            grant_id: 4,
            start: 10,
            end: 22,
        };
        assert_eq!(grant_from_proto(&v1::Grant::from(&grant)), grant);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let good = v1::GrantRequest {
            namespace: "ns".into(),
            duration: 5,
            layout: Some((&Layout::default()).into()),
            ..Default::default()
        };
        assert!(grant_request_from_proto(&good).is_ok());
        let cases = [
            (
                v1::GrantRequest {
                    namespace: String::new(),
                    ..good.clone()
                },
                "namespace",
            ),
            (
                v1::GrantRequest {
                    layout: None,
                    ..good.clone()
                },
                "layout is missing",
            ),
            (
                v1::GrantRequest {
                    duration: 0,
                    ..good.clone()
                },
                "duration",
            ),
            (
                v1::GrantRequest {
                    layout: Some(v1::Layout {
                        worker_bits: 300,
                        ..good.layout.unwrap()
                    }),
                    ..good.clone()
                },
                "worker_bits = 300",
            ),
            (
                v1::GrantRequest {
                    layout: Some(v1::Layout {
                        timestamp_bits: 60,
                        ..good.layout.unwrap()
                    }),
                    ..good.clone()
                },
                "63",
            ),
            (
                v1::GrantRequest {
                    layout: Some(v1::Layout {
                        datacenter_bits: 11,
                        ..good.layout.unwrap()
                    }),
                    ..good.clone()
                },
                "datacenter_bits is 11",
            ),
            (
                v1::GrantRequest {
                    layout: Some(v1::Layout {
                        split_bits: 1,
                        datacenter_bits: 1,
                        ..good.layout.unwrap()
                    }),
                    ..good.clone()
                },
                "split_bits",
            ),
        ];
        for (request, needle) in cases {
            let e = grant_request_from_proto(&request).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(needle), "{e} lacks {needle}");
        }
    }
}
