//! The grammar of `file:PATH`, `file:`, `file:///PATH` and
//! `file://localhost/PATH` (RFC 8089); docs/reference/file.md.

use grantid::Error;

use crate::url::{
    Options, Parts, Target, default_file_path, local_path, split_query, take_options,
};

/// The target of a `file:` URL; grantid's options go to `options`.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    let (path, query) = split_query(u.rest);
    take_options(u.url, u.scheme, query, options, &[])?;
    let path = match path.strip_prefix("//") {
        Some(after) => {
            let (host, p) = after.split_at(after.find('/').unwrap_or(after.len()));
            if !host.is_empty() && host != "localhost" {
                return Err(u.invalid(format!(
                    "file://{host}/... names the host {host:?}, not a path; write file:/PATH or \
                     file:///PATH"
                )));
            }
            p
        }
        None => path,
    };
    Ok(if path.is_empty() {
        Target::File(default_file_path())
    } else {
        Target::File(local_path(u.url, "the path", path)?)
    })
}
