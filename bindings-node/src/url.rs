//! Authorities chosen by URL (`file:PATH`, `postgres://...`, `redis://...`,
//! `static:N`), opened by the reference authority crate.

use grantid::{Error, GrantSource};

/// Opens the authority a URL names. A malformed URL is `INVALID_ARGUMENT`;
/// an unreachable server shows up later, as `UNAVAILABLE` from the grant
/// calls. May block (connecting): call it off the JS thread.
pub fn open(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    grantid_authority::from_url(url)
}
