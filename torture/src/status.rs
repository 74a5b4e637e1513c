//! Status files: what a worker process reports to the harness, as
//! `key=value` lines, rewritten (write + rename) a few times per second and
//! once more on a clean exit.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// A status snapshot: ordered `key -> value` pairs of whole numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status(pub BTreeMap<String, u64>);

impl Status {
    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: u64) {
        self.0.insert(key.to_owned(), value);
    }

    /// The value of `key`, 0 when absent.
    pub fn get(&self, key: &str) -> u64 {
        self.0.get(key).copied().unwrap_or(0)
    }

    /// True when `key` is present.
    pub fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Writes the snapshot to `path` atomically (temp file + rename).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        let mut text = String::new();
        for (k, v) in &self.0 {
            text.push_str(k);
            text.push('=');
            text.push_str(&v.to_string());
            text.push('\n');
        }
        let tmp = path.with_extension("status.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }

    /// Reads a snapshot; `None` when the file does not exist yet.
    pub fn read(path: &Path) -> io::Result<Option<Status>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut s = Status::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: bad line {line:?}", path.display()),
                )
            })?;
            s.0.insert(k.to_owned(), v);
        }
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_round_trips() {
        let path = std::env::temp_dir().join(format!("grantid-status-{}", fastrand::u64(..)));
        assert_eq!(Status::read(&path).unwrap(), None);
        let mut s = Status::default();
        s.set("ids", 42);
        s.set("worker", 3);
        s.write(&path).unwrap();
        let back = Status::read(&path).unwrap().unwrap();
        assert_eq!(back, s);
        assert_eq!(back.get("missing"), 0);
        std::fs::remove_file(&path).unwrap();
    }
}
