//! The grammar of `grpc://HOST:PORT` and `grpcs://HOST:PORT[?OPTIONS]`
//! (docs/reference/grpc.md).

use grantid::Error;

use crate::url::{Options, Parts, Target, split_query, take_options};

/// grantid's options of `grpcs://`: the PEM files of [`crate::url::TLS_OPTIONS`] and a
/// file holding the bearer token, read by `Secure::from_options`.
pub(crate) const GRPCS_OPTIONS: &[&str] = &["tls_ca", "tls_cert", "tls_key", "token_file"];

/// The target of a gRPC URL; grantid's options go to `options`, those of
/// `grpcs://` stay with the address, `?`-separated.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    let addr = u.rest.strip_prefix("//").unwrap_or_default();
    let (addr, query) = split_query(addr);
    let tls = take_options(u.url, u.scheme, query, options, GRPCS_OPTIONS)?;
    if addr.is_empty() {
        return Err(u.invalid(format!("expected {}://HOST:PORT", u.scheme)));
    }
    if u.scheme == "grpc" {
        if let Some((k, _)) = tls.first() {
            return Err(u.invalid(format!(
                "{k} applies to grpcs:// only (TLS; a token is never sent in the clear)"
            )));
        }
        return Ok(Target::Grpc(addr.to_owned()));
    }
    let kept: Vec<String> = tls.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(Target::Grpcs(if kept.is_empty() {
        addr.to_owned()
    } else {
        format!("{addr}?{}", kept.join("&"))
    }))
}
