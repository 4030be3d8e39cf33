//! The pieces of an etcd transaction the store builds (comparisons on a
//! key's revisions; put, get and delete of one key) and the readers of
//! its responses.

use super::client::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, RequestOp, TxnResponse, compare, request_op, response_op,
};

pub(super) use compare::CompareResult;

/// Compares `key`'s create revision (0 while it does not exist).
pub(super) fn create_revision(key: &str, result: CompareResult, revision: i64) -> Compare {
    Compare {
        result: result.into(),
        target: compare::CompareTarget::Create.into(),
        key: key.as_bytes().to_vec(),
        target_union: Some(compare::TargetUnion::CreateRevision(revision)),
        range_end: Vec::new(),
    }
}

/// Compares `key`'s last modification's revision.
pub(super) fn mod_revision(key: &str, result: CompareResult, revision: i64) -> Compare {
    Compare {
        result: result.into(),
        target: compare::CompareTarget::Mod.into(),
        key: key.as_bytes().to_vec(),
        target_union: Some(compare::TargetUnion::ModRevision(revision)),
        range_end: Vec::new(),
    }
}

/// Writes `value` at `key`; with `prev_kv`, the response carries what was there.
pub(super) fn put(key: &str, value: &[u8], prev_kv: bool) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            lease: 0,
            prev_kv,
        })),
    }
}

/// Reads `key`.
pub(super) fn get(key: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: key.as_bytes().to_vec(),
            ..RangeRequest::default()
        })),
    }
}

/// Deletes `key`, answering with its last value.
pub(super) fn delete(key: &str) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(
            DeleteRangeRequest {
                key: key.as_bytes().to_vec(),
                range_end: Vec::new(),
                prev_kv: true,
            },
        )),
    }
}

/// The revision a transaction was applied at.
pub(super) fn revision_of(response: &TxnResponse) -> i64 {
    response.header.as_ref().map_or(0, |h| h.revision)
}

/// The first read among a transaction's responses.
pub(super) fn response_get(response: &TxnResponse) -> Option<&RangeResponse> {
    response.responses.iter().find_map(|r| match &r.response {
        Some(response_op::Response::ResponseRange(g)) => Some(g),
        _ => None,
    })
}

/// The first write among a transaction's responses.
pub(super) fn response_put(response: &TxnResponse) -> Option<&PutResponse> {
    response.responses.iter().find_map(|r| match &r.response {
        Some(response_op::Response::ResponsePut(p)) => Some(p),
        _ => None,
    })
}

/// The first deletion among a transaction's responses.
pub(super) fn response_delete(response: &TxnResponse) -> Option<&DeleteRangeResponse> {
    response.responses.iter().find_map(|r| match &r.response {
        Some(response_op::Response::ResponseDeleteRange(d)) => Some(d),
        _ => None,
    })
}
