//! State loss for the state files of one host (`file:` and
//! `static:N?state=PATH`; docs/AUTHORITIES.md, "State loss").
//!
//! A state file carries a [`StoreMark`]: a random identity made when the
//! file is created, a write serial (+1 per write), a quarantine count
//! (+1 per quarantine) and a quarantine time. Beside it, in a directory of the
//! host's memory that no backup restores and that ends with the host's
//! processes (`/dev/shm`), a sidecar records what the processes of this
//! host last wrote: the identity, the serial, and the end (Unix ms) of the
//! latest interval granted from the file. When the file is read back
//! missing, with another identity, or with a lower serial (deleted,
//! replaced, restored from a backup) while the sidecar says a granted
//! interval may still run, the file is quarantined until that interval has
//! ended: no grant before it, and a renewal is `Lost`.
//!
//! No sidecar means that no process of this host was granted an interval
//! from the file since the directory was made (the host started, or the
//! file was never used): a missing file is then new, and its first use
//! waits for nothing. The sidecar directory is per user
//! (`/dev/shm/grantid-UID`, or `GRANTID_RUNTIME_DIR`): processes of other
//! users sharing one file each keep their own, and a loss is detected by
//! every user whose processes were granted from it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::url::Options;

/// The state file's own record of its identity and quarantine.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StoreMark {
    /// Random, made when the file is created; never 0 once written.
    #[serde(default)]
    pub id: u64,
    /// +1 per write of the file.
    #[serde(default)]
    pub serial: u64,
    /// +1 per quarantine (stored as `epoch`, the name older versions
    /// read).
    #[serde(default, rename = "epoch")]
    pub quarantines: u64,
    /// Unix ms: no grant before it.
    #[serde(default)]
    pub quarantine_until_ms: u64,
    /// Why the last quarantine started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the processes of this host last wrote to a state file.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Record {
    id: u64,
    serial: u64,
    /// End (Unix ms) of the latest interval granted from the file.
    until_ms: u64,
}

/// The sidecar of one state file, read once per locked use of the file.
#[derive(Debug)]
pub(crate) struct Sidecar {
    path: Option<PathBuf>,
    seen: Option<Record>,
}

/// FNV-1a: a stable name for a path (the same in every build and language).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GRANTID_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return dir.is_absolute().then_some(dir);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    Some(base.join(format!("grantid-{uid}")))
}

/// True when `dir` is a directory of this user that no other user may
/// write: a sidecar anyone else could plant or delete would be evidence of
/// nothing.
fn owned(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// The directory, made private if missing; `None` if it is not ours.
fn private_directory(dir: &Path) -> Option<&Path> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists() {
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
    }
    if owned(dir) {
        Some(dir)
    } else {
        log::warn!(target: "grantid", "event=sidecar_unusable dir={} reason=not a directory of this user closed to others; state-file loss is not detected", dir.display());
        None
    }
}

/// Where this process keeps the sidecar of the state file at `state`
/// (named by its path with `.` and repeated `/` taken out, so two
/// spellings of one path share it).
pub(crate) fn path_of(state: &Path) -> Option<PathBuf> {
    let normal: PathBuf = state.components().collect();
    directory().map(|d| {
        d.join(format!(
            "{:016x}.json",
            fnv1a(normal.as_os_str().as_encoded_bytes())
        ))
    })
}

