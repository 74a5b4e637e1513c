//! The engines, one folder each: its URL's target, its store protocol and
//! its [`crate::Authority`]. What they share is below them (the kernel:
//! `kernel.rs`, `url.rs`, `tls.rs`, `blocking.rs`, `answer.rs`,
//! `protocol.rs`, the local files' `lockfile.rs` and `sidecar.rs`); the
//! registry (`registry.rs`) is the one module that knows them all.

#[cfg(feature = "dynamodb")]
pub(crate) mod dynamodb;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "file")]
pub(crate) mod file;
#[cfg(feature = "grpc")]
pub(crate) mod grpc;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "static")]
pub(crate) mod static_worker;
