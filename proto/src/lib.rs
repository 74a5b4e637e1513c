//! # grantid-proto
//!
//! The grantid gRPC protocol, `grantid.v1` (proto/grantid/v1/grantid.proto,
//! compiled at build time without a system `protoc`): the prost messages,
//! the tonic clients and servers of `IdGeneratorService` and `GrantService`,
//! the service design's `hispeeddesign.idgen.v1.IdGeneratorService`,
//! and conversions between the protocol's grant messages and the core's
//! [`grantid::Grant`] / [`grantid::GrantRequest`].
#![warn(missing_docs)]

/// The `grantid.v1` package.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("grantid.v1");
}

/// The `hispeeddesign.idgen.v1` package: the Snowflake service design's own
/// `IdGeneratorService` (proto/hispeeddesign/idgen/v1/id_generator.proto, as
/// published). Its messages carry the first fields of `grantid.v1`'s, with
/// the same numbers and types; [`design`] converts between them.
#[allow(missing_docs, clippy::all)]
pub mod idgen_v1 {
    tonic::include_proto!("hispeeddesign.idgen.v1");
}

/// The encoded `FileDescriptorSet` of grantid.proto and id_generator.proto,
/// for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/grantid_descriptor.bin"));

mod convert;
pub mod design;

pub use convert::{grant_from_proto, grant_request_from_proto, layout_from_proto};
