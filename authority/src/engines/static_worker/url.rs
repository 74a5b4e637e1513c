//! The grammar of `static:N` and `static:env:VAR`, with `?state=PATH`
//! (docs/AUTHORITIES.md, "static").

use grantid::Error;

use crate::url::{Options, Parts, Target, local_path, split_query, take_options, trailing_ordinal};

/// The target of a `static:` URL; grantid's options go to `options`. The
/// variable named by `static:env:VAR` is read here.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    let (spec, query) = split_query(u.rest);
    let mut state = None;
    for (k, v) in take_options(u.url, u.scheme, query, options, &["state"])? {
        if k == "state" {
            if v.is_empty() {
                return Err(u.invalid("state= needs a path"));
            }
            state = Some(local_path(u.url, "state=", &v)?);
        }
    }
    let worker = if let Some(var) = spec.strip_prefix("env:") {
        if var.is_empty() {
            return Err(u.invalid("static:env: needs a variable name"));
        }
        let value = std::env::var(var)
            .map_err(|_| u.invalid(format!("environment variable {var} is not set")))?;
        trailing_ordinal(&value).ok_or_else(|| {
            u.invalid(format!(
                "{var}={value:?} does not end in a worker number (like web-3)"
            ))
        })?
    } else {
        if spec.is_empty() || !spec.chars().all(|c| c.is_ascii_digit()) {
            return Err(u.invalid(format!(
                "{spec:?} is not a worker number (static:N or static:env:VAR)"
            )));
        }
        spec.parse()
            .map_err(|_| u.invalid(format!("worker {spec} does not fit in 32 bits")))?
    };
    Ok(Target::Static { worker, state })
}
