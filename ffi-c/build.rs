//! Regenerates `include/grantid.h` with cbindgen when the `header` feature is
//! on. The header is committed; CI regenerates it into `GRANTID_HEADER_OUT`
//! and fails on any difference.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "header")]
    header::generate();
}

#[cfg(feature = "header")]
mod header {
    use std::path::PathBuf;

    pub fn generate() {
        println!("cargo:rerun-if-changed=src");
        println!("cargo:rerun-if-changed=cbindgen.toml");
        println!("cargo:rerun-if-env-changed=GRANTID_HEADER_OUT");
        let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        let out = std::env::var_os("GRANTID_HEADER_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate_dir.join("include").join("grantid.h"));
        let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
            .expect("ffi-c/cbindgen.toml is readable and valid");
        cbindgen::Builder::new()
            .with_crate(&crate_dir)
            .with_config(config)
            .generate()
            .expect("cbindgen can generate grantid.h")
            .write_to_file(out);
    }
}
