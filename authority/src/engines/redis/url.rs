//! The grammar of `redis://` and `rediss://` (docs/reference/redis.md).

use grantid::Error;

use crate::url::{GRANTID_OPTIONS, Options, Parts, TLS_OPTIONS, Target, strip_options};

/// The query options the Redis driver reads (redis-rs `protocol`, and `db`,
/// `user`, `pass` for `redis+unix:`); any other key is refused.
const DRIVER_OPTIONS: &[&str] = &["protocol", "db", "user", "pass"];

/// The target of a Redis URL; grantid's options go to `options`, its TLS
/// options ([`TLS_OPTIONS`], `rediss://` only) and the driver's stay.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    u.require_host()?;
    let tls = u.scheme == "rediss";
    // redis-rs's one fragment, `#insecure`, ends the URL (after the query).
    let (body, fragment) = match u.url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (u.url, None),
    };
    match fragment {
        None | Some("insecure") if tls => {}
        None => {}
        Some("insecure") => return Err(u.invalid("#insecure applies to rediss:// only")),
        Some(f) => {
            return Err(u.invalid(format!(
                "unknown fragment #{f} (rediss:// takes #insecure only)"
            )));
        }
    }
    let kept = strip_options(body, u.scheme, options)?;
    // The driver ignores query keys it does not know: a misspelled option
    // (timeout_msec=) would be dropped silently.
    if let Some((_, q)) = kept.split_once('?') {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let k = pair.split_once('=').map_or(pair, |(k, _)| k);
            if TLS_OPTIONS.contains(&k) {
                if !tls {
                    return Err(u.invalid(format!("{k} applies to rediss:// only (TLS)")));
                }
            } else if !DRIVER_OPTIONS.contains(&k) {
                return Err(u.invalid(format!(
                    "unknown option {k:?} (grantid: {}, {}; the Redis driver: {})",
                    GRANTID_OPTIONS.join(", "),
                    TLS_OPTIONS.join(", "),
                    DRIVER_OPTIONS.join(", ")
                )));
            }
        }
    }
    Ok(match fragment {
        Some(f) => Target::Redis(format!("{kept}#{f}")),
        None => Target::Redis(kept),
    })
}
