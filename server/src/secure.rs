//! TLS of `grantid serve` (`--tls-cert`, `--tls-key`, `--tls-client-ca`):
//! rustls with the ring provider, through tokio-rustls, so the certificate
//! can change while the server runs (docs/SERVICE.md, "TLS, mTLS and
//! tokens").
//!
//! * Each accepted connection takes the configuration current at its
//!   handshake; a reload swaps it for the next connections, and the
//!   connections already made (their calls in flight) go on untouched.
//! * A reload that fails (a file missing, a key that is not the
//!   certificate's) keeps the configuration in use and logs why.
//! * Handshakes run on tasks of their own (`accept.rs`), inside the
//!   first-call timeout of the connection layer (`conns.rs`), so a slow or
//!   silent client never holds up the accept loop.
//! * Private keys' paths are never printed: the messages name the flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use grantid::{Error, ErrorKind};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// The PEM files of the server's TLS; its `Debug` hides the key's path.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// The server's certificate chain (PEM, the server's certificate
    /// first).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1 PEM, unencrypted).
    pub key: PathBuf,
    /// The CA certificates that sign the clients' certificates: with it
    /// every client must present one (mTLS).
    pub client_ca: Option<PathBuf>,
}

impl std::fmt::Debug for ServerTlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTlsFiles")
            .field("cert", &self.cert)
            .field("key", &"***")
            .field("client_ca", &self.client_ca)
            .finish()
    }
}

fn invalid(why: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidArgument, why.to_string())
}

fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| invalid(format!("{flag} {shown}: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("{flag} {shown}: not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "{flag} {shown}: no certificate (-----BEGIN CERTIFICATE-----) in the file"
        )));
    }
    Ok(certs)
}

/// The server's configuration from `files`: its certificate and key, the
/// client verifier of `client_ca`, ALPN `h2`.
fn server_config(files: &ServerTlsFiles) -> Result<ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("--tls-cert", &files.cert)?;
    let pem = std::fs::read(&files.key)
        .map_err(|e| invalid(format!("--tls-key: cannot read the key file: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        invalid(format!(
            "--tls-key: no unencrypted private key (PKCS#8, PKCS#1 or SEC1 PEM) in the key \
             file: {e}"
        ))
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates("--tls-client-ca", path)? {
                roots.add(cert).map_err(|e| {
                    invalid(format!(
                        "--tls-client-ca {}: not a usable CA certificate: {e}",
                        path.display()
                    ))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid(format!("--tls-client-ca {}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        invalid(format!(
            "--tls-cert {} and --tls-key: not a certificate and its key: {e}",
            files.cert.display()
        ))
    })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The server's TLS: its files, and the configuration new connections
/// take.
#[derive(Debug)]
pub(crate) struct Tls {
    pub files: ServerTlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// Reads the files: any problem is `InvalidArgument`, naming the flag.
    pub fn load(files: &ServerTlsFiles) -> Result<Tls, Error> {
        Ok(Tls {
            current: RwLock::new(Arc::new(server_config(files)?)),
            files: files.clone(),
        })
    }

    /// Reads the files again; on success the next connections take the new
    /// configuration, on failure the old one stays.
    pub fn reload(&self) -> Result<(), Error> {
        let fresh = Arc::new(server_config(&self.files)?);
        if let Ok(mut current) = self.current.write() {
            *current = fresh;
        }
        Ok(())
    }

    /// The acceptor of the next connection, with the configuration now
    /// in use.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current())
    }

    fn current(&self) -> Arc<ServerConfig> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }
}

/// Counts and logs a connection refused at its TLS handshake.
pub(crate) fn refused(peer: SocketAddr, why: &str) {
    crate::telemetry::tls_refused();
    log::info!(target: "grantid_server", "event=tls_refused peer={peer} error={why:?}");
}

/// How often the files are looked at for a change.
pub const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies a version of a file: its modification time, length and
/// inode (a file replaced by a rename is another inode).
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Whether files whose stamps were `loaded` when last read, `before` at
/// the last check and `now` at this one, are to be read again: on SIGHUP,
/// or once a change has stayed still for one check (a file caught while
/// a tool writes it in place is read when the tool is done, not as a
/// prefix that may parse, such as a token file missing its last lines).
fn reload_due<T: PartialEq>(signalled: bool, loaded: &T, before: &T, now: &T) -> bool {
    signalled || (now != loaded && now == before)
}

