//! The committed C header, `include/grantid.h`, is what cbindgen generates
//! from the sources now. After a change to the C ABI, regenerate it with
//!
//! ```sh
//! GRANTID_BLESS_HEADER=1 cargo test -p grantid-ffi --test header
//! ```

use std::path::Path;

#[test]
fn committed_header_is_what_cbindgen_generates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("ffi-c/cbindgen.toml is readable and valid");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let path = dir.join("include").join("grantid.h");
    if std::env::var_os("GRANTID_BLESS_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("include/grantid.h is writable");
        return;
    }
    let committed = std::fs::read(&path).expect("include/grantid.h is readable");
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let committed = String::from_utf8(committed).expect("the header is UTF-8");
    if generated != committed {
        let first = generated
            .lines()
            .zip(committed.lines())
            .position(|(g, c)| g != c)
            .unwrap_or_else(|| generated.lines().count().min(committed.lines().count()));
        panic!(
            "ffi-c/include/grantid.h differs from what cbindgen generates, from line {}: \
             regenerate it with GRANTID_BLESS_HEADER=1 cargo test -p grantid-ffi --test header",
            first + 1
        );
    }
}
