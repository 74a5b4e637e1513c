//! The harness's worker processes: spawn, signal, restart, read status,
//! stop cleanly. Every process start is a fresh incarnation with its own
//! record file `pSS-GGG.ids` (slot, start number) and status file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::status::Status;

/// What every worker process is started with.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The worker binary.
    pub exe: PathBuf,
    /// Authority URL.
    pub url: String,
    /// Namespace of the run.
    pub namespace: String,
    /// Threads per process.
    pub threads: usize,
    /// IDs per second per thread (0 = unlimited).
    pub rate: u64,
    /// Grant length (ms).
    pub grant_ms: u64,
    /// Horizon (ms).
    pub horizon_ms: u64,
    /// `max_drift_ms`.
    pub max_drift_ms: u64,
}

/// How one process of a slot is started.
#[derive(Debug, Clone, Copy, Default)]
pub struct Launch {
    /// Run the stepping clock.
    pub clock_faults: bool,
    /// Ask for this worker value first.
    pub prefer_worker: Option<u32>,
    /// FAULT INJECTION: a fixed fake grant of this worker value.
    pub fake_grant: Option<u32>,
}

/// One started process.
#[derive(Debug)]
pub struct Proc {
    /// The slot it fills.
    pub slot: usize,
    /// Its record file.
    pub ids: PathBuf,
    /// Its status file.
    pub status: PathBuf,
    /// Its stderr.
    pub log: PathBuf,
    /// How it was started.
    pub launch: Launch,
    child: Option<Child>,
    /// Ended by the harness with SIGKILL.
    pub killed: bool,
    /// Currently SIGSTOPped.
    pub stopped: bool,
}

impl Proc {
    /// Its pid while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// Its last status snapshot.
    pub fn read_status(&self) -> Option<Status> {
        Status::read(&self.status).ok().flatten()
    }
}

/// The processes of a run: one live process per slot, and every process
/// ever started (for the final check).
#[derive(Debug)]
pub struct Fleet {
    spec: WorkerSpec,
    dir: PathBuf,
    stop_file: PathBuf,
    /// Every process ever started, in start order.
    pub all: Vec<Proc>,
    /// Index into `all` of each slot's live process.
    pub live: Vec<usize>,
    /// Processes that exited without being told to (crashes).
    pub unexpected_exits: Vec<String>,
}

fn send(pid: i32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) with a pid of a child we started (still unreaped, so
    // the pid cannot have been reused) and a valid signal number.
    unsafe { libc::kill(pid, sig) == 0 }
}

impl Fleet {
    /// An empty fleet writing its files under `dir`.
    pub fn new(spec: WorkerSpec, dir: &Path) -> Fleet {
        Fleet {
            spec,
            dir: dir.to_owned(),
            stop_file: dir.join("stop"),
            all: Vec::new(),
            live: Vec::new(),
            unexpected_exits: Vec::new(),
        }
    }

    /// What every process is started with.
    pub fn spec(&self) -> &WorkerSpec {
        &self.spec
    }

    /// The file whose existence tells every worker to stop.
    pub fn stop_file(&self) -> &Path {
        &self.stop_file
    }

