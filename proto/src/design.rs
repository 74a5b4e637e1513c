//! Between `hispeeddesign.idgen.v1` (the service design's file) and
//! `grantid.v1`. A design request is the `grantid.v1` request with its
//! namespace unset (the server's); a design response is the `grantid.v1`
//! response without the fields the design's file does not have.

use crate::{idgen_v1 as design, v1};

impl From<design::GenerateIdRequest> for v1::GenerateIdRequest {
    fn from(r: design::GenerateIdRequest) -> v1::GenerateIdRequest {
        v1::GenerateIdRequest {
            caller_service: r.caller_service,
            namespace: String::new(),
        }
    }
}

impl From<design::GenerateIdBatchRequest> for v1::GenerateIdBatchRequest {
    fn from(r: design::GenerateIdBatchRequest) -> v1::GenerateIdBatchRequest {
        v1::GenerateIdBatchRequest {
            count: r.count,
            caller_service: r.caller_service,
            namespace: String::new(),
        }
    }
}

impl From<v1::GenerateIdResponse> for design::GenerateIdResponse {
    fn from(r: v1::GenerateIdResponse) -> design::GenerateIdResponse {
        design::GenerateIdResponse {
            id: r.id,
            id_str: r.id_str,
            timestamp_ms: r.timestamp_ms,
            datacenter_id: r.datacenter_id,
            worker_id: r.worker_id,
        }
    }
}

impl From<v1::GenerateIdBatchResponse> for design::GenerateIdBatchResponse {
    fn from(r: v1::GenerateIdBatchResponse) -> design::GenerateIdBatchResponse {
        design::GenerateIdBatchResponse {
            ids: r.ids,
            ids_str: r.ids_str,
            epoch_offset_ms: r.epoch_offset_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each conversion gives what the wire gives: a message encoded as one
    //! package and decoded as the other carries the same fields, so the
    //! design's field numbers and types are `grantid.v1`'s.
    use prost::Message;

    use super::*;

    fn across<A: Message, B: Message + Default>(a: &A) -> B {
        B::decode(a.encode_to_vec().as_slice()).expect("decodes as the other package's message")
    }

    #[test]
    fn requests_mean_the_same_on_the_wire() {
        let one = design::GenerateIdRequest {
            caller_service: "orders".into(),
        };
        assert_eq!(across::<_, v1::GenerateIdRequest>(&one), one.clone().into());
        let batch = design::GenerateIdBatchRequest {
            count: 1000,
            caller_service: "ingest".into(),
        };
        let wire: v1::GenerateIdBatchRequest = across(&batch);
        assert_eq!(wire, batch.clone().into());
        assert_eq!((wire.count, wire.namespace.as_str()), (1000, ""));
    }

    #[test]
    fn responses_mean_the_same_on_the_wire() {
        let one = v1::GenerateIdResponse {
            id: 1 << 62,
            id_str: (1u64 << 62).to_string(),
            timestamp_ms: 1_767_225_600_123,
            datacenter_id: 3,
            worker_id: 17,
            namespace: "orders".into(),
        };
        let wire: design::GenerateIdResponse = across(&one);
        assert_eq!(wire, one.clone().into());
        assert_eq!(
            (wire.id, wire.datacenter_id, wire.worker_id),
            (1 << 62, 3, 17)
        );
        let batch = v1::GenerateIdBatchResponse {
            ids: vec![5, 6, i64::MAX],
            ids_str: vec!["5".into(), "6".into(), i64::MAX.to_string()],
            epoch_offset_ms: 1_767_225_600_000,
            namespace: "orders".into(),
            layout: Some(v1::Layout::default()),
        };
        let wire: design::GenerateIdBatchResponse = across(&batch);
        assert_eq!(wire, batch.clone().into());
        assert_eq!(wire.ids, [5, 6, i64::MAX]);
    }
}
