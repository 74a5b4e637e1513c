//! The deployment fuzzer (docs/RELIABILITY.md, "Deployment fuzzer").
//!
//! Each case draws a deployment from the configurations grantid accepts,
//! runs it as an operator would, and injects faults while it runs:
//!
//! * an engine: `file:`, `static:N?state=`, PostgreSQL (each process over
//!   TLS with the certificate checked, over TLS unchecked, or in plain
//!   text), Redis, MariaDB, etcd, or `grpc://` through one or two `grantid
//!   serve` over `file:` or Redis — in one case in two `grpcs://` to
//!   servers with TLS, sometimes mTLS, and sometimes a token per process
//!   (bound to its namespace or not), the host by name or by address;
//! * 2 to 5 processes, each a `grantid next` with options of its own: the
//!   layout (worker, sequence and datacenter bits, tick; sometimes another
//!   layout than the others on the same namespace), `datacenter=`,
//!   `max_lead_ms`, `clock_skew_ms`, horizon and grant length, the state
//!   path spelled in one of several ways (absolute, through a symbolic link
//!   to the file or to its directory, with `.` or `..`, under
//!   `/proc/self/root`), and a namespace shared with the others or not;
//! * a fault schedule: kill -9 and restart of a process, SIGSTOP across a
//!   quarantine, a server restart (PostgreSQL crash, Redis restarted empty
//!   or from a stale snapshot, a `grantid serve` killed and started again),
//!   a state file deleted or restored from an earlier copy, the servers'
//!   certificate rotated (SIGHUP or a file change), a process's token
//!   rotated or revoked.
//!
//! * a hostile client, in cases with tokens (always with `--focus
//!   hostile`): a token holder, scoped or not, that sends crafted
//!   `GrantService` calls, and a peer that holds idle and slow connections
//!   ([`crate::hostile`]).
//!
//! The invariants: every ID any process of the case printed is unique among
//! the IDs of its namespace (a process refused at start prints none); and,
//! in a case with a hostile client, every namespace outside its token's
//! scope still issues at the case's end (a new generator's first IDs
//! within [`crate::hostile::PROBE_WITHIN`]). A case that breaks one prints
//! its seed; `deploy-fuzz --seed S --cases 1` runs it again.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pgserver::{PgServer, StopMode, free_port};
use crate::redisserver::RedisServer;

/// The engines a case can draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Engine {
    File,
    Static,
    Postgres,
    Redis,
    Mysql,
    Etcd,
    /// A table of its own per case on the test DynamoDB (moto).
    Dynamodb,
    GrpcFile,
    GrpcRedis,
    /// `grantid serve` on the case's DynamoDB table (the service design's
    /// deployment).
    GrpcDynamodb,
    /// Two `grantid serve` on two hosts (a home directory each) without
    /// `--authority`.
    GrpcDefault,
    /// `grantid serve --authority static:N` without a state file.
    GrpcStatic,
}

impl Engine {
    const ALL: [Engine; 12] = [
        Engine::File,
        Engine::Static,
        Engine::Postgres,
        Engine::Redis,
        Engine::Mysql,
        Engine::Etcd,
        Engine::Dynamodb,
        Engine::GrpcFile,
        Engine::GrpcRedis,
        Engine::GrpcDynamodb,
        Engine::GrpcDefault,
        Engine::GrpcStatic,
    ];

    fn name(self) -> &'static str {
        match self {
            Engine::File => "file",
            Engine::Static => "static",
            Engine::Postgres => "postgres",
            Engine::Redis => "redis",
            Engine::Mysql => "mysql",
            Engine::Etcd => "etcd",
            Engine::Dynamodb => "dynamodb",
            Engine::GrpcFile => "grpc-file",
            Engine::GrpcRedis => "grpc-redis",
            Engine::GrpcDynamodb => "grpc-dynamodb",
            Engine::GrpcDefault => "grpc-default",
            Engine::GrpcStatic => "grpc-static",
        }
    }

    fn is_grpc(self) -> bool {
        matches!(
            self,
            Engine::GrpcFile
                | Engine::GrpcRedis
                | Engine::GrpcDynamodb
                | Engine::GrpcDefault
                | Engine::GrpcStatic
        )
    }

    fn parse(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// The first case's seed; case `i` has seed `seed + i`.
    pub seed: u64,
    /// How many cases (at most).
    pub cases: u64,
    /// Stop starting cases after this long.
    pub duration: Option<Duration>,
    /// How long the processes of one case run.
    pub case_ms: u64,
    /// The `grantid` binary.
    pub grantid: PathBuf,
    /// The engines to draw from (those this machine has).
    pub engines: Vec<Engine>,
    /// Keep every case's files (not only a failing case's).
    pub keep: bool,
    /// Draw every case around one dimension (`--focus`).
    pub focus: Option<Focus>,
}

/// A dimension a run draws every case around, as a targeted generator
/// would: the space is the same, the odds are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// Every case has a datacenter split, an epoch a moment before its
    /// start, and a second process with the split's per-datacenter part as
    /// a whole layout on the same namespace.
    Split,
    /// Every case runs on etcd: its keys are copied, two processes restart
    /// (so they hold workers the copy does not know), the copy is put back
    /// as a restore that keeps the store's identity and revision would
    /// (`etcdutl snapshot restore --bump-revision`), and a third process
    /// restarts after the first renewal that meets the restored store but
    /// before the last.
    Restore,
    /// Every case runs on Redis with two workers: a process with a long
    /// lead is stopped across a restart from a stale snapshot, which a
    /// process with a short lead detects; the short-lead process starts
    /// again before the long-lead one wakes (docs/RELIABILITY.md).
    Lead,
    /// Every case runs through `grantid serve` over TLS with a token per
    /// process, and half its faults rotate the servers' certificate or a
    /// process's token, or revoke a token.
    Tls,
    /// As `Tls`, and every case has a hostile client.
    Hostile,
}

impl Focus {
    const NAMES: [(&'static str, Focus); 5] = [
        ("split", Focus::Split),
        ("restore", Focus::Restore),
        ("lead", Focus::Lead),
        ("tls", Focus::Tls),
        ("hostile", Focus::Hostile),
    ];

    fn parse(name: &str) -> Option<Focus> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
    }

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, f)| *f == self)
            .map_or("", |(n, _)| n)
    }
}

pub const HELP: &str = "deploy-fuzz: draws deployments, runs them with faults, and checks that no ID repeats

