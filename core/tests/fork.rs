//! A real fork(): the child never issues from its parent's grant.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Scripted;
use grantid::{
    ErrorKind, ForkPolicy, Generator, Grant, GrantError, GrantRequest, GrantSource, Layout,
    MemoryAuthority, source_fn,
};

/// A grant source usable across fork() for this test: an in-memory
/// authority per process (a MemoryAuthority refuses a forked child), the
/// first process on workers [0, 32), any other on [32, 64), so a parent and
/// its child never share a worker.
struct SplitByProcess {
    origin: u32,
    parent: MemoryAuthority,
    child: std::sync::OnceLock<MemoryAuthority>,
}

impl GrantSource for SplitByProcess {
    fn acquire(&self, r: &GrantRequest) -> Result<Grant, GrantError> {
        if std::process::id() == self.origin {
            let mut r = r.clone();
            r.layout = Layout::new(41, 5, 10).unwrap();
            return self.parent.acquire(&r);
        }
        let mut inner = r.clone();
        inner.layout = Layout::new(41, 5, 10).unwrap();
        inner.worker = r.worker.map(|w| w - 32);
        let mut g = self
            .child
            .get_or_init(MemoryAuthority::new)
            .acquire(&inner)?;
        g.worker += 32;
        Ok(g)
    }
}

fn layout() -> Layout {
    Layout::new(41, 6, 10).unwrap()
}

