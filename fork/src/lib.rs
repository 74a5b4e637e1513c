//! A process-wide fork counter.
//!
//! [`generation()`] returns a number that changes in the child of every `fork()`
//! and never in the parent. A generator records the generation it was
//! activated in; when the number differs on its next call, the call runs in a child that
//! must not issue from its parent's grant.
//!
//! The counter is bumped by a `pthread_atfork` child handler registered on the
//! first call to [`generation()`] (or [`register()`]). The handler only does an
//! atomic add, which is async-signal-safe, as POSIX requires of code that runs
//! in a child of a multi-threaded process.
//!
//! It also offers [`section()`]: code that holds something a `fork()` child
//! must not inherit half-way (a `flock` on a shared state file, a connection
//! in the middle of a request) runs inside a section, and `fork()` waits (up
//! to [`FORK_WAIT`]) until no section is running. The child then never
//! starts with a lock held by a thread that does not exist in it.
//!
//! This crate holds the `unsafe` call the core needs, so that the core crate
//! itself can `forbid(unsafe_code)`.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static ACTIVE: AtomicU64 = AtomicU64::new(0);
/// Forks in progress: a count, not a flag, because threads may fork at the
/// same time and the first to finish must not let sections start while
/// another is still forking.
static FORKING: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Longest a `fork()` waits for running sections to end; after that it goes
/// on (a section that never ends must not stop the process from forking).
pub const FORK_WAIT: Duration = Duration::from_secs(10);

extern "C" fn before_fork() {
    FORKING.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    while ACTIVE.load(Ordering::SeqCst) != 0 && start.elapsed() < FORK_WAIT {
        std::thread::sleep(Duration::from_micros(100));
    }
}

extern "C" fn in_parent() {
    FORKING.fetch_sub(1, Ordering::SeqCst);
}

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
    // The threads that were inside sections do not exist here.
    ACTIVE.store(0, Ordering::SeqCst);
    FORKING.store(0, Ordering::SeqCst);
}

/// A running section: `fork()` waits until it is dropped.
#[derive(Debug)]
#[must_use = "the section ends when this is dropped"]
pub struct Section(());

impl Drop for Section {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Enters a section that a `fork()` will not split (waits while a fork is
/// being prepared).
pub fn section() -> Section {
    register();
    loop {
        while FORKING.load(Ordering::SeqCst) != 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        if FORKING.load(Ordering::SeqCst) == 0 {
            return Section(());
        }
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Installs the child handler once per process. Idempotent and cheap after
/// the first call.
pub fn register() {
    REGISTER.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions without
        // arguments that cannot unwind. `in_child` only stores to atomics,
        // which is async-signal-safe; `before_fork` and `in_parent` run in the
        // parent, in an ordinary context.
        let rc =
            unsafe { libc::pthread_atfork(Some(before_fork), Some(in_parent), Some(in_child)) };
        assert_eq!(rc, 0, "pthread_atfork failed with {rc}");
    });
}

/// The current fork generation of this process (0 in a process that was never
/// forked after registration).
#[inline]
pub fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[test]
    fn fork_waits_for_a_running_section() {
        register();
        static LEFT: AtomicBool = AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let s = section();
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            LEFT.store(true, Ordering::SeqCst);
            drop(s);
        });
        rx.recv().unwrap();
        // SAFETY: the child only calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        let left_before_fork_returned = LEFT.load(Ordering::SeqCst);
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        holder.join().unwrap();
        assert!(
            left_before_fork_returned,
            "fork did not wait for the section"
        );
        // Sections work again after the fork.
        drop(section());
    }

    #[test]
    fn child_sees_a_new_generation_and_parent_does_not() {
        register();
        let before = generation();
        let mut fds = [0i32; 2];
        // SAFETY: `fds` is a valid two-element array for pipe(2) to fill.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only reads an atomic, writes 8 bytes to a pipe and
        // calls _exit, all async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let e = generation().to_le_bytes();
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
        assert_eq!(u64::from_le_bytes(buf), before + 1, "child generation");
        assert_eq!(generation(), before, "parent generation unchanged");
    }
}