impl Sidecar {
    /// The sidecar of the state file at `state` (an absolute path).
    pub(crate) fn open(state: &Path) -> Sidecar {
        let path = path_of(state).filter(|p| p.parent().and_then(private_directory).is_some());
        let seen = path
            .as_deref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok());
        Sidecar { path, seen }
    }

    /// The mark to use for the file read as `mark` (`None`: missing) at
    /// `now_ms`, and whether it changed (a new identity, or a quarantine
    /// that must be written before anything is granted). `cap_ms`: the
    /// longest a granted interval can still run (the bounded lead plus the
    /// skew allowance), if the authority has one; a sidecar claiming more
    /// is not believed further.
    pub(crate) fn check(
        &self,
        mark: Option<&StoreMark>,
        now_ms: u64,
        cap_ms: Option<u64>,
    ) -> (StoreMark, bool) {
        let mut out = mark.cloned().unwrap_or_default();
        let mut changed = false;
        if out.id == 0 {
            out.id = new_id(now_ms);
            changed = true;
        }
        let Some(mut seen) = self.seen.filter(|s| s.until_ms > now_ms) else {
            return (out, changed);
        };
        if let Some(cap) = cap_ms {
            seen.until_ms = seen.until_ms.min(now_ms.saturating_add(cap));
        }
        let lost = match mark {
            None => Some("the state file is missing (deleted, or never restored)".to_owned()),
            Some(m) if m.id != seen.id => {
                Some("the state file was replaced by another one (another identity)".to_owned())
            }
            Some(m) if m.serial < seen.serial => Some(format!(
                "the state file went back from write {} to write {} (restored from a backup?)",
                seen.serial, m.serial
            )),
            Some(_) => None,
        };
        if let Some(why) = lost {
            out.quarantines += 1;
            out.quarantine_until_ms = out.quarantine_until_ms.max(seen.until_ms);
            out.reason = Some(format!(
                "{why}, while an interval granted from it may run until Unix ms {}",
                seen.until_ms
            ));
            // A new identity: every other sidecar of the file (other users,
            // other directories) sees the loss too, whatever its serial.
            out.id = new_id(now_ms);
            changed = true;
        }
        (out, changed)
    }

    /// The end (Unix ms) of the latest interval this host's processes were
    /// granted from the file, as far as the sidecar knows (0: none).
    pub(crate) fn latest_end_ms(&self) -> u64 {
        self.seen.map_or(0, |s| s.until_ms)
    }

    /// Records that the file was written as `mark`, with a grant ending at
    /// `until_ms` (0 for a write that granted nothing). Best effort: a
    /// sidecar that cannot be written only weakens detection.
    pub(crate) fn record(&self, mark: &StoreMark, until_ms: u64) {
        let Some(path) = &self.path else { return };
        let record = Record {
            id: mark.id,
            serial: mark.serial,
            until_ms: match self.seen {
                Some(s) => s.until_ms.max(until_ms),
                None => until_ms,
            },
        };
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = std::fs::write(&tmp, serde_json::to_vec(&record).unwrap_or_default())
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            log::warn!(target: "grantid", "event=sidecar_unusable path={} reason={e}; state-file loss is not detected", path.display());
        }
    }
}

/// A random nonzero identity: it only has to differ from the identity of
/// any other file written at the same path.
fn new_id(now_ms: u64) -> u64 {
    getrandom::u64().unwrap_or_else(|_| now_ms ^ u64::from(std::process::id())) | 1
}

/// No grant while `mark` is quarantined at `now_ms`: the rule's gate
/// ([`grantid::rule::gate`]).
/// (The file engine's; the static engine gates through the rule.)
#[cfg_attr(not(feature = "file"), allow(dead_code))]
pub(crate) fn gate(
    mark: &StoreMark,
    now_ms: u64,
    renewal: Option<u32>,
) -> Result<(), grantid::GrantError> {
    grantid::rule::gate(
        mark.quarantine_until_ms,
        mark.reason.as_deref().unwrap_or("state loss"),
        now_ms,
        renewal,
    )
}

/// Starts (or extends) a quarantine at `now_ms` for `reason`: until
/// `max_lead_ms + clock_skew_ms` from now have passed, and until
/// `latest_end_ms` (the latest end of an interval known to be granted from
/// the file: the sidecar's, the file's high-water marks, a holder's
/// evidence) plus `clock_skew_ms`. Returns its end.
pub(crate) fn quarantine(
    mark: &mut StoreMark,
    now_ms: u64,
    latest_end_ms: u64,
    options: &Options,
    reason: String,
) -> u64 {
    let until = now_ms
        .saturating_add(options.max_lead_ms)
        .max(latest_end_ms)
        .saturating_add(options.clock_skew_ms);
    mark.quarantines += 1;
    mark.quarantine_until_ms = mark.quarantine_until_ms.max(until);
    mark.reason = Some(reason);
    mark.quarantine_until_ms
}

