//! A process-wide fork counter.
//!
//! [`epoch()`] returns a number that changes in the child of every `fork()`
//! and never in the parent. A generator records the epoch it was activated
//! in; when the number differs on its next call, the call runs in a child that
//! must not issue from its parent's grant.
//!
//! The counter is bumped by a `pthread_atfork` child handler registered on the
//! first call to [`epoch()`] (or [`register()`]). The handler only does an
//! atomic add, which is async-signal-safe, as POSIX requires of code that runs
//! in a child of a multi-threaded process.
//!
//! This crate holds the one `unsafe` call the core needs, so that the core
//! crate itself can `forbid(unsafe_code)`.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

static EPOCH: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// Installs the child handler once per process. Idempotent and cheap after
/// the first call.
pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: `in_child` is an `extern "C"` function with no arguments
        // that only performs an atomic add on a static, which is
        // async-signal-safe; the prepare and parent handlers are null, which
        // pthread_atfork allows.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        assert_eq!(rc, 0, "pthread_atfork failed with {rc}");
    });
}

/// The current fork epoch of this process (0 in a process that was never
/// forked after registration).
#[inline]
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_sees_a_new_epoch_and_parent_does_not() {
        register();
        let before = epoch();
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a valid two-element array for pipe(2) to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads an atomic, writes 8 bytes to a pipe and
        // calls _exit, all async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let e = epoch().to_le_bytes();
            // SAFETY: `e` is 8 valid bytes; fds[1] is the pipe's write end.
            unsafe {
                libc::write(fds[1], e.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let mut buf = [0u8; 8];
        // SAFETY: `buf` has room for the 8 bytes read from the pipe's read end.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 8) };
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(n, 8);
        assert_eq!(u64::from_le_bytes(buf), before + 1, "child epoch");
        assert_eq!(epoch(), before, "parent epoch unchanged");
    }
}
