//! Per-process state that a `fork()` child never shares with its parent.
//!
//! A database connection must not be used by two processes: the child of a
//! `fork()` inherits its parent's socket, and a query from both would mix
//! their messages. [`ForkLocal`] keeps one slot per process id. A call in a
//! process whose id differs from the slot's makes a fresh slot; the parent's
//! slot is left alone, never dropped in the child (dropping a client would
//! send a goodbye on the parent's connection) and never locked there (a
//! parent thread may have held its lock at the moment of the fork, and that
//! thread does not exist in the child).

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One process's slot.
#[derive(Debug)]
pub(crate) struct Slot<T> {
    pid: u32,
    value: Mutex<T>,
}

impl<T> Slot<T> {
    /// Locks the slot (a poisoned lock is taken over: the value is a cache
    /// that callers re-check).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.value.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A value per process, made with `T::default()` on first use in each
/// process.
#[derive(Debug)]
pub(crate) struct ForkLocal<T: Default> {
    current: AtomicPtr<Slot<T>>,
}

impl<T: Default> ForkLocal<T> {
    pub(crate) const fn new() -> ForkLocal<T> {
        ForkLocal {
            current: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The slot of the calling process.
    pub(crate) fn get(&self) -> &Slot<T> {
        let pid = std::process::id();
        loop {
            let p = self.current.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: a non-null pointer in `current` came from
                // `Box::into_raw` below and is freed only in `drop`, which has
                // `&mut self`, so it outlives the returned borrow of `self`.
                let slot = unsafe { &*p };
                if slot.pid == pid {
                    return slot;
                }
            }
            let fresh = Box::into_raw(Box::new(Slot {
                pid,
                value: Mutex::new(T::default()),
            }));
            match self
                .current
                .compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The old slot (if any) belongs to the parent process: it is
                // leaked on purpose, see the module docs.
                Ok(_) => {
                    // SAFETY: `fresh` was just published and lives until drop.
                    return unsafe { &*fresh };
                }
                Err(_) => {
                    // SAFETY: `fresh` was never published; this thread owns it.
                    drop(unsafe { Box::from_raw(fresh) });
                }
            }
        }
    }
}

impl<T: Default> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        let p = *self.current.get_mut();
        if p.is_null() {
            return;
        }
        // SAFETY: `p` came from `Box::into_raw` and `&mut self` guarantees no
        // borrow of it remains.
        let slot = unsafe { Box::from_raw(p) };
        if slot.pid != std::process::id() {
            // Another process's connection: never closed from here.
            std::mem::forget(slot);
        }
    }
}

// SAFETY: the slots are only reached through `&Slot<T>`, whose `Mutex<T>`
// is `Sync` when `T: Send`; the pointer itself is an atomic.
unsafe impl<T: Default + Send> Sync for ForkLocal<T> {}
// SAFETY: moving the owner moves the boxed slot with it; `T: Send`.
unsafe impl<T: Default + Send> Send for ForkLocal<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_slot_per_process() {
        let f: ForkLocal<u32> = ForkLocal::new();
        *f.get().lock() = 7;
        assert_eq!(*f.get().lock(), 7);
        let a = f.get() as *const Slot<u32>;
        assert_eq!(a, f.get() as *const Slot<u32>);
    }
}