/// Forks; the child runs `child` and sends back its u64s through a pipe.
fn in_child(child: impl FnOnce() -> Vec<u64>) -> Vec<u64> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid two-element array for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fork(2) has no preconditions; the child only calls the
    // generator (which re-activates itself), writes to the pipe and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let out = child();
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut off = 0;
        while off < bytes.len() {
            // SAFETY: the range [off, len) of `bytes` is valid to read.
            let n = unsafe { libc::write(fds[1], bytes[off..].as_ptr().cast(), bytes.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: _exit ends the child without running the parent's atexit
        // handlers or test harness.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closing our copy of the write end so read sees EOF.
    unsafe { libc::close(fds[1]) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n as usize]);
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out pointer.
    unsafe {
        libc::close(fds[0]);
        libc::waitpid(pid, &mut status, 0);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: {status}"
    );
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_forked_child_reactivates_or_refuses() {
    let split = SplitByProcess {
        origin: std::process::id(),
        parent: MemoryAuthority::new(),
        child: std::sync::OnceLock::new(),
    };
    let g = Generator::builder(layout(), "fork", split).start().unwrap();
    let mut parent: Vec<u64> = (0..1000).map(|_| g.next_id().unwrap()).collect();
    let parent_stats = g.stats();

    // Reactivate (default): a new incarnation, a new worker, a new grant.
    let child = in_child(|| {
        let mut out: Vec<u64> = (0..1000).map(|_| g.next_id().unwrap_or(0)).collect();
        out.extend(g.next_ids(500).unwrap_or_default());
        let s = g.stats();
        out.push(s.incarnation);
        out.push(u64::from(s.worker.unwrap_or(u32::MAX)));
        out.push(s.fork_reactivations);
        out
    });
    parent.extend((0..1000).map(|_| g.next_id().unwrap()));
    let (ids, tail) = child.split_at(child.len() - 3);
    assert_eq!(ids.len(), 1500);
    assert!(ids.iter().all(|&id| id != 0), "the child failed to issue");
    assert_ne!(
        tail[0], parent_stats.incarnation,
        "the child has its own incarnation"
    );
    assert_ne!(
        tail[1],
        u64::from(parent_stats.worker.unwrap()),
        "the child has its own worker"
    );
    assert_eq!(tail[2], 1);
    let parents: HashSet<u64> = parent.iter().copied().collect();
    assert_eq!(parents.len(), parent.len());
    let workers: HashSet<u64> = ids
        .iter()
        .map(|&id| layout().decode(id).unwrap().worker)
        .collect();
    assert_eq!(workers.len(), 1);
    assert!(
        ids.iter().all(|id| !parents.contains(id)),
        "the child repeated a parent ID"
    );
    // The parent's generator is untouched.
    assert_eq!(g.stats().incarnation, parent_stats.incarnation);
    assert_eq!(g.stats().fork_reactivations, 0);

    // ForkPolicy::Close: the child refuses.
    let source = Scripted::new();
    let closing = Generator::builder(layout(), "fork", source.clone())
        .fork_policy(ForkPolicy::Close)
        .start()
        .unwrap();
    let before = closing.next_id().unwrap();
    let child = in_child(|| {
        let kind = match closing.next_id() {
            Ok(_) => 0,
            Err(e) if e.kind() == ErrorKind::Closed => 1,
            Err(_) => 2,
        };
        // Closing it in the child must not release the parent's worker.
        closing.close();
        vec![kind]
    });
    assert_eq!(child, vec![1]);
    assert!(closing.next_id().unwrap() > before, "the parent goes on");
    assert_eq!(source.releases.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// How a forked child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChildEnd {
    Exited(i32),
    /// Still running at the watchdog's deadline (then killed).
    Hung,
}

/// Forks; the child runs `child` and exits with its code. The parent waits at
/// most `watchdog`, then kills the child and reports it hung.
fn fork_with_watchdog(watchdog: Duration, child: impl FnOnce() -> i32) -> ChildEnd {
    // SAFETY: fork(2) has no preconditions; the child runs `child` and
    // _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: ends the child without the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + watchdog;
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid failed");
        if r == pid {
            return ChildEnd::Exited(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            });
        }
        if Instant::now() >= deadline {
            eprintln!("child {pid} still running: {}", thread_states(pid));
            // SAFETY: `pid` is our child; SIGKILL then reap it.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return ChildEnd::Hung;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Each thread of process `pid`: its state (R running, S sleeping, ...)
/// and the kernel function it waits in, to tell a child starved of CPU
/// from one blocked for ever.
fn thread_states(pid: i32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "no /proc entry".into();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_owned();
        let wchan = std::fs::read_to_string(dir.join("wchan")).unwrap_or_default();
        out.push(format!("{state}/{wchan}"));
    }
    out.join(" ")
}

/// A source that grants without taking any lock (so a `fork()` child can
/// use it whatever the parent's threads hold). In the parent it grants once,
/// then answers `Unavailable` for ever if `uncertain_in_parent` (the parent's
/// renewal thread then records a failure again and again); in a child it
/// waits `child_delay` before each grant.
fn lock_free_source(uncertain_in_parent: bool, child_delay: Duration) -> impl GrantSource {
    let parent = std::process::id();
    let first = AtomicBool::new(true);
    source_fn(move |r: &GrantRequest| {
        if std::process::id() == parent {
            if uncertain_in_parent && !first.swap(false, Ordering::SeqCst) {
                return Err(GrantError::Unavailable("uncertain in the parent".into()));
            }
        } else {
            std::thread::sleep(child_delay);
        }
        let start = r.now.max(r.not_before);
        Ok(Grant {
            namespace: r.namespace.clone(),
            worker: 1,
            incarnation: r.incarnation,
            grant_id: r.request_id,
            start,
            end: start + r.duration,
        })
    })
}

/// A `fork()` that lands while a renewal thread holds one of its locks must
/// not leave the child hanging on it. Several generators retry an uncertain
/// authority with a 1 ns backoff (their renewal threads record a failure in
/// a loop) while the test forks; every child must issue from each generator
/// within the watchdog's bound.
#[test]
fn a_child_forked_while_renewal_records_a_failure_never_hangs() {
    let generators: Vec<Generator> = (0..8)
        .map(|_| {
            Generator::builder(
                layout(),
                "fork-hang",
                lock_free_source(true, Duration::ZERO),
            )
            .backoff(Duration::from_nanos(1), Duration::from_nanos(1))
            .startup_timeout(Duration::from_secs(5))
            .start()
            .unwrap()
        })
        .collect();
    let started = Instant::now();
    // Two threads fork at once, as independent parts of a program may: one
    // fork must not let sections start while the other is still forking.
    let counts: Vec<(u32, u32, u32)> = std::thread::scope(|s| {
        let forker = || {
            let (mut forks, mut hung, mut failed) = (0, 0, 0);
            while forks < 1_500 && started.elapsed() < Duration::from_secs(20) {
                forks += 1;
                // A hang is for ever; 30 s leaves room for a child starved
                // of CPU by the parent's spinning renewal threads (one child
                // in 3,000 once outlived a 10 s watchdog on a loaded
                // machine; its thread states are printed if it happens).
                match fork_with_watchdog(Duration::from_secs(30), || {
                    i32::from(!generators.iter().all(|g| g.next_id().is_ok()))
                }) {
                    ChildEnd::Exited(0) => {}
                    ChildEnd::Exited(_) => failed += 1,
                    ChildEnd::Hung => hung += 1,
                }
            }
            (forks, hung, failed)
        };
        let a = s.spawn(forker);
        let b = s.spawn(forker);
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    let (forks, hung, failed) = counts
        .iter()
        .fold((0, 0, 0), |t, c| (t.0 + c.0, t.1 + c.1, t.2 + c.2));
    assert_eq!(
        (hung, failed),
        (0, 0),
        "of {forks} children, {hung} hung and {failed} failed to issue"
    );
}

/// While one thread of a `fork()` child re-activates the generator, the
/// child's other threads wait for it and then issue; they are not refused
/// with `Unavailable` in the meantime.
#[test]
fn other_threads_of_a_child_wait_for_the_reactivation() {
    let g = Generator::builder(
        layout(),
        "fork-wait",
        lock_free_source(false, Duration::from_millis(200)),
    )
    .start()
    .unwrap();
    assert!(g.next_id().is_ok());
    let end = fork_with_watchdog(Duration::from_secs(10), || {
        std::thread::scope(|s| {
            let reactivating = s.spawn(|| g.next_id());
            // The source answers the child after 200 ms: this call comes
            // while the first one re-activates.
            std::thread::sleep(Duration::from_millis(50));
            let other = g.next_id();
            let first = reactivating.join().unwrap();
            match (first, other) {
                (Ok(a), Ok(b)) if a != b => 0,
                (Err(_), _) => 1,
                (_, Err(e)) if e.kind() == ErrorKind::Unavailable => 2,
                _ => 3,
            }
        })
    });
    assert_eq!(
        end,
        ChildEnd::Exited(0),
        "1: the re-activating call failed, 2: the other call was Unavailable, 3: other"
    );
}
