//! Authority URLs (`file:PATH`, `postgres://...`, `redis://...`,
//! `static:N`), opened by `grantid-authority`.

use grantid::{Error, ErrorKind, GrantSource};

/// Opens the grant source a URL names.
pub(crate) fn from_url(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    Err(Error::new(
        ErrorKind::InvalidArgument,
        format!("cannot open {url:?}: authority URLs are not available in this build"),
    ))
}
