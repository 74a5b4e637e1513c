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
    let by_region = query
        .split('&')
        .any(|p| p.split('=').next() == Some("datacenter_by_region"));
    let host = std::env::var(crate::url::REGION_VARIABLE).unwrap_or_default();
    same_region(region.as_deref(), &host, by_region).map_err(|e| u.invalid(e))?;
    Ok(Target::Dynamodb {
        table: table.to_owned(),
        region,
        endpoint,
    })
}

/// `datacenter_by_region` names the datacenter of the host's region
/// (`host`): on a table of another region (`region=`), that datacenter
/// would be served by that region's store besides its own.
fn same_region(table: Option<&str>, host: &str, by_region: bool) -> Result<(), String> {
    match table {
        Some(t) if by_region && t != host => Err(format!(
            "datacenter_by_region takes the datacenter of this host's region ({host:?}), but \
             the table is in {t}: give the datacenter with datacenter=N, or use the table of \
             this host's region"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::same_region;

    #[test]
    fn a_region_map_needs_the_hosts_own_table() {
        assert!(same_region(Some("us-east-1"), "us-east-1", true).is_ok());
        assert!(same_region(None, "us-west-2", true).is_ok());
        assert!(same_region(Some("us-east-1"), "us-west-2", false).is_ok());
        let e = same_region(Some("us-east-1"), "us-west-2", true).unwrap_err();
        assert!(e.contains("the table is in us-east-1"), "{e}");
    }
}
