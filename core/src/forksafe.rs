//! A mutex that a `fork()` child never inherits held.
//!
//! POSIX copies only the forking thread into a child; a lock that another
//! thread held at that moment stays held in the child for ever. Every lock of
//! a generator is therefore taken inside a `grantid_fork` section, which
//! `fork()` waits for (docs/UNIQUENESS.md section 4): the child starts with
//! every such lock free. The sections are short (a field copied in or out,
//! never an authority call or a callback), so a `fork()` waits microseconds.

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// A `Mutex` whose guard holds a fork section. Poisoning is ignored: every
/// critical section is a plain store or copy that leaves the value whole.
#[derive(Debug, Default)]
pub(crate) struct ForkSafeMutex<T>(Mutex<T>);

/// The guard: the lock, then the section (dropped in that order).
pub(crate) struct Guard<'a, T> {
    guard: MutexGuard<'a, T>,
    _section: grantid_fork::Section,
}

impl<T> ForkSafeMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        ForkSafeMutex(Mutex::new(value))
    }

    /// Locks, inside a fork section.
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        let section = grantid_fork::section();
        Guard {
            guard: self.0.lock().unwrap_or_else(|p| p.into_inner()),
            _section: section,
        }
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}
