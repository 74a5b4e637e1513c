//! Compiles grantid/v1/grantid.proto with protox (a Rust protobuf compiler,
//! so no system `protoc` is needed) and generates the prost messages and the
//! tonic client and server, plus the encoded file descriptor set that
//! server reflection serves.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "grantid/v1/grantid.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("grantid_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