    /// Starts a process for `slot` (a new slot when `slot == live.len()`).
    pub fn spawn(&mut self, slot: usize, launch: Launch) -> Result<(), String> {
        let n = self.all.len();
        let base = self.dir.join(format!("p{slot:02}-{n:03}"));
        let ids = base.with_extension("ids");
        let status = base.with_extension("status");
        let log = base.with_extension("log");
        let s = &self.spec;
        let mut cmd = Command::new(&s.exe);
        cmd.arg("--url")
            .arg(&s.url)
            .arg("--namespace")
            .arg(&s.namespace)
            .arg("--out")
            .arg(&ids)
            .arg("--status")
            .arg(&status)
            .arg("--stop-file")
            .arg(&self.stop_file)
            .args(["--threads", &s.threads.to_string()])
            .args(["--rate", &s.rate.to_string()])
            .args(["--grant-ms", &s.grant_ms.to_string()])
            .args(["--horizon-ms", &s.horizon_ms.to_string()])
            .args(["--max-drift-ms", &s.max_drift_ms.to_string()]);
        if launch.clock_faults {
            cmd.arg("--clock-faults");
        }
        if let Some(w) = launch.prefer_worker {
            cmd.args(["--prefer-worker", &w.to_string()]);
        }
        if let Some(w) = launch.fake_grant {
            cmd.args(["--fault-shared-fake-grant", &w.to_string()]);
        }
        let err = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", s.exe.display()))?;
        self.all.push(Proc {
            slot,
            ids,
            status,
            log,
            launch,
            child: Some(child),
            killed: false,
            stopped: false,
        });
        if slot == self.live.len() {
            self.live.push(n);
        } else {
            self.live[slot] = n;
        }
        Ok(())
    }

    /// The live process of `slot`.
    pub fn proc(&self, slot: usize) -> &Proc {
        &self.all[self.live[slot]]
    }

    /// SIGKILLs the live process of `slot` and reaps it.
    pub fn kill9(&mut self, slot: usize) {
        let p = &mut self.all[self.live[slot]];
        if let Some(mut c) = p.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        p.killed = true;
        p.stopped = false;
    }

    /// SIGSTOPs (`stop`) or SIGCONTs the live process of `slot`.
    pub fn pause(&mut self, slot: usize, stop: bool) -> bool {
        let p = &mut self.all[self.live[slot]];
        let ok = p
            .pid()
            .is_some_and(|pid| send(pid, if stop { libc::SIGSTOP } else { libc::SIGCONT }));
        if ok {
            p.stopped = stop;
        }
        ok
    }

    /// Polls `slot`'s status until `pred` holds, up to `timeout`.
    pub fn wait_status(
        &self,
        slot: usize,
        timeout: Duration,
        pred: impl Fn(&Status) -> bool,
    ) -> Option<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.proc(slot).read_status()
                && pred(&s)
            {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Restarts any live process that exited on its own (a crash: noted in
    /// `unexpected_exits` with its stderr).
    pub fn reap_crashes(&mut self) -> Result<(), String> {
        for slot in 0..self.live.len() {
            let i = self.live[slot];
            let exited = match self.all[i].child.as_mut() {
                Some(c) => c.try_wait().map_err(|e| e.to_string())?,
                None => None,
            };
            if let Some(code) = exited {
                let p = &mut self.all[i];
                p.child = None;
                let tail = std::fs::read_to_string(&p.log).unwrap_or_default();
                self.unexpected_exits.push(format!(
                    "{} exited with {code}: {}",
                    p.ids.display(),
                    tail.trim()
                ));
                let launch = p.launch;
                self.spawn(slot, launch)?;
            }
        }
        Ok(())
    }

    /// Asks every live process to stop (stop file), resumes stopped ones,
    /// and waits up to `timeout`; processes still running then are killed
    /// and reported.
    pub fn stop_all(&mut self, timeout: Duration) -> Vec<String> {
        let _ = File::create(&self.stop_file);
        for slot in 0..self.live.len() {
            if self.proc(slot).stopped {
                self.pause(slot, false);
            }
        }
        let deadline = Instant::now() + timeout;
        let mut problems = Vec::new();
        for p in &mut self.all {
            let Some(mut c) = p.child.take() else {
                continue;
            };
            loop {
                match c.try_wait() {
                    Ok(Some(code)) => {
                        if !code.success() {
                            let tail = std::fs::read_to_string(&p.log).unwrap_or_default();
                            problems.push(format!(
                                "{} ended with {code}: {}",
                                p.ids.display(),
                                tail.trim()
                            ));
                        }
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        problems.push(format!("{} did not stop in time", p.ids.display()));
                        break;
                    }
                }
            }
        }
        problems
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in &mut self.all {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
