//! # grantid-proto
//!
//! The grantid gRPC protocol, `grantid.v1` (proto/grantid/v1/grantid.proto,
//! compiled at build time without a system `protoc`): the prost messages,
//! the tonic clients and servers of `IdGeneratorService` and `GrantService`,
//! and conversions between the protocol's grant messages and the core's
//! [`grantid::Grant`] / [`grantid::GrantRequest`].
#![warn(missing_docs)]

/// The `grantid.v1` package.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("grantid.v1");
}

/// The encoded `FileDescriptorSet` of grantid.proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/grantid_descriptor.bin"));

mod convert;

pub use convert::{grant_from_proto, grant_request_from_proto, layout_from_proto};
