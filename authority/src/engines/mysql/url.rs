//! The grammar of `mysql://` and `mariadb://` (docs/reference/mysql.md).

use grantid::Error;

use crate::url::{Options, Parts, Target, strip_options};

/// The target of a MySQL URL, as `mysql://`; grantid's options go to
/// `options`, the rest stays for the driver.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    u.require_host()?;
    let kept = strip_options(u.url, u.scheme, options)?;
    Ok(Target::Mysql(format!(
        "mysql:{}",
        &kept[u.scheme.len() + 1..]
    )))
}
