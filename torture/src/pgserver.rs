//! A throwaway PostgreSQL server the harness owns, so it can stop and start
//! it mid-run: `initdb` in a temporary directory, trust authentication,
//! 127.0.0.1 on a free port. PostgreSQL refuses to run as root: as root,
//! every server command runs as the `postgres` user (`su postgres`) on a
//! directory that user owns.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How the server is stopped (`pg_ctl stop -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Clean shutdown (`fast`: sessions are ended, a checkpoint is written).
    Fast,
    /// A crash (`immediate`: no checkpoint; WAL replay on the next start).
    Immediate,
}

/// A running throwaway server; dropped means stopped and deleted.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    running: bool,
    /// With TLS on: the CA that signed the server's certificate.
    ca: Option<PathBuf>,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a shell command line, as `postgres` when we are root.
fn run_as_pg(cmd: &str) -> Result<(), String> {
    let out = if is_root() {
        Command::new("su")
            .args(["postgres", "-s", "/bin/sh", "-c", cmd])
            .output()
    } else {
        Command::new("sh").args(["-c", cmd]).output()
    }
    .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The directory holding `pg_ctl` and `initdb`: `$GRANTID_PG_BIN`, else the
/// newest `/usr/lib/postgresql/*/bin`, else the one on `PATH`.
pub fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("GRANTID_PG_BIN").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("pg_ctl").is_file() && b.join("initdb").is_file())
        .collect();
    found.sort();
    if let Some(b) = found.pop() {
        return Some(b);
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p).find(|d| d.join("pg_ctl").is_file() && d.join("initdb").is_file())
    })
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

impl PgServer {
    /// Creates and starts a server in a new temporary directory.
    pub fn start() -> Result<PgServer, String> {
        Self::start_with(false)
    }

    /// Like [`PgServer::start`], with TLS on as well (`ssl=on`, a
    /// certificate for 127.0.0.1 and localhost from a throwaway CA made with
    /// openssl): [`PgServer::authority_url`] then verifies it.
    pub fn start_tls() -> Result<PgServer, String> {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Result<PgServer, String> {
        let bin = find_bin()
            .ok_or("no PostgreSQL server binaries (install postgresql, or set GRANTID_PG_BIN)")?;
        // As root the server runs as `postgres`, which must reach the
        // directory: /tmp rather than a $TMPDIR that may sit under /root.
        let base = if is_root() {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(crate::scratch_name("grantid-torture-pg"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres"])
                .arg(&dir)
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !ok.success() {
                let _ = std::fs::remove_dir_all(&dir);
                return Err("chown postgres failed: is there a postgres user?".into());
            }
        }
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let mut server = PgServer {
            bin,
            dir,
            port,
            running: false,
            ca: None,
        };
        run_as_pg(&format!(
            "{} -D {} -A trust -U postgres --no-sync >{} 2>&1",
            quote(&server.bin.join("initdb")),
            quote(&server.data()),
            quote(&server.dir.join("initdb.log"))
        ))?;
        if tls {
            server.make_certificates()?;
        }
        server.start_again()?;
        Ok(server)
    }

    /// A CA, and a server certificate and key signed by it
    /// ([`crate::certs`]), in the server's directory, owned by the server's
    /// user with the key private, as PostgreSQL requires.
    fn make_certificates(&mut self) -> Result<(), String> {
        let certs = crate::certs::Certs::make(&self.dir)?;
        let (key, crt) = (quote(&certs.server_key), quote(&certs.server_cert));
        if is_root() {
            let ok = Command::new("chown")
                .arg("postgres")
                .args([&certs.server_key, &certs.server_cert])
                .status()
                .map_err(|e| format!("chown: {e}"))?;
            if !ok.success() {
                return Err("chown postgres of the server's key failed".into());
            }
        }
        run_as_pg(&format!("chmod 600 {key} && test -r {crt}"))?;
        self.ca = Some(certs.ca);
        Ok(())
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server's URL (user `postgres`, database `postgres`), plain text.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL the authority is given: [`PgServer::url`], or with TLS on,
    /// the server by its host name with its certificate verified
    /// (`sslmode=verify-full`).
    pub fn authority_url(&self) -> String {
        match &self.ca {
            Some(ca) => format!(
                "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
                self.port,
                ca.display()
            ),
            None => self.url(),
        }
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Starts the stopped server again on the same port.
    pub fn start_again(&mut self) -> Result<(), String> {
        let mut opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=100",
            self.port,
            quote(&self.dir)
        );
        if self.ca.is_some() {
            opts.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                quote(&self.dir.join("server.crt")),
                quote(&self.dir.join("server.key"))
            ));
        }
        run_as_pg(&format!(
            "{} -D {} -l {} -w -t 60 -o \"{}\" start >/dev/null",
            quote(&self.bin.join("pg_ctl")),
            quote(&self.data()),
            quote(&self.log_path()),
            opts
        ))?;
        self.running = true;
        // pg_ctl -w waits for the socket; make sure TCP answers too.
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if postgres::Client::connect(&self.url(), postgres::NoTls).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("the server on port {} does not answer", self.port))
    }

    /// Stops the server.
    pub fn stop(&mut self, mode: StopMode) -> Result<(), String> {
        let m = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        run_as_pg(&format!(
            "{} -D {} -m {m} -w -t 60 stop >/dev/null",
            quote(&self.bin.join("pg_ctl")),
            quote(&self.data())
        ))?;
        self.running = false;
        Ok(())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let _ = self.stop(StopMode::Immediate);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
