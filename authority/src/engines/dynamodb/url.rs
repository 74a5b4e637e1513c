//! The grammar of `dynamodb://TABLE[?region=REGION&endpoint=URL]`
//! (docs/reference/dynamodb.md).

use grantid::Error;

use crate::url::{Options, Parts, Target, split_query, take_options};

/// The options of a DynamoDB URL besides grantid's.
const OPTIONS: &[&str] = &["region", "endpoint"];

/// The target of a DynamoDB URL: the table, and the region and endpoint
/// when the URL names them (`%XX` decoded); grantid's options go to
/// `options`.
pub(crate) fn parse(u: &Parts<'_>, options: &mut Options) -> Result<Target, Error> {
    let (table, query) = split_query(u.rest.strip_prefix("//").unwrap_or_default());
    let valid = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !valid {
        return Err(u.invalid(format!(
            "table {table:?}: expected dynamodb://TABLE, a DynamoDB table name (3 to 255 of \
             a-z, A-Z, 0-9, '_', '-', '.')"
        )));
    }
    let (mut region, mut endpoint) = (None, None);
    for (k, v) in take_options(u.url, u.scheme, query, options, OPTIONS)? {
        let v = percent_encoding::percent_decode_str(&v)
            .decode_utf8_lossy()
            .into_owned();
        if v.is_empty() {
            return Err(u.invalid(format!("{k}= needs a value")));
        }
        if k == "endpoint" {
            if !(v.starts_with("http://") || v.starts_with("https://")) {
                return Err(u.invalid(format!(
                    "endpoint={v:?}: expected an http:// or https:// URL"
                )));
            }
            endpoint = Some(v);
        } else {
            let ok = v
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(u.invalid(format!(
                    "region={v:?}: expected an AWS region such as us-east-1"
                )));
            }
            region = Some(v);
        }
    }
    Ok(Target::Dynamodb {
        table: table.to_owned(),
        region,
        endpoint,
    })
}
