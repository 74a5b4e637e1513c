//! The grammar of `etcd://HOST:PORT[,HOST:PORT...]` and `etcds://...`
//! (docs/reference/etcd.md).

use grantid::Error;

use crate::url::{Options, Parts, TLS_OPTIONS, Target, TlsFiles, split_query, take_options};

/// The target of an etcd URL: its endpoints and, for `etcds://`, the PEM
/// files of [`TLS_OPTIONS`] (`%XX` decoded); grantid's options go to
/// `options`.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    let tls = u.scheme == "etcds";
    let addrs = u.rest.strip_prefix("//").unwrap_or_default();
    let (addrs, query) = split_query(addrs);
    let mut files = TlsFiles::default();
    for (k, v) in take_options(u.url, u.scheme, query, options, TLS_OPTIONS)? {
        if !tls {
            return Err(u.invalid(format!("{k} applies to etcds:// only (TLS)")));
        }
        let v = percent_encoding::percent_decode_str(&v)
            .decode_utf8_lossy()
            .into_owned();
        if v.is_empty() {
            return Err(u.invalid(format!("{k}= needs the path of a PEM file")));
        }
        *match k.as_str() {
            "tls_ca" => &mut files.ca,
            "tls_cert" => &mut files.cert,
            _ => &mut files.key,
        } = Some(v);
    }
    let endpoints: Vec<String> = addrs.split(',').map(str::to_owned).collect();
    for e in &endpoints {
        let ok = e.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok()
        });
        if !ok {
            return Err(u.invalid(format!(
                "endpoint {e:?}: expected {}://HOST:PORT[,HOST:PORT...]",
                u.scheme
            )));
        }
    }
    Ok(if tls {
        Target::Etcds(endpoints, files)
    } else {
        Target::Etcd(endpoints)
    })
}
