//! A throwaway `redis-server` the harness owns, so that it can lose its
//! state mid-run: 127.0.0.1, a free port, no persistence of its own
//! (`--save ""`, `--appendonly no`), its dump file in a temporary
//! directory. The state-loss faults (docs/RELIABILITY.md, "State-loss
//! mode") kill it with SIGKILL and start it again on the same port, either
//! empty (the dump removed) or from a dump `SAVE`d seconds earlier.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::Connection;

use crate::pgserver::free_port;

/// The store-wide state-loss record of the Redis authority
/// (docs/AUTHORITIES.md, "State loss": `run_id`, `epoch`,
/// `quarantine_until`, `reason`).
pub const STORE_KEY: &str = "grantid:store";

/// The dump file's name inside the server's directory.
const DUMP: &str = "torture.rdb";

/// A running throwaway server; dropped means killed and deleted.
#[derive(Debug)]
pub struct RedisServer {
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

fn failed(what: &str, e: impl std::fmt::Display) -> String {
    format!("redis: {what}: {e}")
}

impl RedisServer {
    /// Starts a server in a new temporary directory.
    pub fn start() -> Result<RedisServer, String> {
        let dir = std::env::temp_dir().join(crate::scratch_name("grantid-torture-redis"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let mut server = RedisServer {
            dir,
            port,
            child: None,
        };
        server.launch()?;
        Ok(server)
    }

    /// Starts `redis-server` on the port and waits until it answers `PING`.
    /// It loads the dump file when there is one.
    fn launch(&mut self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dbfilename", DUMP])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server ({e}): apt-get install redis-server")
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "redis-server on port {} does not answer: {}",
                    self.port,
                    tail.trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's URL, without grantid's options.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A new connection (with a 2 s timeout).
    pub fn connection(&self) -> Result<Connection, String> {
        let client = redis::Client::open(self.url()).map_err(|e| failed("bad URL", e))?;
        let c = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(|e| failed("cannot connect", e))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| failed("timeout", e))?;
        Ok(c)
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, String> {
        cmd.query(&mut self.connection()?)
            .map_err(|e| failed("command failed", e))
    }

    /// The server's `run_id` (`INFO server`): new on every start.
    pub fn run_id(&self) -> Result<String, String> {
        let info: String = self.query(redis::cmd("INFO").arg("server"))?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|v| v.trim().to_owned())
            .ok_or_else(|| "redis: INFO server has no run_id".into())
    }

    /// Writes the dump file now (`SAVE`): the state a later
    /// [`RedisServer::restart`] from the dump falls back to.
    pub fn save(&self) -> Result<(), String> {
        self.query::<String>(&redis::cmd("SAVE")).map(drop)
    }

    /// The `run_id` and `reason` fields of the store record (`None` when
    /// absent).
    pub fn store_record(&self) -> Result<(Option<String>, Option<String>), String> {
        self.query(
            redis::cmd("HMGET")
                .arg(STORE_KEY)
                .arg("run_id")
                .arg("reason"),
        )
    }

    /// FAULT INJECTION ONLY: rewrites the store record as if this server
    /// had always served the store and never lost anything (the new
    /// `run_id`, no quarantine) — what a state-loss check that is not there
    /// would leave. A run with it must find duplicates.
    pub fn defeat_quarantine(&self) -> Result<(), String> {
        let run_id = self.run_id()?;
        self.query::<i64>(
            redis::cmd("HSET")
                .arg(STORE_KEY)
                .arg("run_id")
                .arg(run_id)
                .arg("quarantine_until")
                .arg(0)
                .arg("reason")
                .arg("FAULT INJECTION: state loss hidden by the torture harness"),
        )
        .map(drop)
    }

    /// SIGKILL (no shutdown, nothing saved) and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the killed server again on the same port: from the last dump
    /// (`from_dump`), or empty (the dump is deleted first).
    pub fn restart(&mut self, from_dump: bool) -> Result<(), String> {
        self.kill9();
        let dump = self.dir.join(DUMP);
        if from_dump && !dump.is_file() {
            return Err(format!("no dump file {} to restart from", dump.display()));
        }
        if !from_dump {
            match std::fs::remove_file(&dump) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", dump.display())),
            }
        }
        self.launch()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
