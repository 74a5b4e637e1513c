//! A state file shared by the processes of one host: an exclusive POSIX
//! record lock (`fcntl(F_SETLK)`) on a sibling `.lock` file, and atomic
//! replacement (temp file, `fsync`, `rename`, `fsync` of the directory), so
//! a crash leaves either the old or the new state, never a torn one.
//!
//! Why POSIX record locks and not `flock`: a record lock belongs to the
//! process, and a `fork()` child never inherits it. An `flock` belongs to
//! the open file description, which a child shares: a child forked while
//! the lock was held (or while it was being waited for) kept it for its
//! whole life. Record locks do not exclude the threads of one process, so
//! each process also keeps a table of the lock paths it holds (one per
//! process id: a child starts with an empty table).
//!
//! After the lock is taken the path is checked to still name the locked
//! file: if it was unlinked (a temporary-file cleaner) or replaced, the lock
//! guards nothing and is taken again on the file the path names now.
//!
//! The path is made canonical first ([`canonical`]): a state file reached
//! through a symbolic link, a linked directory or `..` is one file with one
//! lock, and the atomic replacement replaces the file the link names, never
//! the link. A state file with a second hard link is refused: a replacement
//! would split it into two files, each with a lock of its own.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use grantid::GrantError;

use crate::forklocal::ForkLocal;

/// The lock paths this process holds (see the module docs).
static HELD: ForkLocal<HashSet<PathBuf>> = ForkLocal::new();

/// An exclusive lock on a state file, released when dropped.
#[derive(Debug)]
pub(crate) struct Locked {
    /// The open lock file; `None` only while dropping.
    file: Option<File>,
    lock_path: PathBuf,
    path: PathBuf,
}

impl Drop for Locked {
    fn drop(&mut self) {
        // First close the descriptor, which releases the record lock; only
        // then let the next thread of this process in. The other order let
        // a thread take the (process-wide) record lock as its own, and then
        // lose it to another process when this close released it.
        drop(self.file.take());
        HELD.get().lock().remove(&self.lock_path);
    }
}

/// Links followed before a path is refused as a loop (Linux's MAXSYMLINKS).
const MAX_LINKS: usize = 40;

/// `path` with its directory resolved (`realpath`: symbolic links, `.` and
/// `..`) and its last component followed while it is a symbolic link, even
/// one to a file that does not exist yet. The directory must exist.
pub(crate) fn canonical(path: &Path) -> io::Result<PathBuf> {
    let mut path = path.to_owned();
    for _ in 0..MAX_LINKS {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "names no file (it ends in `/`, `.` or `..`)",
            ));
        };
        let dir = fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })?;
        let full = dir.join(name);
        match fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&full)?;
                path = dir.join(target);
            }
            Ok(_) => return Ok(full),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(full),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        ErrorKind::InvalidInput,
        format!("more than {MAX_LINKS} symbolic links"),
    ))
}

fn lock_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

fn unavailable(what: &str, path: &Path, e: impl std::fmt::Display) -> GrantError {
    GrantError::Unavailable(format!("{what} {}: {e}", path.display()))
}

/// One non-blocking attempt at the record lock of `file`: `Ok(false)` when
/// another process holds it.
fn try_record_lock(file: &File) -> io::Result<bool> {
    // SAFETY: an all-zero `flock` struct is a valid value; the fields that
    // matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // the whole file
    // SAFETY: the descriptor belongs to `file`, open for the whole call;
    // `fl` is a valid flock struct.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(false),
        _ => Err(err),
    }
}

/// True when `path` still names the open `file` (same device and inode).
fn still_named(file: &File, path: &Path) -> io::Result<bool> {
    let open = file.metadata()?;
    match fs::metadata(path) {
        Ok(named) => Ok(named.dev() == open.dev() && named.ino() == open.ino()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
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
    let named = path;
    let path = &canonical(named).map_err(|e| unavailable("cannot resolve", named, e))?;
    let lp = lock_path(path);
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(200);
    let timed_out = || {
        GrantError::Unavailable(format!(
            "{} stayed locked by another process or thread for more than {} ms",
            lp.display(),
            timeout.as_millis()
        ))
    };
    let wait = |pause: &mut Duration| -> Result<(), GrantError> {
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        std::thread::sleep(*pause);
        *pause = (*pause * 2).min(Duration::from_millis(10));
        Ok(())
    };
    // First among the threads of this process...
    while !HELD.get().lock().insert(lp.clone()) {
        wait(&mut pause)?;
    }
    let release = |e: GrantError| {
        HELD.get().lock().remove(&lp);
        e
    };
    // ...then among processes.
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lp)
            .map_err(|e| release(unavailable("cannot open", &lp, e)))?;
        loop {
            match try_record_lock(&file) {
                Ok(true) => break,
                Ok(false) => wait(&mut pause).map_err(release)?,
                Err(e) => return Err(release(unavailable("cannot lock", &lp, e))),
            }
        }
        match still_named(&file, &lp) {
            Ok(true) => {
                let locked = Locked {
                    file: Some(file),
                    lock_path: lp,
                    path: path.to_owned(),
                };
                return match fs::metadata(path) {
                    Ok(m) if m.nlink() > 1 => Err(GrantError::Refused(format!(
                        "state file {} has {} hard links: each name would get a lock of its \
                         own and the first write would split them into two files (duplicate \
                         IDs); remove the other links, or point every process at this one \
                         (a symbolic link is followed)",
                        path.display(),
                        m.nlink()
                    ))),
                    _ => Ok(locked),
                };
            }
            // Unlinked or replaced while we waited: lock what the path names now.
            Ok(false) => continue,
            Err(e) => return Err(release(unavailable("cannot check", &lp, e))),
        }
    }
}

