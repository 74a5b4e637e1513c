//! A small `--key value` / `--flag` parser for the two binaries (no
//! dependency, clear errors).

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed arguments.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<String, String>,
    flags: Vec<String>,
}

impl Args {
    /// Parses `argv` (without the program name). `flags` lists the options
    /// that take no value.
    pub fn parse(argv: impl IntoIterator<Item = String>, flags: &[&str]) -> Result<Args, String> {
        let mut args = Args::default();
        let mut it = argv.into_iter();
        while let Some(a) = it.next() {
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if let Some((k, v)) = key.split_once('=') {
                args.values.insert(k.to_owned(), v.to_owned());
            } else if flags.contains(&key) {
                args.flags.push(key.to_owned());
            } else {
                let v = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
                args.values.insert(key.to_owned(), v);
            }
        }
        Ok(args)
    }

    /// True when `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    /// The string value of `--name`.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A required string value.
    pub fn need(&self, name: &str) -> Result<&str, String> {
        self.str(name)
            .ok_or_else(|| format!("--{name} is required"))
    }

    /// A parsed value, or `default`.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name} {v:?} is not a valid value")),
        }
    }

    /// Fails on any option not in `known` (values and flags).
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        for k in self.values.keys().chain(self.flags.iter()) {
            if !known.contains(&k.as_str()) {
                return Err(format!("unknown option --{k}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_flags_and_errors() {
        let a = Args::parse(
            ["--threads", "3", "--clock-faults", "--url=x://y"].map(String::from),
            &["clock-faults"],
        )
        .unwrap();
        assert_eq!(a.get("threads", 1u32), Ok(3));
        assert_eq!(a.get("rate", 7u32), Ok(7));
        assert!(a.flag("clock-faults"));
        assert_eq!(a.str("url"), Some("x://y"));
        assert!(a.get::<u32>("url", 0).is_err());
        assert!(a.only(&["threads", "url"]).is_err());
        assert!(a.only(&["threads", "url", "clock-faults"]).is_ok());
        assert!(Args::parse(["--threads".to_string()], &[]).is_err());
        assert!(Args::parse(["x".to_string()], &[]).is_err());
    }
}
