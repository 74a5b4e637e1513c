//! A state file shared by the processes of one host: an exclusive `flock`
//! on a sibling `.lock` file, and atomic replacement (temp file, `fsync`,
//! `rename`, `fsync` of the directory), so a crash leaves either the old or
//! the new state, never a torn one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grantid::GrantError;

/// An exclusive lock on a state file, released when dropped (the lock file
/// is closed). It is held inside a fork section: a `fork()` waits until it is
/// released, so a child never inherits a descriptor that holds the lock (it
/// would hold it for good, since the thread that would release it does not
/// exist in the child).
#[derive(Debug)]
pub(crate) struct Locked {
    // Field order is drop order: unlock, then end the section.
    _file: File,
    _section: grantid_fork::Section,
    path: PathBuf,
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn unavailable(what: &str, path: &Path, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("{what} {}: {e}", path.display()))
}

/// Takes the lock of `path`, waiting at most `timeout` (a holder that never
/// lets go makes the answer `Unavailable`, never a hang).
pub(crate) fn lock(path: &Path, timeout: Duration) -> Result<Locked, GrantError> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        fs::create_dir_all(dir)
            .map_err(|e| unavailable("cannot create the directory of", path, e))?;
    }
    let lp = lock_path(path);
    // From before the open: a child forked between the open and the flock
    // would share the open file description, and with it the lock, for as
    // long as the child lives.
    let section = grantid_fork::section();
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lp)
        .map_err(|e| unavailable("cannot open", &lp, e))?;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(200);
    loop {
        // SAFETY: the descriptor belongs to `file`, open for the whole call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Locked {
                _file: file,
                _section: section,
                path: path.to_owned(),
            });
        }
        let err = io::Error::last_os_error();
        if err.kind() != ErrorKind::WouldBlock && err.raw_os_error() != Some(libc::EINTR) {
            return Err(unavailable("cannot lock", &lp, err));
        }
        if Instant::now() >= deadline {
            return Err(GrantError::Unavailable(format!(
                "{} stayed locked by another process for more than {} ms",
                lp.display(),
                timeout.as_millis()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

impl Locked {
    /// The state file's bytes, or `None` when it does not exist yet.
    pub(crate) fn read(&self) -> Result<Option<Vec<u8>>, GrantError> {
        match File::open(&self.path) {
            Ok(mut f) => {
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)
                    .map_err(|e| unavailable("cannot read", &self.path, e))?;
                Ok(Some(buf))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(unavailable("cannot open", &self.path, e)),
        }
    }

    /// Replaces the state file with `bytes`, durably.
    pub(crate) fn write(&self, bytes: &[u8]) -> Result<(), GrantError> {
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(format!(".tmp.{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let result = (|| -> io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)?;
            let dir = match self.path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            File::open(dir)?.sync_all()
        })();
        result.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            unavailable("cannot write", &self.path, e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_and_lock_excludes() {
        let dir = std::env::temp_dir().join(format!("grantid-lockfile-{}", std::process::id()));
        let path = dir.join("state.json");
        let l = lock(&path, Duration::from_secs(1)).unwrap();
        assert_eq!(l.read().unwrap(), None);
        l.write(b"hello").unwrap();
        assert_eq!(l.read().unwrap().as_deref(), Some(&b"hello"[..]));
        // flock locks belong to the open file description: a second open in
        // the same process is refused while the first is held.
        let second = lock(&path, Duration::from_millis(20));
        assert!(matches!(second, Err(GrantError::Unavailable(m)) if m.contains("stayed locked")));
        drop(l);
        assert!(lock(&path, Duration::from_millis(20)).is_ok());
        let _ = fs::remove_dir_all(dir);
    }
}
