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
//! * **ID semantics** all come from the core crate `grantid`: this crate only
//!   converts types and errors.

mod callback;
mod generator;
mod guard;
mod layout;
mod options;
mod public;
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
    grantid_stats,
};
pub use guard::grantid_last_error_message;
pub use layout::{
    grantid_decoded, grantid_layout, grantid_layout_decode, grantid_layout_default,
    grantid_layout_encode, grantid_layout_new, grantid_parse_id,
};
pub use options::{
    GRANTID_FORK_CLOSE, GRANTID_FORK_REACTIVATE, grantid_generator_options,
    grantid_generator_options_default,
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

/// The library's version (`"0.1.0"`): a static string, never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn grantid_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
