//! A real fork(): the child never issues from its parent's grant.

mod common;

use std::collections::HashSet;

use common::Scripted;
use grantid::{
    ErrorKind, ForkPolicy, Generator, Grant, GrantError, GrantRequest, GrantSource, Layout,
    MemoryAuthority,
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
