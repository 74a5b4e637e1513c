//! Fuzz harnesses for the gRPC boundary of grantid-server: protobuf
//! decoding (prost) of every request and answer message from arbitrary
//! bytes, then the conversion the services apply to a request.

use grantid::ErrorKind;
use grantid_proto::v1::{
    AcquireRequest, AcquireResponse, GenerateIdBatchRequest, GenerateIdRequest, ReleaseRequest,
};
use grantid_proto::{grant_from_proto, grant_request_from_proto, layout_from_proto};
use prost::Message;

/// Decodes `bytes` as `M`: a message or a `DecodeError`, never a panic; a
/// decoded message encodes and decodes back to itself.
fn decode<M: Message + Default + PartialEq + std::fmt::Debug>(bytes: &[u8]) -> Option<M> {
    let message = M::decode(bytes).ok()?;
    assert_eq!(
        M::decode(message.encode_to_vec().as_slice()).unwrap(),
        message
    );
    Some(message)
}

#[test]
fn grpc_acquire_request() {
    bolero::check!().for_each(|bytes: &[u8]| {
        let Some(r) = decode::<AcquireRequest>(bytes) else {
            return;
        };
        let Some(proto) = r.request.as_ref() else {
            return;
        };
        match grant_request_from_proto(proto) {
            Ok(request) => {
                assert!(!request.namespace.is_empty() && request.duration >= 1);
                assert_eq!(grantid_proto::v1::GrantRequest::from(&request), *proto);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{proto:?}"),
        }
        if let Some(layout) = proto.layout.as_ref()
            && let Err(e) = layout_from_proto(layout)
        {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
    });
}

#[test]
fn grpc_release_request_and_answers() {
    bolero::check!().for_each(|bytes: &[u8]| {
        if let Some(r) = decode::<ReleaseRequest>(bytes)
            && let Some(g) = r.grant.as_ref()
        {
            assert_eq!(grantid_proto::v1::Grant::from(&grant_from_proto(g)), *g);
        }
        let _ = decode::<AcquireResponse>(bytes);
        let _ = decode::<GenerateIdRequest>(bytes);
        let _ = decode::<GenerateIdBatchRequest>(bytes);
    });
}
