//! Compiles the two protocols with protox (a Rust protobuf compiler, so no
//! system `protoc` is needed) and generates the prost messages and the tonic
//! clients and servers, plus the encoded file descriptor set that server
//! reflection serves:
//!
//! * `grantid/v1/grantid.proto`, package `grantid.v1`;
//! * `hispeeddesign/idgen/v1/id_generator.proto`, package
//!   `hispeeddesign.idgen.v1`: the service design's own file, kept as it
//!   was published, so that its clients work unchanged.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "grantid/v1/grantid.proto",
        "hispeeddesign/idgen/v1/id_generator.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile(protos, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("grantid_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
