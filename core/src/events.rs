//! The named events: the one list of every `event=NAME` logged under the
//! `log` target `"grantid"`, by the core, by the reference authorities and
//! by the bindings, so that Rust, C, Python and Node programs see the same
//! names at the same levels. A message starts with `event=NAME` and goes on
//! with `key=value` fields (`namespace=`, `worker=`, `reason=`, ...).
//!
//! | event | level | emitted by | when |
//! |---|---|---|---|
//! | `grant` | debug | core | a grant was committed |
//! | `closed` | info | core | a generator closed |
//! | `fork_reactivate` | info | core | a `fork()` child re-activated its generator |
//! | `grant_uncertain` | warn | core | the authority did not answer clearly; retried with the same request id |
//! | `grant_refused` | warn | core | the authority refused the request permanently (start-up fails; a running generator treats it as lost) |
//! | `release_panicked` | warn | core | the authority's `release` panicked (the lease ends by expiry) |
//! | `release_failed` | warn | authorities | a best-effort release did not reach the authority (the lease ends by expiry) |
//! | `max_lead_unknown` | warn | grpc authority | the server's bounded lead could not be learnt (down, or an older server): the start-up horizon check is skipped |
//! | `token_file_unreadable` | warn | grpcs authority | the `token_file` of a `grpcs://` URL cannot be read again after it changed: calls go on with the token read before |
//! | `sidecar_unusable` | warn | file authority | the state file's sidecar (its identity record) cannot be used: state-file loss is not detected (docs/AUTHORITIES.md, "State loss") |
//! | `grant_invalid` | error | core | an answer was not a valid grant for its request |
//! | `lease_lost` | error | core | the authority gave the worker to someone else |
//! | `on_lease_lost_panicked` | error | core | the host's `on_lease_lost` callback panicked |
//! | `renewal_panicked` | error | core | the renewal thread panicked (the generator stops issuing) |
//! | `source_traceback` | debug | bindings | the detail of a host grant source's failure (Python: the traceback as `exc_info`); the failure itself is the core's `grant_uncertain` |
//!
//! The grantid server and CLI log their own events under their own targets
//! (`grantid_server`, `grantid_cli`; docs/SERVICE.md, docs/CLI.md).

use log::Level;

/// One named event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The name after `event=`.
    pub name: &'static str,
    /// The level it is logged at.
    pub level: Level,
}

macro_rules! events {
    ($($(#[$doc:meta])* $id:ident = $name:literal, $level:ident;)*) => {
        $($(#[$doc])* pub const $id: Event = Event { name: $name, level: Level::$level };)*
        /// Every named event, in the order of the table above.
        pub const ALL: &[Event] = &[$($id),*];
        /// The constants' names, for the test below.
        #[cfg(test)]
        const IDS: &[&str] = &[$(stringify!($id)),*];
    };
}

events! {
    /// A grant was committed.
    GRANT = "grant", Debug;
    /// A generator closed.
    CLOSED = "closed", Info;
    /// A `fork()` child re-activated its generator.
    FORK_REACTIVATE = "fork_reactivate", Info;
    /// The authority did not answer clearly; retried.
    GRANT_UNCERTAIN = "grant_uncertain", Warn;
    /// A permanent refusal.
    GRANT_REFUSED = "grant_refused", Warn;
    /// The authority's `release` panicked.
    RELEASE_PANICKED = "release_panicked", Warn;
    /// A best-effort release did not reach the authority.
    RELEASE_FAILED = "release_failed", Warn;
    /// A `grpc://` client could not learn its server's bounded lead.
    MAX_LEAD_UNKNOWN = "max_lead_unknown", Warn;
    /// A `grpcs://` client cannot read its changed token file again.
    TOKEN_FILE_UNREADABLE = "token_file_unreadable", Warn;
    /// The file authority cannot use its sidecar: state-file loss goes
    /// undetected.
    SIDECAR_UNUSABLE = "sidecar_unusable", Warn;
    /// An answer was not a valid grant.
    GRANT_INVALID = "grant_invalid", Error;
    /// The worker was given to someone else.
    LEASE_LOST = "lease_lost", Error;
    /// The host's `on_lease_lost` callback panicked.
    ON_LEASE_LOST_PANICKED = "on_lease_lost_panicked", Error;
    /// The renewal thread panicked.
    RENEWAL_PANICKED = "renewal_panicked", Error;
    /// The detail of a host grant source's failure, logged by a binding.
    SOURCE_TRACEBACK = "source_traceback", Debug;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every `event=NAME` written in the workspace's sources that log under
    /// the target `"grantid"` (all but the server's and the CLI's own).
    fn names_in(dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(
                    name.as_str(),
                    "target" | "node_modules" | "tests" | "__test__" | "server" | "cli"
                ) && !name.starts_with('.')
                {
                    names_in(&path, out);
                }
            } else if name.ends_with(".rs") && name != "events.rs" {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                // `event=name` written out, or `events::NAME` (the constant).
                for (marker, upper) in [("event=", false), ("events::", true)] {
                    for piece in text.split(marker).skip(1) {
                        let event: String = piece
                            .chars()
                            .take_while(|c| {
                                *c == '_'
                                    || if upper {
                                        c.is_ascii_uppercase()
                                    } else {
                                        c.is_ascii_lowercase()
                                    }
                            })
                            .collect();
                        if event.len() > 1 && event != "ALL" {
                            out.push((event.to_lowercase(), path.display().to_string()));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_event_logged_in_the_workspace_is_listed() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        names_in(&root, &mut found);
        // Outside the workspace (a packaged crate) there is nothing to scan.
        if !root.join("bindings-python").is_dir() {
            return;
        }
        assert!(found.iter().any(|(e, _)| e == "lease_lost"), "{found:?}");
        for (e, id) in ALL.iter().zip(IDS) {
            assert_eq!(e.name, id.to_lowercase());
        }
        for (event, file) in &found {
            assert!(
                ALL.iter().any(|e| e.name == event),
                "event={event} in {file} is not in core/src/events.rs"
            );
        }
        for e in ALL {
            assert!(
                found.iter().any(|(name, _)| name == e.name),
                "{} is listed but never logged",
                e.name
            );
        }
    }
}