impl Locked {
    /// The state file's canonical path ([`canonical`]).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

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

    fn temp_state(tag: &str) -> PathBuf {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        std::env::temp_dir()
            .join(format!("grantid-lockfile-{tag}-{}", std::process::id()))
            .join(format!("{:x}.json", u64::from_le_bytes(b)))
    }

    /// Forks; the child runs `child` and exits with its result, which this
    /// returns (from the child's exit status).
    fn in_child(child: impl FnOnce() -> u8) -> u8 {
        // SAFETY: the child only runs `child` and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = i32::from(child());
            // SAFETY: ends the child without the parent's atexit handlers.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child failed: {status}");
        libc::WEXITSTATUS(status) as u8
    }

    #[test]
    fn a_fork_child_never_keeps_the_lock() {
        // Another process holds the lock for 12 s; a thread here waits for
        // it; this process forks meanwhile (a fork waits at most 10 s for a
        // lock section, so it happens during the wait). The child lives on
        // after the thread took and released the lock: the lock must be
        // free again for this process.
        let path = temp_state("fork");
        let holder = {
            let path = path.clone();
            std::thread::spawn(move || {
                in_child(|| {
                    let _l = lock(&path, Duration::from_secs(1)).unwrap();
                    std::thread::sleep(Duration::from_secs(12));
                    1
                })
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let l = lock(&path, Duration::from_secs(20));
                assert!(l.is_ok(), "{l:?}");
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let long_child = std::thread::spawn(|| {
            in_child(|| {
                std::thread::sleep(Duration::from_secs(14));
                1
            })
        });
        holder.join().unwrap();
        waiter.join().unwrap();
        let again = lock(&path, Duration::from_millis(1_000));
        assert!(
            again.is_ok(),
            "a fork() child kept the lock after its parent released it: {again:?}"
        );
        drop(again);
        long_child.join().unwrap();
    }

    #[test]
    fn never_two_holders_when_the_lock_file_is_unlinked() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let path = temp_state("twice");
        let lp = lock_path(&path);
        let holders = std::sync::Arc::new(AtomicUsize::new(0));
        let hold = |path: &Path, holders: &AtomicUsize, ms: u64| {
            let l = lock(path, Duration::from_secs(3)).unwrap();
            let n = holders.fetch_add(1, Ordering::SeqCst) + 1;
            std::thread::sleep(Duration::from_millis(ms));
            holders.fetch_sub(1, Ordering::SeqCst);
            drop(l);
            n
        };
        let first = lock(&path, Duration::from_secs(1)).unwrap();
        holders.fetch_add(1, Ordering::SeqCst);
        let other = {
            let (path, holders) = (path.clone(), holders.clone());
            std::thread::spawn(move || hold(&path, &holders, 300))
        };
        std::thread::sleep(Duration::from_millis(200));
        // A cleaner unlinks the lock file while it is held and waited for.
        fs::remove_file(&lp).unwrap();
        holders.fetch_sub(1, Ordering::SeqCst);
        drop(first);
        let mine = hold(&path, &holders, 300);
        let theirs = other.join().unwrap();
        assert_eq!((mine, theirs), (1, 1), "two holders at once");
    }

    #[test]
    fn a_lock_file_unlinked_while_waited_for_is_locked_again() {
        let path = temp_state("unlink");
        let lp = lock_path(&path);
        let first = lock(&path, Duration::from_secs(1)).unwrap();
        // The child opens the lock file and waits for it.
        let got = {
            let child_path = path.clone();
            let lp2 = lp.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = std::thread::spawn(move || {
                let b =
                    in_child(|| u8::from(lock(&child_path, Duration::from_millis(1_500)).is_ok()));
                tx.send(b).unwrap();
            });
            std::thread::sleep(Duration::from_millis(300));
            // A cleaner unlinks the lock file; this process then locks a new
            // one at the same path and holds it past the child's timeout.
            fs::remove_file(&lp2).unwrap();
            drop(first);
            let second = lock(&path, Duration::from_secs(1)).unwrap();
            std::thread::sleep(Duration::from_millis(2_000));
            drop(second);
            let b = rx.recv().unwrap();
            waiter.join().unwrap();
            b
        };
        assert_eq!(
            got, 0,
            "the child held the unlinked lock file while this process held the new one"
        );
    }

    /// Threads of two processes take the lock in turn; each holder checks
    /// that nobody else is inside (a marker file) while it holds the lock.
    /// Returns how many times someone else was inside.
    fn contend(path: &Path, marker: &Path) -> u8 {
        let overlaps = std::sync::atomic::AtomicU8::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..150 {
                        let l = lock(path, Duration::from_secs(10)).unwrap();
                        let inside = fs::read(marker).map(|b| !b.is_empty()).unwrap_or(false);
                        if inside {
                            overlaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        fs::write(marker, b"x").unwrap();
                        std::thread::yield_now();
                        fs::write(marker, b"").unwrap();
                        drop(l);
                    }
                });
            }
        });
        overlaps.load(std::sync::atomic::Ordering::SeqCst).min(100)
    }

    #[test]
    fn threads_of_two_processes_never_hold_the_lock_together() {
        let path = temp_state("contend");
        let marker = path.with_extension("marker");
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&marker, b"").unwrap();
        let (p, m) = (path.clone(), marker.clone());
        let child = std::thread::spawn(move || in_child(|| contend(&p, &m)));
        let mine = contend(&path, &marker);
        let theirs = child.join().unwrap();
        assert_eq!((mine, theirs), (0, 0), "holders overlapped");
    }
}