Usage: deploy-fuzz [--seed S] [--cases N] [--duration-s S] [--case-ms MS]
                   [--grantid PATH] [--engines file,static,postgres,redis,mysql,etcd,dynamodb,grpc-file,...]

  --seed S        the first case's seed (default: random); case i runs seed S+i,
                  and `--seed S --cases 1` replays one case
  --cases N       at most N cases (default 1000000)
  --duration-s S  start no case after S seconds (default: none)
  --case-ms MS    how long each case's processes run (default 4000)
  --grantid PATH  the grantid binary (default: beside this one)
  --keep          keep every case's files (a failing case's are always kept)
  --engines LIST  the engines to draw (default: all; mysql, etcd and dynamodb
                  need GRANTID_TEST_MYSQL_URL, GRANTID_TEST_ETCD_URL and
                  GRANTID_TEST_DYNAMODB_ENDPOINT, grpc needs
                  the binary's etcd-free serve)
  --focus DIM     draw every case around one dimension: `split` (a datacenter
                  split, a recent epoch, and the split's per-datacenter part
                  as a whole layout beside it on the namespace), `restore`
                  (etcd restored from a copy of its keys, identity and
                  revision kept, between two processes' renewals), `lead`
                  (Redis restarted stale under a stopped long-lead process,
                  detected by a short-lead one; cases run 12 s), `tls`
                  (`grpcs://` to servers with TLS and a token per process;
                  certificates and tokens rotated, tokens revoked), `hostile` (as
                  `tls`, and a hostile client in every case: crafted GrantService
                  calls from a scoped or unscoped token, idle and slow connections;
                  every namespace outside its scope must still issue)
";

impl FuzzConfig {
    /// Parses the command line; `Ok(None)` for `--help`.
    pub fn from_argv(args: impl Iterator<Item = String>) -> Result<Option<FuzzConfig>, String> {
        let mut c = FuzzConfig {
            seed: fastrand::u64(..1 << 48),
            cases: 1_000_000,
            duration: None,
            case_ms: 4_000,
            grantid: std::env::current_exe()
                .ok()
                .and_then(|p| Some(p.parent()?.join("grantid")))
                .unwrap_or_else(|| PathBuf::from("grantid")),
            engines: Engine::ALL.to_vec(),
            keep: false,
            focus: None,
        };
        let mut args = args.peekable();
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or(format!("{a} needs a value"));
            let number = |v: String| {
                v.parse::<u64>()
                    .map_err(|_| format!("{a}: {v:?} is not a number"))
            };
            match a.as_str() {
                "--help" | "-h" => return Ok(None),
                "--seed" => c.seed = number(value()?)?,
                "--cases" => c.cases = number(value()?)?,
                "--duration-s" => c.duration = Some(Duration::from_secs(number(value()?)?)),
                "--case-ms" => c.case_ms = number(value()?)?.max(1_000),
                "--grantid" => c.grantid = PathBuf::from(value()?),
                "--keep" => c.keep = true,
                "--focus" => {
                    let v = value()?;
                    c.focus = Some(Focus::parse(&v).ok_or(format!("unknown focus {v:?}"))?);
                }
                "--engines" => {
                    c.engines = value()?
                        .split(',')
                        .map(|e| Engine::parse(e).ok_or(format!("unknown engine {e:?}")))
                        .collect::<Result<_, _>>()?;
                }
                _ => return Err(format!("unknown argument {a:?}")),
            }
        }
        if c.focus == Some(Focus::Lead) {
            // Its schedule runs to 10.6 s.
            c.case_ms = c.case_ms.max(12_000);
        }
        Ok(Some(c))
    }

    /// The command that replays case `seed` of this run: the same engines,
    /// focus and case length draw the same case.
    fn replay(&self, seed: u64) -> String {
        let mut line = format!("deploy-fuzz --seed {seed} --cases 1");
        if self.engines != Engine::ALL {
            let names: Vec<&str> = self.engines.iter().map(|e| e.name()).collect();
            let _ = write!(line, " --engines {}", names.join(","));
        }
        if let Some(focus) = self.focus {
            let _ = write!(line, " --focus {}", focus.name());
        }
        if self.case_ms != 4_000 && self.focus != Some(Focus::Lead) {
            let _ = write!(line, " --case-ms {}", self.case_ms);
        }
        line
    }
}

/// One process of a case: the arguments of its `grantid next` (after the
/// authority) and which namespace it issues in.
#[derive(Debug, Clone)]
struct ProcSpec {
    authority: String,
    namespace: String,
    args: Vec<String>,
    /// A short description for the report.
    label: String,
    /// Another layout than the case's on the namespace, if drawn.
    variant: Option<&'static str>,
}

impl ProcSpec {
    /// Whether it issues in one datacenter of a split (`datacenter=` in its
    /// URL, `--datacenter`, or both).
    fn splits(&self) -> bool {
        self.authority.contains("datacenter=") || self.args.iter().any(|a| a == "--datacenter")
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL a process and start it again.
    KillRestart(usize),
    /// SIGKILL a process for good (a scale-down).
    Kill(usize),
    /// SIGSTOP a process for this many ms.
    Stop(usize, u64),
    /// Copy the state file (a backup) / the Redis dump (`SAVE`).
    Backup,
    /// Delete the state file.
    FileDelete,
    /// Put back the copy taken by the last `Backup`.
    FileRestore,
    /// SIGKILL the Redis server and start it empty.
    RedisEmpty,
    /// SIGKILL the Redis server and start it from the last `SAVE`.
    RedisStale,
    /// Crash PostgreSQL (immediate stop) and start it again.
    PgCrash,
    /// Copy the case's etcd keys.
    EtcdCopy,
    /// Put back the keys of the last `EtcdCopy` (every key of the case's
    /// namespaces deleted, the copy's put), the processes stopped meanwhile
    /// as during a restore: the cluster's identity and revision go on.
    EtcdRestore,
    /// SIGKILL process `.0` and start it again once process `.1` has logged
    /// two events (calls answered) since the last `EtcdRestore` (`-v`): the
    /// second is a call made after the restore.
    KillRestartAfterEvent(usize, usize),
    /// SIGKILL a `grantid serve` and start it again on its port.
    ServeRestart(usize),
    /// A new key and certificate for the servers, put in place of the old
    /// ones; the servers are sent SIGHUP, or (one case in two) left to see
    /// the files change.
    CertRotate,
    /// A new token for a process: added to the servers' token file
    /// (SIGHUP), written to the process's token file, and its old token
    /// then taken out of the servers' file.
    TokenRotate(usize),
    /// A process's token taken out of the servers' token file (SIGHUP):
    /// its calls are refused from then on.
    TokenRevoke(usize),
}

/// `grantid serve` over TLS (grpc engines): the processes' URLs are
/// `grpcs://` with the CA, and with a client certificate under mTLS.
#[derive(Debug, Clone)]
struct ServeTls {
    /// `--tls-client-ca`: every process presents the client certificate.
    mtls: bool,
    /// `--token-file`: each process has a token of its own, bound to its
    /// namespace (`true`) or to every namespace.
    tokens: Option<Vec<bool>>,
}

/// A drawn case.
struct Case {
    seed: u64,
    engine: Engine,
    procs: Vec<ProcSpec>,
    /// (ms after the start, fault), in time order.
    faults: Vec<(u64, Fault)>,
    /// The `grantid serve` authorities (grpc engines): one or two servers.
    serve: Vec<String>,
    /// The servers' TLS, mTLS and tokens, if drawn.
    tls: Option<ServeTls>,
    /// A hostile client (cases with tokens), if drawn.
    hostile: Option<crate::hostile::Plan>,
    /// The layout's epoch this many ms before the case starts (`--epoch-ms`
    /// of every process), or the default epoch. A recent epoch makes the
    /// timestamps small, so IDs of layouts that encode time at different
    /// scales meet within a case.
    recent_epoch: Option<u64>,
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct FuzzOutcome {
    pub cases: u64,
    pub ids: u64,
    pub processes: u64,
    pub refused: u64,
    /// Cases per engine.
    pub engines: BTreeMap<&'static str, u64>,
    /// How often each fault was injected.
    pub faults: BTreeMap<&'static str, u64>,
    /// How often each drawn dimension was used.
    pub covered: BTreeMap<&'static str, u64>,
    /// Why processes were refused at start.
    pub refusals: BTreeMap<&'static str, u64>,
    /// Cases whose `grantid serve` refused to start.
    pub refused_deployments: u64,
    /// What the hostile clients sent and saw, and the probes of the
    /// namespaces outside their scope.
    pub hostile: BTreeMap<&'static str, u64>,
    /// One line per broken case (with its seed).
    pub failures: Vec<String>,
}

/// The servers a run keeps across cases.
struct Shared {
    pg: Option<PgServer>,
    mysql: Option<String>,
    etcd: Option<String>,
    /// The test DynamoDB's endpoint (GRANTID_TEST_DYNAMODB_ENDPOINT).
    dynamodb: Option<String>,
}

/// Runs cases until `config.cases` or `config.duration`.
pub fn run(config: &FuzzConfig) -> Result<FuzzOutcome, String> {
    let work = std::env::temp_dir().join(crate::scratch_name("grantid-deploy-fuzz"));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut engines = config.engines.clone();
    let env = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let mut shared = Shared {
        pg: None,
        mysql: env("GRANTID_TEST_MYSQL_URL"),
        etcd: env("GRANTID_TEST_ETCD_URL"),
        dynamodb: env("GRANTID_TEST_DYNAMODB_ENDPOINT"),
    };
    if engines.contains(&Engine::Postgres) {
        // With TLS on beside plain text, so processes draw how they reach
        // it (openssl makes the certificates; without it, plain text only).
        let started = PgServer::start_tls().or_else(|e| {
            eprintln!("deploy-fuzz: PostgreSQL without TLS ({e})");
            PgServer::start()
        });
        match started {
            Ok(pg) => {
                declare_new(config, &pg.url())?;
                shared.pg = Some(pg);
            }
            Err(e) => {
                eprintln!("deploy-fuzz: no PostgreSQL ({e}); its cases are left out");
                engines.retain(|e| *e != Engine::Postgres);
            }
        }
    }
    if shared.mysql.is_none() {
        engines.retain(|e| *e != Engine::Mysql);
    }
    if shared.etcd.is_none() {
        engines.retain(|e| *e != Engine::Etcd);
    }
    if shared.dynamodb.is_none() {
        engines.retain(|e| !matches!(e, Engine::Dynamodb | Engine::GrpcDynamodb));
    }
    if engines.is_empty() {
        return Err("no engine to draw from".into());
    }
    if config.focus == Some(Focus::Lead) && !engines.contains(&Engine::Redis) {
        return Err("--focus lead needs the redis engine".into());
    }
    if config.focus == Some(Focus::Restore) && shared.etcd.is_none() {
        return Err("--focus restore needs etcd (GRANTID_TEST_ETCD_URL)".into());
    }
    let started = Instant::now();
    let mut outcome = FuzzOutcome::default();
    for i in 0..config.cases {
        if config.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let seed = config.seed.wrapping_add(i);
        let dir = work.join(format!("case-{seed}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let case = draw(seed, &engines, &dir, &shared, config.focus);
        let line = run_case(config, &case, &dir, &mut shared, &mut outcome)?;
        println!("{line}");
        if outcome.failures.is_empty() && !config.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if outcome.failures.is_empty() && !config.keep {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        eprintln!(
            "deploy-fuzz: the failing cases' files are in {}",
            work.display()
        );
    }
    Ok(outcome)
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, from: &[T]) -> T {
    from[rng.usize(..from.len())]
}

/// Adds `key=value` to a URL's query.
fn with(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// Draws case `seed`.
fn draw(seed: u64, engines: &[Engine], dir: &Path, shared: &Shared, focus: Option<Focus>) -> Case {
    if focus == Some(Focus::Restore) {
        return draw_restore(seed, shared);
    }
    if focus == Some(Focus::Lead) {
        return draw_lead(seed);
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let tls_focus = matches!(focus, Some(Focus::Tls | Focus::Hostile));
    let grpc_engines: Vec<Engine> = engines
        .iter()
        .copied()
        .filter(|e| matches!(e, Engine::GrpcFile | Engine::GrpcRedis))
        .collect();
    let engine = if tls_focus && !grpc_engines.is_empty() {
        pick(&mut rng, &grpc_engines)
    } else {
        pick(&mut rng, engines)
    };
    let split_focus = focus == Some(Focus::Split);
    // The default epoch (2026-01-01), or one up to a second before the
    // case starts.
    let recent_epoch = (split_focus || rng.u8(..10) < 3).then(|| rng.u64(..1_000));
    // The layout every process starts from: few workers (so they are
    // recycled), few sequence bits and ticks of 1 to 4 ms (so a process
    // prints a few thousand IDs a second).
    // (`--focus split`: two workers per datacenter, so a worker given up
    // by one process is soon another's.)
    let worker_bits: u8 = if split_focus { 1 } else { rng.u8(2..=4) };
    let sequence_bits: u8 = rng.u8(1..=4);
    let tick: u64 = rng.u64(1..=4);
    let split: u8 = if split_focus || rng.u8(..10) < 3 {
        1
    } else {
        0
    };
    let shared_ns = rng.u8(..10) < 8;
    let tag = format!("{seed:x}");
    let state = dir.join("state").join("state.json");
    let _ = std::fs::create_dir_all(dir.join("state"));
    let _ = std::os::unix::fs::symlink(&state, dir.join("link.json"));
    let _ = std::os::unix::fs::symlink(dir.join("state"), dir.join("statelink"));
    let spellings = [
        state.clone(),
        dir.join("link.json"),
        dir.join("statelink").join("state.json"),
        dir.join("state").join(".").join("state.json"),
        dir.join("state")
            .join("..")
            .join("state")
            .join("state.json"),
        Path::new("/proc/self/root").join(state.strip_prefix("/").unwrap_or(&state)),
    ];
    let store_url = |rng: &mut fastrand::Rng| -> String {
        match engine {
            Engine::File | Engine::GrpcFile => {
                format!("file:{}", spellings[rng.usize(..spellings.len())].display())
            }
            Engine::Static => format!(
                "static:{}?state={}",
                rng.u8(..2),
                spellings[rng.usize(..spellings.len())].display()
            ),
            Engine::Postgres => shared.pg.as_ref().map_or_else(String::new, |p| {
                // Over TLS with the certificate checked, over TLS without
                // a check, or in plain text (libpq's default `prefer`
                // takes TLS when the server offers it): one store, however
                // each process reaches it.
                match rng.u8(..4) {
                    0 => p.authority_url(),
                    1 => with(&p.url(), "sslmode=require"),
                    2 => with(&p.url(), "sslmode=disable"),
                    _ => p.url(),
                }
            }),
            // The Redis server is started by the case (its port is set then).
            Engine::Redis | Engine::GrpcRedis => "redis://127.0.0.1:REDIS_PORT/".to_owned(),
            Engine::Mysql => shared.mysql.clone().unwrap_or_default(),
            Engine::Etcd => shared.etcd.clone().unwrap_or_default(),
            // The case's table (declared when the case starts).
            Engine::Dynamodb | Engine::GrpcDynamodb => dynamodb_url(shared, seed),
            // No --authority: the server's default.
            Engine::GrpcDefault => String::new(),
            Engine::GrpcStatic => format!("static:{}", rng.u8(..2)),
        }
    };
    let lead = |rng: &mut fastrand::Rng, url: String| -> String {
        let mut url = url;
        if let Some(ms) = pick(rng, &[None, Some(1_500u64), Some(3_000), Some(6_000)]) {
            url = with(&url, &format!("max_lead_ms={ms}"));
        }
        if rng.bool() {
            url = with(&url, "clock_skew_ms=200");
        }
        // A short lease grace recycles workers within a case (`--focus
        // split`: always).
        if split_focus || rng.u8(..3) == 0 {
            url = with(&url, "lease_grace_ms=200");
        }
        url
    };
    let grpc = engine.is_grpc();
    let serve: Vec<String> = if grpc {
        let servers = if engine == Engine::GrpcDefault {
            2
        } else {
            rng.usize(1..=2)
        };
        (0..servers)
            .map(|_| match store_url(&mut rng) {
                url if url.is_empty() => url,
                url => lead(&mut rng, url),
            })
            .collect()
    } else {
        Vec::new()
    };
    let count = if split_focus { 2 } else { rng.usize(2..=5) };
    let tls = (grpc && (tls_focus || rng.bool())).then(|| ServeTls {
        mtls: rng.bool(),
        tokens: (tls_focus || rng.bool()).then(|| (0..count).map(|_| rng.bool()).collect()),
    });
    let mut procs = Vec::new();
    for p in 0..count {
        let namespace = if shared_ns || p % 2 == 0 {
            format!("fz-{tag}-a")
        } else {
            format!("fz-{tag}-b")
        };
        let mut authority = if let Some(t) = &tls {
            // By name or by address: the certificate holds both.
            let host = pick(&mut rng, &["localhost", "127.0.0.1"]);
            let mut url = format!(
                "grpcs://{host}:PORT_{}?tls_ca=TLS_DIR/ca.crt",
                rng.usize(..serve.len())
            );
            if t.mtls {
                url.push_str("&tls_cert=TLS_DIR/client.crt&tls_key=TLS_DIR/client.key");
            }
            if t.tokens.is_some() {
                let _ = write!(url, "&token_file=TLS_DIR/token-p{p}");
            }
            url
        } else if grpc {
            format!("grpc://SERVE_{}", rng.usize(..serve.len()))
        } else {
            let url = store_url(&mut rng);
            lead(&mut rng, url)
        };
        let (wb, mut sb, mut tk, mut dcb) = (worker_bits, sequence_bits, tick, split);
        // Now and then a process with another layout on the namespace.
        // The split's per-datacenter part as a whole layout: the worker
        // bits of one datacenter (`worker_bits`), no split.
        let variant = if split_focus && p == 1 {
            dcb = 0;
            Some("the split's part, unsplit")
        } else if rng.u8(..10) < 2 {
            Some(match rng.u8(..3) {
                0 if dcb == 1 => {
                    dcb = 0;
                    "the split's part, unsplit"
                }
                1 => {
                    tk += 1;
                    "another tick"
                }
                _ => {
                    sb = if sb > 1 { sb - 1 } else { sb + 1 };
                    "other sequence bits"
                }
            })
        } else {
            None
        };
        let mut label = variant.map_or_else(String::new, |v| format!("({v}) "));
        // The split's datacenter: in the URL, as `--datacenter`, or both.
        let mut in_datacenter = None;
        if dcb == 1 {
            let dc = rng.u8(..2);
            let how = rng.u8(..3);
            if how != 1 {
                authority = with(&authority, &format!("datacenter={dc}"));
            }
            if how != 0 {
                in_datacenter = Some(dc);
            }
        }
        let horizon = pick(&mut rng, &[300u64, 800, 2_000]);
        let grant = pick(
            &mut rng,
            &[200u64, 300, 500, 800, 1_000].map(|g| g.min(horizon)),
        );
        // (`--focus split`: short leases, so a killed process's worker is
        // free again soon.)
        let (horizon, grant) = if split_focus {
            (300, 200)
        } else {
            (horizon, grant)
        };
        let mut args = vec![
            "--timestamp-bits".into(),
            "40".into(),
            "--worker-bits".into(),
            (wb + dcb).to_string(),
            "--sequence-bits".into(),
            sb.to_string(),
            "--datacenter-bits".into(),
            dcb.to_string(),
            "--tick-ms".into(),
            tk.to_string(),
            "--horizon-ms".into(),
            horizon.to_string(),
            "--grant-duration-ms".into(),
            grant.to_string(),
        ];
        if let Some(dc) = in_datacenter {
            args.extend(["--datacenter".into(), dc.to_string()]);
        }
        if recent_epoch.is_some() {
            // Set when the case starts (run_case).
            args.extend(["--epoch-ms".into(), EPOCH_MS.into()]);
        }
        let _ = write!(
            label,
            "{authority} ns={namespace} layout={}/{}/{}/{tk}ms dc_bits={dcb} horizon={horizon} grant={grant}",
            wb + dcb,
            sb,
            40
        );
        procs.push(ProcSpec {
            authority,
            namespace,
            args,
            label,
            variant,
        });
    }
    // The faults: two to four, at random times after the first half second.
    let mut faults = Vec::new();
    let mut backed_up = false;
    for _ in 0..rng.usize(2..=4) {
        let at = rng.u64(500..3_500);
        let p = rng.usize(..count);
        let store_faults: &[Fault] = match engine {
            Engine::File | Engine::Static | Engine::GrpcFile => {
                &[Fault::Backup, Fault::FileDelete, Fault::FileRestore]
            }
            Engine::Redis | Engine::GrpcRedis => {
                &[Fault::Backup, Fault::RedisEmpty, Fault::RedisStale]
            }
            Engine::Postgres => &[Fault::PgCrash],
            Engine::Mysql
            | Engine::Etcd
            | Engine::Dynamodb
            | Engine::GrpcDynamodb
            | Engine::GrpcDefault
            | Engine::GrpcStatic => &[],
        };
        let fault = match rng.u8(..10) {
            n if n < 5 && tls_focus && tls.is_some() => match rng.u8(..3) {
                0 => Fault::CertRotate,
                1 => Fault::TokenRotate(p),
                _ => Fault::TokenRevoke(p),
            },
            0..=3 => Fault::KillRestart(p),
            4..=5 => Fault::Stop(p, pick(&mut rng, &[1_000u64, 3_000, 9_000])),
            6 if grpc => Fault::ServeRestart(rng.usize(..serve.len())),
            7 if tls.is_some() => match (rng.u8(..3), &tls) {
                (
                    1,
                    Some(ServeTls {
                        tokens: Some(_), ..
                    }),
                ) => Fault::TokenRotate(p),
                (
                    2,
                    Some(ServeTls {
                        tokens: Some(_), ..
                    }),
                ) => Fault::TokenRevoke(p),
                _ => Fault::CertRotate,
            },
            _ if !store_faults.is_empty() => pick(&mut rng, store_faults),
            _ => Fault::KillRestart(p),
        };
        match fault {
            Fault::Backup => backed_up = true,
            Fault::FileRestore | Fault::RedisStale if !backed_up => {
                faults.push((at.saturating_sub(400), Fault::Backup));
                backed_up = true;
            }
            _ => {}
        }
        faults.push((at, fault));
    }
    if split_focus {
        // The split process is scaled down, and the unsplit one starts
        // again after it, to take the first worker that is free (the split
        // process's) while the split's IDs of a moment ago are half its
        // clock.
        let at = rng.u64(900..1_400);
        faults = vec![(at, Fault::Kill(0)), (at + 250, Fault::KillRestart(1))];
    }
    faults.sort_by_key(|(at, _)| *at);
    let hostile = draw_hostile(seed, &tag, &procs, tls.as_ref(), focus);
    Case {
        seed,
        engine,
        procs,
        faults,
        serve,
        tls,
        hostile,
        recent_epoch,
    }
}

/// A hostile client for a case with tokens: in 3 cases of 10 (every one
/// with `--focus hostile`), scoped to a namespace of its own, scoped to the
/// fleet's first namespace, or unscoped (then its calls are about every
/// namespace of the fleet). Drawn with a generator of its own, so the rest
/// of a seed's case is the same with or without it.
fn draw_hostile(
    seed: u64,
    tag: &str,
    procs: &[ProcSpec],
    tls: Option<&ServeTls>,
    focus: Option<Focus>,
) -> Option<crate::hostile::Plan> {
    use crate::hostile::{Plan, Scope};
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x6805_711e_c11e_0000);
    tls.and_then(|t| t.tokens.as_ref())?;
    if focus != Some(Focus::Hostile) && rng.u8(..10) >= 3 {
        return None;
    }
    let scope = pick(&mut rng, &[Scope::Own, Scope::Shared, Scope::Unscoped]);
    let mut fleet: Vec<String> = procs.iter().map(|p| p.namespace.clone()).collect();
    fleet.sort();
    fleet.dedup();
    let targets = match scope {
        Scope::Own => vec![format!("fz-{tag}-h")],
        Scope::Shared => fleet[..1].to_vec(),
        Scope::Unscoped => fleet,
    };
    Some(Plan {
        scope,
        targets,
        seed: rng.u64(..),
    })
}

/// A case of `--focus restore`: etcd, 3 to 5 processes on one namespace,
/// and a restore that keeps the store's identity and revision between two
/// processes' renewals. Process 0 renews every 200 ms, process 1 every
/// second; both restart after the copy, so the restored store does not
/// know their workers; process 2 restarts after process 0's first renewal
/// on the restored store and before process 1's. The forgotten-grant
/// check answers the first such renewal with a quarantine, so process 2
/// waits; without it, process 2 is given process 1's worker, which the
/// restored store counts as never used.
fn draw_restore(seed: u64, shared: &Shared) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed);
    let worker_bits: u8 = rng.u8(3..=4);
    let sequence_bits: u8 = rng.u8(1..=4);
    let tick: u64 = rng.u64(1..=4);
    let namespace = format!("fz-{seed:x}-a");
    let authority = shared.etcd.clone().unwrap_or_default();
    let procs = (0..rng.usize(3..=5))
        .map(|p| {
            let (horizon, grant) = match p {
                0 => (300u64, 200u64),
                1 => (2_000, 1_000),
                _ => (pick(&mut rng, &[300u64, 800, 2_000]), 200),
            };
            let mut args = next_args(worker_bits, sequence_bits, tick, horizon, grant);
            // Each call's answer on standard error: the case waits for one.
            args.push("-v".into());
            ProcSpec {
                label: format!(
                    "{authority} ns={namespace} layout={worker_bits}/{sequence_bits}/40/{tick}ms horizon={horizon} grant={grant}"
                ),
                authority: authority.clone(),
                namespace: namespace.clone(),
                args,
                variant: None,
            }
        })
        .collect();
    let copy = rng.u64(600..1_000);
    let restore = copy + 300;
    Case {
        seed,
        engine: Engine::Etcd,
        procs,
        faults: vec![
            (copy, Fault::EtcdCopy),
            (copy + 100, Fault::KillRestart(0)),
            (copy + 200, Fault::KillRestart(1)),
            (restore, Fault::EtcdRestore),
            (
                restore + rng.u64(250..400),
                Fault::KillRestartAfterEvent(2, 0),
            ),
        ],
        serve: Vec::new(),
        tls: None,
        hostile: None,
        recent_epoch: None,
    }
}

/// The arguments of a `grantid next` after its authority and namespace.
fn next_args(
    worker_bits: u8,
    sequence_bits: u8,
    tick: u64,
    horizon: u64,
    grant: u64,
) -> Vec<String> {
    [
        ("--timestamp-bits", 40),
        ("--worker-bits", u64::from(worker_bits)),
        ("--sequence-bits", u64::from(sequence_bits)),
        ("--tick-ms", tick),
        ("--horizon-ms", horizon),
        ("--grant-duration-ms", grant),
    ]
    .iter()
    .flat_map(|(flag, v)| [flag.to_string(), v.to_string()])
    .collect()
}

/// A case of `--focus lead`: Redis, one namespace of two workers, a
/// process H with an 8 s lead that keeps 3.5 to 7 s committed (3.5 s
/// grants, a 3.5 s horizon, a 200 ms lease grace), and a process S with a
/// 1.5 s lead, 200 ms skew and a 10 s lease grace (so its worker is not
/// free in the save when S starts again). Redis is saved at about 0.45 s, when H holds grants to about
/// 7.1 s; H renews at about 3.6 and 7.1 s (to about 14.1 s), is stopped at
/// 7.3 s for 2.7 s, and at 7.4 s Redis restarts from the save. S's next
/// call sees the restart and quarantines the store: until the namespace's
/// recorded lead and skew have passed (8 s + 1 s), or, sized from S's own
/// options, for 1.7 s. S starts again at 9.5 s, when H's lease in the save
/// has run out, and takes H's worker: after a quarantine sized from the
/// recorded lead it waits past H's grants; after one sized from S's own
/// options it issues over the ticks H issues from when it wakes at 10 s,
/// with 4 s committed and no renewal due before 10.6 s.
fn draw_lead(seed: u64) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed);
    let sequence_bits: u8 = rng.u8(1..=4);
    let tick: u64 = rng.u64(1..=4);
    let namespace = format!("fz-{seed:x}-a");
    let redis = "redis://127.0.0.1:REDIS_PORT/";
    let procs = [
        ("H", "max_lead_ms=8000&lease_grace_ms=200", 3_500u64, 3_500u64),
        (
            "S",
            "max_lead_ms=1500&clock_skew_ms=200&lease_grace_ms=10000",
            300,
            200,
        ),
    ]
    .map(|(name, options, horizon, grant)| ProcSpec {
        authority: format!("{redis}?{options}"),
        namespace: namespace.clone(),
        args: next_args(1, sequence_bits, tick, horizon, grant),
        label: format!(
            "{name}: {redis}?{options} ns={namespace} layout=1/{sequence_bits}/40/{tick}ms horizon={horizon} grant={grant}"
        ),
        variant: None,
    })
    .to_vec();
    Case {
        seed,
        engine: Engine::Redis,
        procs,
        faults: vec![
            (rng.u64(400..500), Fault::Backup),
            (7_300, Fault::Stop(0, 2_700)),
            (7_400, Fault::RedisStale),
            (9_500, Fault::KillRestart(1)),
        ],
        serve: Vec::new(),
        tls: None,
        hostile: None,
        recent_epoch: None,
    }
}

/// The placeholder of a recent epoch in a process's arguments.
const EPOCH_MS: &str = "EPOCH_MS";

/// The URL of case `seed`'s own table on the test DynamoDB.
fn dynamodb_url(shared: &Shared, seed: u64) -> String {
    shared
        .dynamodb
        .as_ref()
        .map_or_else(String::new, |endpoint| {
            format!("dynamodb://grantid_fuzz_{seed:016x}?region=us-east-1&endpoint={endpoint}")
        })
}

/// `grantid authority init --new-deployment URL`: a store that never
/// issued an ID starts without a quarantine.
fn declare_new(config: &FuzzConfig, url: &str) -> Result<(), String> {
    let out = Command::new(&config.grantid)
        .args(["authority", "init", "--new-deployment", url])
        .output()
        .map_err(|e| format!("{}: {e}", config.grantid.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "grantid authority init --new-deployment {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A running `grantid next` (or `grantid serve`).
struct Running {
    child: Child,
    out: PathBuf,
    stopped_until: Option<Instant>,
}

fn spawn_next(
    config: &FuzzConfig,
    spec: &ProcSpec,
    authority: &str,
    epoch_ms: Option<u64>,
    out: &Path,
) -> Result<Running, String> {
    let args = spec.args.iter().map(|a| match epoch_ms {
        Some(ms) if a == EPOCH_MS => ms.to_string(),
        _ => a.clone(),
    });
    let stdout = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let stderr = std::fs::File::create(out.with_extension("err"))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let child = Command::new(&config.grantid)
        .args([
            "next",
            "-n",
            "1000000000000",
            "--format",
            "dec",
            "--wait-ms",
            "20000",
        ])
        .args(["--authority", authority, "--namespace", &spec.namespace])
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{}: {e}", config.grantid.display()))?;
    Ok(Running {
        child,
        out: out.to_owned(),
        stopped_until: None,
    })
}

/// Starts `grantid serve` (without `--authority` when `authority` is
/// empty) on `port`, with `host` as its home (its own state directory, as
/// on a host of its own); `None` when it exits before it listens (refused
/// at start).
fn spawn_serve(
    config: &FuzzConfig,
    authority: &str,
    port: u16,
    host: &Path,
    tls_args: &[String],
) -> Result<Option<Child>, String> {
    let _ = std::fs::create_dir_all(host);
    let log = host.join(format!("serve.{}.log", fastrand::u32(..)));
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(&config.grantid);
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    if !authority.is_empty() {
        cmd.args(["--authority", authority]);
    }
    let mut child = cmd
        // The server's own generator fits in the shortest lead drawn.
        .args(["--horizon-ms", "300", "--grant-duration-ms", "200"])
        .args(tls_args)
        .env("HOME", host)
        .env("XDG_STATE_HOME", host.join("state"))
        .env_remove("GRANTID_AUTHORITY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{}: {e}", config.grantid.display()))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    // (a socket connected to itself, which Linux may make while nothing
    // listens, is no server)
    while !std::net::TcpStream::connect(("127.0.0.1", port))
        .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
    {
        if let Ok(Some(_)) = child.try_wait() {
            return Ok(None);
        }
        if Instant::now() > deadline {
            kill(&mut child);
            return Err(format!("grantid serve did not listen on {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Some(child))
}

fn signal(child: &Child, sig: i32) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A case while it runs: its processes, servers and stores, and what its
/// faults have done so far.
struct Live<'a> {
    config: &'a FuzzConfig,
    case: &'a Case,
    dir: &'a Path,
    shared: &'a mut Shared,
    redis: Option<RedisServer>,
    /// The Redis server's URL, for `redis://127.0.0.1:REDIS_PORT/` in URLs.
    redis_url: Option<String>,
    tls_dir: PathBuf,
    tls_args: Vec<String>,
    certs: Option<crate::certs::Certs>,
    tokens: Option<ServeTokens>,
    /// `grantid serve`s: port, authority URL, process.
    serves: Vec<(u16, String, Child)>,
    /// Each process's runs, the last one running.
    runs: Vec<Vec<Running>>,
    epoch_ms: Option<u64>,
    state: PathBuf,
    backup: PathBuf,
    etcd_copy: Vec<(String, String)>,
    /// `--focus restore`: whether the case's premise holds (every process
    /// holds a grant before the copy and the restore), and how many lines
    /// each process had logged at the restore.
    premise: bool,
    restored_logs: Vec<usize>,
}

impl Live<'_> {
    /// `url` with the case's Redis server in it.
    fn fill(&self, url: &str) -> String {
        match &self.redis_url {
            Some(r) => url.replace("redis://127.0.0.1:REDIS_PORT/", r),
            None => url.to_owned(),
        }
    }

    /// The authority URL of process `spec`, with the case's servers in it.
    fn authority_of(&self, spec: &ProcSpec) -> String {
        let mut url = self
            .fill(&spec.authority)
            .replace("TLS_DIR", &self.tls_dir.display().to_string());
        for (i, (port, _, _)) in self.serves.iter().enumerate() {
            url = url
                .replace(&format!("SERVE_{i}"), &format!("127.0.0.1:{port}"))
                .replace(&format!("PORT_{i}"), &port.to_string());
        }
        url
    }

    /// Starts process `p`, again if it ran: its running one is killed
    /// first.
    fn restart(&mut self, p: usize) -> Result<(), String> {
        if let Some(r) = self.runs[p].last_mut() {
            kill(&mut r.child);
        }
        let out = self.dir.join(format!("p{p}.{}.out", self.runs[p].len()));
        let spec = &self.case.procs[p];
        let next = spawn_next(
            self.config,
            spec,
            &self.authority_of(spec),
            self.epoch_ms,
            &out,
        )?;
        self.runs[p].push(next);
        Ok(())
    }

    /// Injects `fault`; its name for the report.
    fn inject(&mut self, fault: Fault) -> Result<&'static str, String> {
        Ok(match fault {
            Fault::KillRestart(p) => {
                self.restart(p)?;
                "kill -9 and restart"
            }
            Fault::Kill(p) => {
                if let Some(r) = self.runs[p].last_mut() {
                    kill(&mut r.child);
                }
                "kill -9 (scaled down)"
            }
            Fault::Stop(p, ms) => {
                if let Some(r) = self.runs[p].last_mut()
                    && r.stopped_until.is_none()
                {
                    signal(&r.child, libc::SIGSTOP);
                    r.stopped_until = Some(Instant::now() + Duration::from_millis(ms));
                }
                "SIGSTOP"
            }
            Fault::Backup => {
                if let Some(r) = &self.redis {
                    r.save()?;
                } else if self.state.is_file() {
                    std::fs::copy(&self.state, &self.backup).map_err(|e| format!("backup: {e}"))?;
                }
                "backup"
            }
            Fault::FileDelete => {
                let _ = std::fs::remove_file(&self.state);
                "state file deleted"
            }
            Fault::FileRestore => {
                if self.backup.is_file() {
                    // As a restore tool would: a new file put in place.
                    let tmp = self.dir.join("state").join("restore.tmp");
                    std::fs::copy(&self.backup, &tmp).map_err(|e| format!("restore: {e}"))?;
                    std::fs::rename(&tmp, &self.state).map_err(|e| format!("restore: {e}"))?;
                }
                "state file restored"
            }
            Fault::RedisEmpty => {
                if let Some(r) = self.redis.as_mut() {
                    r.restart(false)?;
                }
                "redis restarted empty"
            }
            Fault::RedisStale => match self.redis.as_mut().map(|r| r.restart(true)) {
                Some(Ok(())) | None => "redis restarted from a stale snapshot",
                // No snapshot since the last empty restart: started empty.
                Some(Err(_)) => {
                    if let Some(r) = self.redis.as_mut() {
                        r.restart(false)?;
                    }
                    "redis restarted empty"
                }
            },
            Fault::PgCrash => {
                if let Some(pg) = self.shared.pg.as_mut() {
                    pg.stop(StopMode::Immediate)?;
                    pg.start_again()?;
                }
                "postgres crashed and started"
            }
            Fault::EtcdCopy if !printing(&self.runs) => {
                self.premise = false;
                "etcd keys not copied: a process printed no ID yet"
            }
            Fault::EtcdCopy => {
                self.etcd_copy = etcd_keys(self.shared, self.case.seed)?;
                "etcd keys copied"
            }
            Fault::EtcdRestore | Fault::KillRestartAfterEvent(..) if !self.premise => {
                "skipped: its premise was not met"
            }
            Fault::EtcdRestore if !printing(&self.runs) => {
                self.premise = false;
                "etcd not restored: a process printed no ID yet"
            }
            Fault::KillRestartAfterEvent(p, watched) => {
                // The watched process's call answered by the restored store.
                let err = self.runs[watched]
                    .last()
                    .map(|r| r.out.with_extension("err"))
                    .unwrap_or_default();
                let before = self.restored_logs.get(watched).copied().unwrap_or(0);
                let deadline = Instant::now() + Duration::from_secs(5);
                while lines(&err) < before + 2 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if lines(&err) < before + 2 {
                    self.premise = false;
                    "skipped: no call answered by the restored store"
                } else {
                    self.restart(p)?;
                    "kill -9 and restart after a call on the restored store"
                }
            }
            Fault::EtcdRestore => {
                // The processes wait while the store is put back, as
                // during a restore.
                let running: Vec<&Child> = self
                    .runs
                    .iter()
                    .filter_map(|g| g.last())
                    .filter(|r| r.stopped_until.is_none())
                    .map(|r| &r.child)
                    .collect();
                for c in &running {
                    signal(c, libc::SIGSTOP);
                }
                let restored = etcd_put_back(self.shared, self.case.seed, &self.etcd_copy);
                self.restored_logs = self
                    .runs
                    .iter()
                    .map(|g| g.last().map_or(0, |r| lines(&r.out.with_extension("err"))))
                    .collect();
                for c in &running {
                    signal(c, libc::SIGCONT);
                }
                restored?;
                "etcd restored, identity and revision kept"
            }
            Fault::ServeRestart(i) => {
                if let Some((port, url, child)) = self.serves.get_mut(i) {
                    kill(child);
                    match spawn_serve(
                        self.config,
                        url,
                        *port,
                        &self.dir.join(format!("host{i}")),
                        &self.tls_args,
                    )? {
                        Some(again) => *child = again,
                        None => {
                            return Err(format!("grantid serve `{url}` refused to start again"));
                        }
                    }
                }
                "grantid serve restarted"
            }
            Fault::CertRotate => {
                if let Some(c) = &self.certs {
                    c.renew_server()?;
                    if fastrand::bool() {
                        for (_, _, child) in &self.serves {
                            signal(child, libc::SIGHUP);
                        }
                    }
                }
                "server certificate rotated"
            }
            Fault::TokenRotate(p) => {
                if let Some(t) = self.tokens.as_mut() {
                    t.rotate(p, || {
                        for (_, _, child) in &self.serves {
                            signal(child, libc::SIGHUP);
                        }
                    })?;
                }
                "token rotated"
            }
            Fault::TokenRevoke(p) => {
                if let Some(t) = self.tokens.as_mut() {
                    t.revoke(p)?;
                    for (_, _, child) in &self.serves {
                        signal(child, libc::SIGHUP);
                    }
                }
                "token revoked"
            }
        })
    }
}

/// The IDs the case's processes printed: how many, how many of them
/// repeat an ID of their namespace, and the first few repeats.
fn printed_ids(case: &Case, runs: &[Vec<Running>]) -> Result<(u64, u64, Vec<String>), String> {
    let mut seen: HashMap<&str, HashMap<u64, usize>> = HashMap::new();
    let mut dups: Vec<String> = Vec::new();
    let mut ids = 0u64;
    for (p, gens) in runs.iter().enumerate() {
        let ns = case.procs[p].namespace.as_str();
        for r in gens {
            let file =
                std::fs::File::open(&r.out).map_err(|e| format!("{}: {e}", r.out.display()))?;
            for line in std::io::BufReader::new(file).split(b'\n') {
                let line = line.map_err(|e| format!("{}: {e}", r.out.display()))?;
                let Some(id) = std::str::from_utf8(&line)
                    .ok()
                    .and_then(|l| l.parse::<u64>().ok())
                else {
                    continue;
                };
                ids += 1;
                if let Some(first) = seen.entry(ns).or_default().insert(id, p)
                    && dups.len() < 3
                {
                    dups.push(format!(
                        "ID {id} printed by process {first} and process {p}"
                    ));
                }
            }
        }
    }
    let total: usize = seen.values().map(HashMap::len).sum();
    let repeated = ids - total as u64;
    Ok((ids, repeated, dups))
}

/// Counts what the case's processes covered (their URLs' and flags'
/// dimensions) into `outcome.covered`.
fn covered(case: &Case, outcome: &mut FuzzOutcome) {
    if case.recent_epoch.is_some() {
        *outcome.covered.entry("recent epoch (cases)").or_default() += 1;
    }
    for spec in &case.procs {
        for (dim, hit) in [
            ("symlinked path", spec.authority.contains("link")),
            (
                "path with . or ..",
                spec.authority.contains("/./") || spec.authority.contains("/../"),
            ),
            (
                "/proc/self/root path",
                spec.authority.contains("/proc/self/root"),
            ),
            ("datacenter=", spec.authority.contains("datacenter=")),
            (
                "--datacenter",
                spec.args.iter().any(|a| a == "--datacenter"),
            ),
            ("max_lead_ms set", spec.authority.contains("max_lead_ms")),
            (
                "lease_grace_ms set",
                spec.authority.contains("lease_grace_ms"),
            ),
            (
                "clock_skew_ms set",
                spec.authority.contains("clock_skew_ms"),
            ),
            ("another layout on the namespace", spec.variant.is_some()),
            ("grpcs://", spec.authority.starts_with("grpcs://")),
            (
                "grpcs:// by host name",
                spec.authority.starts_with("grpcs://localhost"),
            ),
            (
                "mTLS client certificate",
                spec.authority.contains("tls_cert="),
            ),
            ("token file", spec.authority.contains("token_file=")),
            (
                "postgres sslmode=verify-full",
                spec.authority.contains("sslmode=verify-full"),
            ),
            (
                "postgres sslmode=require",
                spec.authority.contains("sslmode=require"),
            ),
            (
                "postgres sslmode=disable",
                spec.authority.contains("sslmode=disable"),
            ),
        ] {
            if hit {
                *outcome.covered.entry(dim).or_default() += 1;
            }
        }
    }
}

/// Runs one case and checks it; returns its report line.
fn run_case(
    config: &FuzzConfig,
    case: &Case,
    dir: &Path,
    shared: &mut Shared,
    outcome: &mut FuzzOutcome,
) -> Result<String, String> {
    let redis = match case.engine {
        Engine::Redis | Engine::GrpcRedis => Some(RedisServer::start()?),
        _ => None,
    };
    // The server keeps its port across restarts.
    let redis_url = redis.as_ref().map(RedisServer::url);
    if let Some(url) = &redis_url {
        // A new server never issued an ID: declared so, as the runbook says.
        declare_new(config, url)?;
    }
    if matches!(case.engine, Engine::Dynamodb | Engine::GrpcDynamodb) {
        // The case's table, created and declared new.
        declare_new(config, &dynamodb_url(shared, case.seed))?;
    }
    // TLS, mTLS and tokens (grpc engines over TLS).
    let tls_dir = dir.join("tls");
    let mut tokens = case
        .tls
        .as_ref()
        .map(|t| ServeTokens::new(&tls_dir, &case.procs, t))
        .transpose()?;
    let certs = match &case.tls {
        Some(_) => Some(crate::certs::Certs::make(&tls_dir)?),
        None => None,
    };
    let mut tls_args: Vec<String> = Vec::new();
    if let (Some(t), Some(c)) = (&case.tls, &certs) {
        for (flag, path) in [
            ("--tls-cert", Some(&c.server_cert)),
            ("--tls-key", Some(&c.server_key)),
            ("--tls-client-ca", t.mtls.then_some(&c.ca)),
            (
                "--token-file",
                tokens.as_ref().and_then(ServeTokens::server_file),
            ),
        ] {
            if let Some(path) = path {
                tls_args.extend([flag.to_owned(), path.display().to_string()]);
            }
        }
    }
    // A hostile client's token and the probe's (unscoped), in the servers'
    // file before they start; the servers' cap below its idle connections.
    let hostile_tokens = match (&case.hostile, tokens.as_mut()) {
        (Some(plan), Some(t)) => {
            tls_args.extend([
                "--max-connections".to_owned(),
                crate::hostile::MAX_CONNECTIONS.to_string(),
            ]);
            Some((t.add(plan.bound_to())?, t.add(None)?))
        }
        _ => None,
    };
    let mut live = Live {
        config,
        case,
        dir,
        shared,
        redis,
        redis_url,
        tls_dir: tls_dir.clone(),
        tls_args,
        certs,
        tokens,
        serves: Vec::new(),
        runs: Vec::new(),
        epoch_ms: None,
        state: dir.join("state").join("state.json"),
        backup: dir.join("state.backup"),
        etcd_copy: Vec::new(),
        premise: true,
        restored_logs: Vec::new(),
    };
    // Servers (grpc engines).
    for (i, url) in case.serve.iter().enumerate() {
        let port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let url = live.fill(url);
        match spawn_serve(
            config,
            &url,
            port,
            &dir.join(format!("host{i}")),
            &live.tls_args,
        )? {
            Some(child) => live.serves.push((port, url, child)),
            None => {
                for (_, _, child) in live.serves.iter_mut() {
                    kill(child);
                }
                outcome.cases += 1;
                outcome.refused_deployments += 1;
                *outcome.engines.entry(case.engine.name()).or_default() += 1;
                return Ok(format!(
                    "case seed={} engine={}: grantid serve refused at start (authority `{url}`, empty: none given)",
                    case.seed,
                    case.engine.name()
                ));
            }
        }
    }
    let epoch_ms = case.recent_epoch.map(|before| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        now.saturating_sub(before)
    });
    live.epoch_ms = epoch_ms;
    for p in 0..case.procs.len() {
        live.runs.push(Vec::new());
        live.restart(p)?;
    }
    let first_port = live.serves.first().map_or(0, |s| s.0);
    let grpcs_with = |token: &Path| {
        let mut url = format!(
            "grpcs://127.0.0.1:{first_port}?timeout_ms=2000&tls_ca={}",
            tls_dir.join("ca.crt").display()
        );
        if case.tls.as_ref().is_some_and(|t| t.mtls) {
            let _ = write!(
                url,
                "&tls_cert={}&tls_key={}",
                tls_dir.join("client.crt").display(),
                tls_dir.join("client.key").display()
            );
        }
        let _ = write!(url, "&token_file={}", token.display());
        url
    };
    // A control probe before the hostile client starts: a deployment that
    // refuses every client (a served `static:N` without a state file) is
    // not stopped by the hostile one.
    let control = match (&case.hostile, &hostile_tokens) {
        (Some(_), Some((_, probe))) => crate::hostile::probe(
            &grpcs_with(probe),
            &format!("fz-{:x}-w", case.seed),
            Duration::ZERO,
        )
        .err(),
        _ => None,
    };
    let hostile = match (&case.hostile, &hostile_tokens) {
        (Some(plan), Some((token, _))) => Some(crate::hostile::Hostile::start(
            plan.clone(),
            grpcs_with(token),
            live.serves.iter().map(|s| s.0).collect(),
        )),
        _ => None,
    };
    let start = Instant::now();
    let mut faults = case.faults.iter().peekable();
    let end = start + Duration::from_millis(config.case_ms);
    let mut injected: Vec<&'static str> = Vec::new();
    let mut lag = Duration::ZERO;
    // (The schedule's lag moves the end too, so every fault is run.)
    while Instant::now() < end + lag {
        let now = Instant::now();
        for gens in live.runs.iter_mut() {
            if let Some(r) = gens.last_mut()
                && r.stopped_until.is_some_and(|t| now >= t)
            {
                signal(&r.child, libc::SIGCONT);
                r.stopped_until = None;
            }
        }
        match faults.peek() {
            Some((at, _)) if now >= start + lag + Duration::from_millis(*at) => {}
            _ => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let Some((at, fault)) = faults.next() else {
            continue;
        };
        let due = start + lag + Duration::from_millis(*at);
        let name = live.inject(*fault)?;
        injected.push(name);
        // A fault that took a while (a server restart, a restore) moves the
        // rest of the schedule, so the gaps between faults stay as drawn.
        lag += Instant::now().saturating_duration_since(due);
    }
    // A hostile client's end: every namespace outside its scope probed
    // while it still runs.
    let stopped = match (hostile, &case.hostile, &hostile_tokens) {
        (Some(running), Some(plan), Some((_, probe))) => {
            hostile_end(case, plan, running, &grpcs_with(probe), control, outcome)
        }
        _ => Vec::new(),
    };
    // The end: every process killed as it runs.
    let mut refused = 0u64;
    for gens in live.runs.iter_mut() {
        for r in gens.iter_mut() {
            if let Ok(Some(status)) = r.child.try_wait()
                && status.code() == Some(17)
            {
                refused += 1;
                let why = std::fs::read_to_string(r.out.with_extension("err")).unwrap_or_default();
                *outcome.refusals.entry(refusal(&why)).or_default() += 1;
            }
            signal(&r.child, libc::SIGCONT);
            kill(&mut r.child);
        }
    }
    for (_, _, child) in live.serves.iter_mut() {
        kill(child);
    }
    drop(live.redis.take());
    // The check: per namespace, every printed ID once.
    let (ids, repeated, dups) = printed_ids(case, &live.runs)?;
    outcome.cases += 1;
    outcome.ids += ids;
    outcome.processes += live.runs.iter().map(Vec::len).sum::<usize>() as u64;
    outcome.refused += refused;
    *outcome.engines.entry(case.engine.name()).or_default() += 1;
    for f in &injected {
        *outcome.faults.entry(f).or_default() += 1;
    }
    covered(case, outcome);
    let mut line = format!(
        "case seed={} engine={} processes={} faults=[{}] ids={ids} refused_at_start={refused} repeated={repeated}",
        case.seed,
        case.engine.name(),
        case.procs.len(),
        injected.join(", ")
    );
    if let Some(ms) = epoch_ms {
        let _ = write!(line, " epoch_ms={ms}");
    }
    if let Some(plan) = &case.hostile {
        let _ = write!(
            line,
            " hostile=\"{}\" stopped={}",
            plan.scope.name(),
            stopped.len()
        );
    }
    if !stopped.is_empty() {
        let _ = write!(
            line,
            "\nNAMESPACES STOPPED by a hostile client ({}): replay with `{}`; {}",
            plan_label(case),
            config.replay(case.seed),
            stopped.join("; ")
        );
        outcome.failures.push(line.clone());
    }
    if repeated > 0 {
        let _ = write!(
            line,
            "\nREPEATED IDs: replay with `{}`; {}",
            config.replay(case.seed),
            dups.join("; ")
        );
        for (p, spec) in case.procs.iter().enumerate() {
            let _ = write!(line, "\n  process {p}: {}", spec.label);
        }
        outcome.failures.push(line.clone());
    }
    Ok(line)
}

/// The tokens of a case's `grantid serve --token-file`: one per process,
/// each in a file of the process's own (`token_file=`), all in the
/// servers' file with the process's namespace when bound to it.
struct ServeTokens {
    dir: PathBuf,
    server: PathBuf,
    /// (namespace when bound, the tokens the servers accept) per process;
    /// the last one is the process's.
    entries: Vec<(Option<String>, Vec<String>)>,
}

impl ServeTokens {
    fn new(dir: &Path, procs: &[ProcSpec], tls: &ServeTls) -> Result<ServeTokens, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut t = ServeTokens {
            dir: dir.to_owned(),
            server: dir.join("tokens.txt"),
            entries: Vec::new(),
        };
        let Some(bound) = &tls.tokens else {
            return Ok(t);
        };
        for (p, spec) in procs.iter().enumerate() {
            let token = Self::fresh();
            let ns = bound.get(p).copied().unwrap_or(false);
            t.entries
                .push((ns.then(|| spec.namespace.clone()), vec![token.clone()]));
            t.write_client(p, &token, true)?;
        }
        t.write_server()?;
        Ok(t)
    }

    /// The servers' token file, when the case has tokens.
    fn server_file(&self) -> Option<&PathBuf> {
        (!self.entries.is_empty()).then_some(&self.server)
    }

    fn fresh() -> String {
        format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
    }

    /// Writes a file as an operator's tool would: a new file renamed into
    /// place (`atomic`), or the old one truncated and written.
    fn write(path: &Path, text: &str, atomic: bool) -> Result<(), String> {
        let shown = |e: std::io::Error| format!("{}: {e}", path.display());
        if atomic {
            let tmp = path.with_extension("new");
            std::fs::write(&tmp, text).map_err(shown)?;
            std::fs::rename(&tmp, path).map_err(shown)
        } else {
            std::fs::write(path, text).map_err(shown)
        }
    }

    fn write_client(&self, p: usize, token: &str, atomic: bool) -> Result<(), String> {
        Self::write(
            &self.dir.join(format!("token-p{p}")),
            &format!("{token}\n"),
            atomic,
        )
    }

    fn write_server(&self) -> Result<(), String> {
        let mut text = String::from("# grantid serve --token-file (deploy-fuzz)\n");
        for (ns, tokens) in &self.entries {
            for token in tokens {
                let _ = match ns {
                    Some(ns) => writeln!(text, "{token} {ns}"),
                    None => writeln!(text, "{token}"),
                };
            }
        }
        Self::write(&self.server, &text, true)
    }

    /// A new token for process `p`: accepted by the servers first
    /// (`reload`), then given to the process, then its old one dropped.
    fn rotate(&mut self, p: usize, reload: impl Fn()) -> Result<(), String> {
        let token = Self::fresh();
        let Some((_, tokens)) = self.entries.get_mut(p) else {
            return Ok(());
        };
        if tokens.is_empty() {
            // Revoked: stays so.
            return Ok(());
        }
        tokens.push(token.clone());
        self.write_server()?;
        reload();
        self.write_client(p, &token, fastrand::bool())?;
        if let Some((_, tokens)) = self.entries.get_mut(p) {
            tokens.retain(|t| *t == token);
        }
        self.write_server()
    }

    /// A token of its own for a client beyond the processes (bound to
    /// `namespace`, or to every namespace), in the servers' file and in a
    /// file of the client's, whose path it returns.
    fn add(&mut self, namespace: Option<&str>) -> Result<PathBuf, String> {
        let token = Self::fresh();
        let n = self.entries.len();
        self.entries
            .push((namespace.map(str::to_owned), vec![token.clone()]));
        self.write_client(n, &token, true)?;
        self.write_server()?;
        Ok(self.dir.join(format!("token-p{n}")))
    }

    /// Process `p`'s tokens taken out of the servers' file.
    fn revoke(&mut self, p: usize) -> Result<(), String> {
        if let Some((_, tokens)) = self.entries.get_mut(p) {
            tokens.clear();
        }
        self.write_server()
    }
}

/// The hostile client's scope and targets, for a report.
fn plan_label(case: &Case) -> String {
    case.hostile.as_ref().map_or_else(String::new, |p| {
        format!("{}, calls about {}", p.scope.name(), p.targets.join(","))
    })
}

/// Probes every namespace outside the hostile client's scope (the fleet's
/// outside a scoped token's, and one no process uses, which must also keep
/// issuing through renewals for 3 s) on `probe_url` while it still runs,
/// then stops it; counts both in `outcome.hostile`. Returns the namespaces
/// that issued nothing, with why. A probe that finds every worker of a
/// fleet namespace held by the fleet is not a stop; nor is one after a
/// `control` probe (made before the hostile client started) was refused.
fn hostile_end(
    case: &Case,
    plan: &crate::hostile::Plan,
    running: crate::hostile::Hostile,
    probe_url: &str,
    control: Option<String>,
    outcome: &mut FuzzOutcome,
) -> Vec<String> {
    // (An unscoped token may release any grant, a probe's too: only the
    // untouched namespace is outside its calls.)
    let mut victims: Vec<String> = case
        .procs
        .iter()
        .map(|p| p.namespace.clone())
        .filter(|ns| plan.scope != crate::hostile::Scope::Unscoped && !plan.targets.contains(ns))
        .collect();
    victims.sort();
    victims.dedup();
    // No one else's calls are about this one: it issues on through
    // renewals for 3 s (a store quarantined over and over would stop it).
    let untouched = format!("fz-{:x}-v", case.seed);
    victims.push(untouched.clone());
    let mut stopped = Vec::new();
    let mut count = |what: &'static str| *outcome.hostile.entry(what).or_default() += 1;
    count(match plan.scope {
        crate::hostile::Scope::Own => "cases: scoped to its own namespace",
        crate::hostile::Scope::Shared => "cases: scoped to a fleet namespace",
        crate::hostile::Scope::Unscoped => "cases: unscoped",
    });
    if control.is_some() {
        count("probes: not made (the control probe was refused)");
        victims.clear();
    }
    for ns in &victims {
        let split = case.procs.iter().any(|p| p.namespace == *ns && p.splits());
        if split {
            count("probes: not made (a datacenter split)");
            continue;
        }
        let hold = if *ns == untouched {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        };
        match crate::hostile::probe(probe_url, ns, hold) {
            Ok(_) => count("probes: issued"),
            Err(why) if why.contains("no free worker") => count("probes: every worker held"),
            // The layout `Status` reports is not always the one the fleet
            // registered (a recent epoch, a variant); no hostile call can
            // register a fleet namespace's layout.
            Err(why) if *ns != untouched && why.contains("another layout") => {
                count("probes: not made (layout not known)");
            }
            Err(why) => {
                count("probes: STOPPED");
                stopped.push(format!("{ns}: {why}"));
            }
        }
    }
    for (what, n) in running.stop() {
        *outcome.hostile.entry(what).or_default() += n;
    }
    stopped
}

/// Whether every running process has printed an ID (so it holds a grant),
/// waiting up to 10 s for it.
fn printing(runs: &[Vec<Running>]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let all = runs
            .iter()
            .filter_map(|g| g.last())
            .all(|r| len(&r.out) > 0);
        if all || Instant::now() >= deadline {
            return all;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How many lines a file has (0 if it cannot be read).
fn lines(path: &Path) -> usize {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

/// A file's length (0 if it cannot be read).
fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// `etcdctl` against the run's etcd.
fn etcdctl(shared: &Shared, args: &[&str]) -> Result<Vec<u8>, String> {
    let url = shared.etcd.as_deref().unwrap_or_default();
    let endpoint = url.strip_prefix("etcd://").unwrap_or(url);
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .output()
        .map_err(|e| format!("etcdctl: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "etcdctl {}: {}",
            args.first().unwrap_or(&""),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The key prefix of case `seed`'s namespaces (`fz-<seed>-a`, `-b`).
fn etcd_case_prefix(seed: u64) -> String {
    format!("grantid/ns/fz-{seed:x}-")
}

/// Every key and value of the case's namespaces (grantid writes one-line
/// JSON values, so `etcdctl get` prints a key line and a value line each).
fn etcd_keys(shared: &Shared, seed: u64) -> Result<Vec<(String, String)>, String> {
    let out = etcdctl(shared, &["get", "--prefix", &etcd_case_prefix(seed)])?;
    let text = String::from_utf8(out).map_err(|e| format!("etcdctl get: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    Ok(lines
        .chunks(2)
        .filter_map(|kv| Some((kv.first()?.to_string(), kv.get(1)?.to_string())))
        .collect())
}

/// Deletes the case's keys and puts `copy` back.
fn etcd_put_back(shared: &Shared, seed: u64, copy: &[(String, String)]) -> Result<(), String> {
    etcdctl(shared, &["del", "--prefix", &etcd_case_prefix(seed)])?;
    for (key, value) in copy {
        etcdctl(shared, &["put", key, "--", value])?;
    }
    Ok(())
}

/// The kind of a start-up refusal, from its message.
fn refusal(message: &str) -> &'static str {
    [
        ("another layout", "another layout on the namespace"),
        ("max_lead_ms", "horizon + grant beyond the bounded lead"),
        ("datacenter", "datacenter mismatch"),
        ("state file", "state file"),
        ("UNAUTHENTICATED", "token refused (revoked)"),
        ("PERMISSION_DENIED", "token not for the namespace"),
    ]
    .into_iter()
    .find_map(|(needle, kind)| message.contains(needle).then_some(kind))
    .unwrap_or("other")
}

/// The run's summary: cases, IDs, and the space covered.
pub fn summary(outcome: &FuzzOutcome) -> String {
    let mut s = format!(
        "deploy-fuzz: {} cases ({} whose server refused to start), {} processes ({} refused at start), {} IDs checked, {} cases with a repeated ID or a stopped namespace\n",
        outcome.cases,
        outcome.refused_deployments,
        outcome.processes,
        outcome.refused,
        outcome.ids,
        outcome.failures.len()
    );
    for (title, map) in [
        ("engines", &outcome.engines),
        ("faults", &outcome.faults),
        ("process options", &outcome.covered),
        ("refused at start", &outcome.refusals),
        ("hostile clients", &outcome.hostile),
    ] {
        let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "  {title}: {}", parts.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::Engine;

    #[test]
    fn every_engine_of_the_table_is_drawn() {
        for e in grantid_authority::engines() {
            let drawn = match e.name {
                "grpc" => Engine::ALL.iter().any(|d| d.is_grpc()),
                name => Engine::parse(name).is_some(),
            };
            assert!(
                drawn,
                "the deployment fuzzer does not draw engine {:?} of the registry's table: add it \
                 to torture/src/deploy.rs's Engine",
                e.name
            );
        }
    }
}
