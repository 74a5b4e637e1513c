//! # grantid-ffi: the C ABI of grantid
//!
//! The header `include/grantid.h` is generated from this crate by cbindgen
//! (feature `header`) and committed. See `README.md` for the link line.
//!
//! ```c
//! grantid_generator_options o;
//! grantid_generator_options_default(&o);
//! o.namespace_ = "orders-v1";
//! o.grant = my_grant;          /* the authority */
//! o.user_data = my_state;
//! grantid_generator *gen;
//! if (grantid_generator_new(&o, &gen) != GRANTID_OK)
//!     fprintf(stderr, "%s\n", grantid_last_error_message());
//! uint64_t id;
//! grantid_next_id(gen, &id);
//! grantid_generator_free(gen);
//! ```
//!
//! ## Properties
//!
//! * **Every call returns a `grantid_status`** (stable numbers, append-only),
//!   except `grantid_status_message`, `grantid_last_error_message`,
//!   `grantid_version` (strings) and `grantid_generator_free` (void).
//!   Outputs are the last parameters; nothing is written on failure.
//! * **Errors**: `grantid_status_message(status)` is a static description;
//!   `grantid_last_error_message()` is the detailed message of the calling
//!   thread's last failure.
//! * **NULL** for any required pointer is `GRANTID_NULL_ARGUMENT`.
//! * **No unwinding into C**: every export runs inside a panic boundary; a
//!   panic is `GRANTID_PANIC`.
//! * **Thread-safe**: a generator may be used from many threads at once.
//! * **Callbacks** run on the generator's renewal thread (the grant callback
//!   and `on_lease_lost`) or on the thread that closes it (`release`); never
//!   on the `grantid_next_id` path.
//! * **Events**: `grantid_set_log_callback` delivers the core's events
//!   (`event=grant`, `event=lease_lost`, ...) to a C function, process-wide
//!   (see `logging.rs` for its threading).
//! * **ID semantics** all come from the core crate `grantid`: this crate only
//!   converts types and errors.

mod callback;
mod generator;
mod guard;
mod layout;
mod logging;
mod options;
mod public;
mod sized;
mod stats;
mod status;

use std::ffi::c_char;

pub use callback::{
    GRANTID_GRANT_LOST, GRANTID_GRANT_OK, GRANTID_GRANT_UNAVAILABLE, GRANTID_REASON_LEN,
    grantid_free_fn, grantid_grant, grantid_grant_fn, grantid_grant_request, grantid_lease_lost_fn,
    grantid_release_fn,
};
#[cfg(feature = "authority")]
pub use generator::grantid_generator_new_url;
pub use generator::{
    grantid_decode, grantid_generator, grantid_generator_close, grantid_generator_free,
    grantid_generator_layout, grantid_generator_new, grantid_next_id, grantid_next_ids,
    grantid_stats_sized,
};
pub use guard::grantid_last_error_message;
pub use layout::{
    grantid_decoded, grantid_layout, grantid_layout_decode, grantid_layout_default,
    grantid_layout_encode, grantid_layout_new, grantid_parse_id,
};
pub use logging::{
    GRANTID_LOG_DEBUG, GRANTID_LOG_ERROR, GRANTID_LOG_INFO, GRANTID_LOG_TRACE, GRANTID_LOG_WARN,
    grantid_log_fn, grantid_set_log_callback,
};
pub use options::{
    GRANTID_FORK_CLOSE, GRANTID_FORK_REACTIVATE, grantid_generator_options,
    grantid_generator_options_init,
};
pub use public::{
    GRANTID_PUBLIC_ID_KEY_LEN, GRANTID_PUBLIC_ID_TEXT_LEN, grantid_public_ids,
    grantid_public_ids_cipher_decrypt, grantid_public_ids_cipher_encrypt,
    grantid_public_ids_decode, grantid_public_ids_decode_str, grantid_public_ids_encode,
    grantid_public_ids_encode_str, grantid_public_ids_free, grantid_public_ids_generate_key,
    grantid_public_ids_new, grantid_public_ids_new_hex,
};
pub use stats::grantid_generator_stats;
pub use status::{grantid_status, grantid_status_message};

/// The header's major version (`GRANTID_VERSION` is the whole version as a
/// string, made from these three in the header; `grantid_version()` is the
/// linked library's).
pub const GRANTID_VERSION_MAJOR: u32 = 0;
/// The header's minor version.
pub const GRANTID_VERSION_MINOR: u32 = 1;
/// The header's patch version.
pub const GRANTID_VERSION_PATCH: u32 = 0;
/// The header's version as one number, major * 1000000 + minor * 1000 +
/// patch, for `#if GRANTID_VERSION_NUMBER >= 1002000`. Compare with
/// `grantid_version_number()` at run time.
pub const GRANTID_VERSION_NUMBER: u32 =
    GRANTID_VERSION_MAJOR * 1_000_000 + GRANTID_VERSION_MINOR * 1_000 + GRANTID_VERSION_PATCH;

/// The library's version (`"0.1.0"`): a static string, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

/// The library's version as one number (`GRANTID_VERSION_NUMBER` of the
/// header it was built with): a program can check at start-up that the
/// library it runs with is at least the one it was compiled against.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_version_number() -> u32 {
    GRANTID_VERSION_NUMBER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_constants_match_the_package() {
        let part = |s: &str| s.parse::<u32>().unwrap();
        assert_eq!(
            (
                GRANTID_VERSION_MAJOR,
                GRANTID_VERSION_MINOR,
                GRANTID_VERSION_PATCH
            ),
            (
                part(env!("CARGO_PKG_VERSION_MAJOR")),
                part(env!("CARGO_PKG_VERSION_MINOR")),
                part(env!("CARGO_PKG_VERSION_PATCH"))
            )
        );
    }

    #[test]
    fn first_versions_are_this_versions_sizes() {
        // 0.1.0 is the first version with struct_size. When a field is
        // appended, these become `<`: FIRST_SIZE never changes.
        use crate::sized::Growable;
        // The options grew (has_datacenter, datacenter).
        assert!(
            grantid_generator_options::FIRST_SIZE
                < std::mem::size_of::<grantid_generator_options>()
        );
        assert_eq!(
            grantid_generator_stats::FIRST_SIZE,
            std::mem::size_of::<grantid_generator_stats>()
        );
    }
}