/// The quarantine `mark` records, if any.
pub(crate) fn recorded(mark: &StoreMark) -> Option<grantid::rule::Quarantine> {
    (mark.quarantine_until_ms > 0).then(|| grantid::rule::Quarantine {
        until_ms: mark.quarantine_until_ms,
        since_ms: 0,
        reason: mark.reason.clone().unwrap_or_else(|| "state loss".into()),
    })
}

/// The operator's lift: no quarantine from now; returns the one lifted.
pub(crate) fn lift(mark: &mut StoreMark) -> Option<grantid::rule::Quarantine> {
    let was = recorded(mark);
    mark.quarantine_until_ms = 0;
    if let Some(q) = &was {
        mark.reason = Some(format!("lifted by the operator (was: {})", q.reason));
    }
    was
}

/// The operator's fence: a [`quarantine`] from `now_ms`.
pub(crate) fn fence(
    mark: &mut StoreMark,
    now_ms: u64,
    latest_end_ms: u64,
    options: &Options,
) -> u64 {
    quarantine(
        mark,
        now_ms,
        latest_end_ms,
        options,
        "fenced by the operator".to_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use grantid::GrantError;

    fn sidecar(seen: Option<Record>) -> Sidecar {
        Sidecar { path: None, seen }
    }

    #[test]
    fn a_new_file_waits_for_nothing() {
        let (m, changed) = sidecar(None).check(None, 1_000, None);
        assert!(changed && m.id != 0 && m.quarantine_until_ms == 0);
        // A sidecar whose intervals have all ended: nothing can collide.
        let ended = Record {
            id: 7,
            serial: 9,
            until_ms: 999,
        };
        let (m, _) = sidecar(Some(ended)).check(None, 1_000, None);
        assert_eq!(m.quarantine_until_ms, 0);
    }

    #[test]
    fn a_missing_replaced_or_older_file_is_quarantined() {
        let seen = Record {
            id: 7,
            serial: 9,
            until_ms: 5_000,
        };
        let file = |id, serial| StoreMark {
            id,
            serial,
            ..StoreMark::default()
        };
        for (mark, needle) in [
            (None, "missing"),
            (Some(file(8, 20)), "another identity"),
            (Some(file(7, 8)), "went back from write 9 to write 8"),
        ] {
            let (m, changed) = sidecar(Some(seen)).check(mark.as_ref(), 1_000, None);
            assert!(changed);
            // A new identity, so every other sidecar of the file sees it too.
            assert!(m.id != 7 && m.id != 8 && m.id != 0);
            assert_eq!(m.quarantine_until_ms, 5_000, "{needle}");
            assert!(m.reason.as_deref().unwrap().contains(needle), "{m:?}");
            assert!(matches!(
                gate(&m, 4_999, None),
                Err(GrantError::Unavailable(_))
            ));
            assert!(matches!(gate(&m, 4_999, Some(3)), Err(GrantError::Lost(_))));
            assert!(gate(&m, 5_000, Some(3)).is_ok());
        }
        // The same file, written since: no quarantine.
        let (m, changed) = sidecar(Some(seen)).check(Some(&file(7, 9)), 1_000, None);
        assert!(!changed && m.quarantine_until_ms == 0);
        // A bounded lead caps what a sidecar can claim.
        let (m, _) = sidecar(Some(seen)).check(None, 1_000, Some(500));
        assert_eq!(m.quarantine_until_ms, 1_500);
    }

    #[test]
    fn one_sidecar_per_path_however_spelled() {
        assert_eq!(
            path_of(Path::new("/a//b/./s.json")),
            path_of(Path::new("/a/b/s.json"))
        );
    }

    #[test]
    fn names_are_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
