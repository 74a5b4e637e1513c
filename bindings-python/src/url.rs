//! Authority URLs (`file:PATH`, `postgres://...`, `redis://...`,
//! `static:N`), opened by `grantid-authority`, and the texts of its SQL
//! function and Lua script for the pure-Python helpers.

use grantid::{Error, GrantSource};
use pyo3::prelude::*;

/// Opens the grant source a URL names. Blocks at most for the URL's
/// `timeout_ms`; call it without the GIL.
pub(crate) fn from_url(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    grantid_authority::from_url(url)
}

/// Adds the authority texts and defaults the helpers in
/// `grantid.authorities` need (one source: the authority crate).
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("POSTGRES_SQL", grantid_authority::SQL_V1)?;
    m.add(
        "POSTGRES_SCHEMA_VERSION",
        grantid_authority::POSTGRES_SCHEMA_VERSION,
    )?;
    m.add(
        "POSTGRES_SCHEMA_CHECKS",
        grantid_authority::postgres_schema_checks().to_vec(),
    )?;
    m.add(
        "POSTGRES_SCHEMA_LOCK",
        grantid_authority::POSTGRES_SCHEMA_LOCK,
    )?;
    m.add("REDIS_LUA", grantid_authority::LUA_V1)?;
    m.add(
        "DEFAULT_LEASE_GRACE_MS",
        grantid_authority::DEFAULT_LEASE_GRACE_MS,
    )?;
    Ok(())
}
