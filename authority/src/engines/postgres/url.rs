//! The grammar of `postgres://` and `postgresql://`: libpq's, for the
//! driver, less grantid's options (docs/reference/postgres.md).

use grantid::Error;

use crate::url::{Options, Parts, Target, strip_options};

/// The target of a PostgreSQL URL; grantid's options go to `options`, the
/// rest stays for the driver (which refuses what it does not know).
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    u.require_host()?;
    Ok(Target::Postgres(strip_options(u.url, u.scheme, options)?))
}
