//! Node.js binding of grantid (napi-rs).
//!
//! ```js
//! const { Generator } = require('grantid')
//! const gen = await Generator.start({ grantSource: 'file:/var/lib/grantid/state', namespace: 'orders-v1' })
//! const id = gen.nextId()          // '1234567890123456789' (a string, never a number)
//! ```
//!
//! * IDs cross as decimal strings (or bigints on request): 2^53 < 2^63.
//! * Errors are `Error`s with a stable `code` (`grantid::ErrorKind::code()`),
//!   made in one place, [`errors::map_error`].
//! * A JS grant source is called on the JS thread through a
//!   `ThreadsafeFunction` from the core's renewal thread, which waits for
//!   the answer with a timeout.
//! * The binding converts types and errors; ID semantics live in the core.

#![deny(clippy::undocumented_unsafe_blocks)]
// napi's ThreadsafeFunction, ClassInstance and the exported object types
// carry JS handles without `Debug`.
#![allow(missing_debug_implementations)]
// Under `cargo test` the `#[napi]` exports are not registered, so they look
// unused.
#![cfg_attr(test, allow(dead_code))]

mod clock;
mod convert;
mod errors;
mod events;
mod functions;
mod generator;
mod hot;
mod options;
mod protocol;
mod public;
mod source;
mod url;