/// The files [`reload_loop`] watches, with their stamps taken before the
/// server first read them: a file changed while the server starts is read
/// again once it has stayed still.
#[derive(Debug)]
pub(crate) struct Watched {
    tls_files: Vec<PathBuf>,
    token_files: Vec<PathBuf>,
    tls_seen: Vec<Stamp>,
    tokens_seen: Vec<Stamp>,
}

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files.iter().map(|f| stamp(f)).collect()
}

impl Watched {
    /// Stamps the files of `tls` and `token_file`; call it before reading
    /// them.
    pub fn before_reading(tls: Option<&ServerTlsFiles>, token_file: Option<&Path>) -> Watched {
        let tls_files: Vec<PathBuf> = tls.map_or_else(Vec::new, |t| {
            [Some(&t.cert), Some(&t.key), t.client_ca.as_ref()]
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        });
        let token_files: Vec<PathBuf> = token_file.iter().map(|p| p.to_path_buf()).collect();
        Watched {
            tls_seen: stamps(&tls_files),
            tokens_seen: stamps(&token_files),
            tls_files,
            token_files,
        }
    }
}

/// Reloads the certificates and the tokens on SIGHUP (`hangup`, both) and
/// when one of their files has changed and then stayed still for one
/// check ([`reload_due`]), until `stop`. A failed reload of the
/// certificates keeps what is in use and logs why; the tokens fail closed
/// (`auth::Tokens::reload`), and when one was revoked no connection of
/// `conns` stays trusted.
pub(crate) async fn reload_loop(
    watched: Watched,
    tls: Option<Arc<Tls>>,
    tokens: Option<Arc<crate::auth::Tokens>>,
    conns: Arc<crate::conns::Conns>,
    mut hangup: Option<tokio::signal::unix::Signal>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let Watched {
        tls_files,
        token_files,
        mut tls_seen,
        mut tokens_seen,
    } = watched;
    let (mut tls_before, mut tokens_before) = (tls_seen.clone(), tokens_seen.clone());
    let mut tick = tokio::time::interval(FILE_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let signalled = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tick.tick() => false,
            Some(()) = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            } => true,
        };
        if signalled {
            log::info!(target: "grantid_server", "event=signal signal=SIGHUP");
        }
        let (tls_now, tokens_now) = (stamps(&tls_files), stamps(&token_files));
        if let Some(t) = &tls
            && reload_due(signalled, &tls_seen, &tls_before, &tls_now)
        {
            tls_seen = tls_now.clone();
            tls_reported(t.reload());
        }
        if let Some(t) = &tokens
            && reload_due(signalled, &tokens_seen, &tokens_before, &tokens_now)
        {
            tokens_seen = tokens_now.clone();
            let reloaded = t.reload();
            reloaded.report();
            if reloaded.revoked {
                let n = conns.distrust_all();
                log::info!(
                    target: "grantid_server",
                    "event=connections_distrusted connections={n} note=\"a token was revoked: \
                     each connection is trusted again by its next call with a valid token\""
                );
            }
        }
        (tls_before, tokens_before) = (tls_now, tokens_now);
    }
}

/// Logs and counts the outcome of a reload of the certificates.
fn tls_reported(outcome: Result<(), Error>) {
    match outcome {
        Ok(()) => {
            crate::telemetry::reload("tls", "ok");
            log::info!(target: "grantid_server", "event=reloaded what=tls");
        }
        Err(e) => {
            crate::telemetry::reload("tls", "failed");
            log::error!(
                target: "grantid_server",
                "event=reload_failed what=tls kept=previous error={:?}", e.message()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reload_due;

    #[test]
    fn a_changed_file_is_read_once_it_stays_still_for_one_check() {
        let (a, b, c) = (1, 2, 3);
        // Unchanged: nothing to read.
        assert!(!reload_due(false, &a, &a, &a));
        // Changed since the last check: it may still be being written.
        assert!(!reload_due(false, &a, &a, &b));
        // Still since the last check: read.
        assert!(reload_due(false, &a, &b, &b));
        // Changed again: wait again.
        assert!(!reload_due(false, &a, &b, &c));
        // SIGHUP: read at once, changed or not.
        assert!(reload_due(true, &a, &a, &a));
        assert!(reload_due(true, &a, &a, &b));
    }

    #[test]
    fn tls_files_debug_hides_the_key() {
        let files = super::ServerTlsFiles {
            cert: "/etc/c.pem".into(),
            key: "/secret/k.pem".into(),
            client_ca: None,
        };
        let shown = format!("{files:?}");
        assert!(
            shown.contains("/etc/c.pem") && !shown.contains("/secret/"),
            "{shown}"
        );
    }
}
