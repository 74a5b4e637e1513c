//! `grantid serve`: the ID service over gRPC (docs/SERVICE.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use grantid::{Error, ErrorKind};

use crate::args::{GrantArgs, LayoutArgs};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen for gRPC (HOST:PORT; port 0 picks a free one, shown
    /// in the `event=listening` log line).
    #[arg(long, default_value = grantid_server::DEFAULT_LISTEN)]
    pub listen: String,
    /// The server's authority URL, for its own worker and for the grants
    /// it hands out. Required: a service's replicas must name one shared
    /// authority (postgres://, redis://, mysql://, etcd://); `file:` serves
    /// one host.
    #[arg(long, short = 'a', env = "GRANTID_AUTHORITY")]
    pub authority: String,
    /// Authority sessions (connections) the grants handed out over
    /// GrantService are forwarded on, besides the server's own; `file:`
    /// and `static:` use one.
    #[arg(long, default_value_t = grantid_server::DEFAULT_AUTHORITY_SESSIONS)]
    pub authority_sessions: usize,
    /// The namespace of the IDs the server issues.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// On SIGTERM/SIGINT, how long health says NOT_SERVING before the
    /// listener closes, in ms.
    #[arg(long, default_value_t = 0)]
    pub drain_delay_ms: u64,
    /// Longest wait for calls in flight once the listener is closed, in ms.
    #[arg(long, default_value_t = 5_000)]
    pub drain_timeout_ms: u64,
    /// Longest one start-up attempt waits for the first grant, in ms (the
    /// server keeps trying, NOT_SERVING meanwhile; `--timeout-ms` is an
    /// older spelling).
    #[arg(long, alias = "timeout-ms", default_value_t = 10_000)]
    pub startup_timeout_ms: u64,
    /// Serve TLS with this certificate chain (PEM, the server's
    /// certificate first); needs --tls-key. Reloaded on SIGHUP and when
    /// the file changes.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (unencrypted PKCS#8, PKCS#1 or SEC1
    /// PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require a client certificate signed by one of these CAs (PEM): mTLS.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Require `authorization: Bearer TOKEN` on every call but health's:
    /// one token per line, optionally followed by the namespaces it may
    /// use (TOKEN ns1,ns2); `#` comments. Needs --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub token_file: Option<PathBuf>,
    /// Most connections held at once (default: the open-files limit less
    /// 256, at most 10,000). At the cap the oldest connection without an
    /// authenticated call is closed; only when all are authenticated is a
    /// new one refused.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Most connections of one peer (IP address) held at once (default:
    /// half of --max-connections), under the same rule.
    #[arg(long, value_name = "N")]
    pub max_connections_per_peer: Option<usize>,
    /// How long a new connection has to make a call (with --token-file, an
    /// authenticated one), its TLS handshake included, in ms.
    #[arg(long, value_name = "MS", default_value_t = grantid_server::FIRST_CALL_TIMEOUT.as_millis() as u64)]
    pub first_call_timeout_ms: u64,
    #[command(flatten)]
    pub grants: GrantArgs,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

fn address(flag: &str, text: &str) -> Result<SocketAddr, Error> {
    text.parse().map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("--{flag} {text:?}: not an IP:PORT address ({e})"),
        )
    })
}

pub fn serve(a: ServeArgs) -> Result<(), Error> {
    // Log lines on stderr: GRANTID_LOG=debug for more, =warn for less.
    let _ = env_logger::Builder::from_env(env_logger::Env::new().filter_or("GRANTID_LOG", "info"))
        .try_init();
    let mut config =
        grantid_server::Config::new(address("listen", &a.listen)?, &a.authority, &a.namespace);
    config.layout = a.layout.layout()?;
    config.authority_sessions = a.authority_sessions;
    config.metrics = a
        .metrics
        .as_deref()
        .map(|m| address("metrics", m))
        .transpose()?;
    config.drain_delay = Duration::from_millis(a.drain_delay_ms);
    config.drain_timeout = Duration::from_millis(a.drain_timeout_ms);
    config.startup_timeout = Duration::from_millis(a.startup_timeout_ms);
    config.grant_duration_ms = a.grants.grant_duration_ms;
    config.horizon_ms = a.grants.horizon_ms;
    config.tls = match (a.tls_cert, a.tls_key) {
        (Some(cert), Some(key)) => Some(grantid_server::ServerTlsFiles {
            cert,
            key,
            client_ca: a.tls_client_ca,
        }),
        _ => None,
    };
    config.token_file = a.token_file;
    config.max_connections = a.max_connections;
    config.max_connections_per_peer = a.max_connections_per_peer;
    config.first_call_timeout = Duration::from_millis(a.first_call_timeout_ms);
    grantid_server::serve(config)
}
