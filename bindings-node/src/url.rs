//! Authorities chosen by URL (`file:PATH`, `postgres://...`, `redis://...`,
//! `static:N`), opened by the reference authority crate.

use grantid::{Error, ErrorKind, GrantSource};

/// Opens the authority a URL names.
pub fn open(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    Err(Error::new(
        ErrorKind::InvalidArgument,
        format!("authority URLs are not supported by this build: {url:?}"),
    ))
}
