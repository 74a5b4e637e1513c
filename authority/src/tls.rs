//! TLS for the PostgreSQL, Redis, MySQL and etcd authorities: rustls with
//! the ring provider (no OpenSSL at build or run time).
//!
//! Certificates and keys are read from PEM files when the URL is opened, so
//! a missing or unreadable file is `InvalidArgument` at once, never a
//! failure at the first grant. A private key's path is never printed (the
//! messages name the option instead), as a password is not.
//!
//! PostgreSQL's `sslmode` keeps libpq's meanings (docs/reference/urls.md):
//!
//! | sslmode | TLS | certificate chain | host name |
//! |---|---|---|---|
//! | `disable` | no | | |
//! | `prefer` (default) | when the server offers it | checked only with `sslrootcert` | no |
//! | `require` | yes | checked only with `sslrootcert` | no |
//! | `verify-ca` | yes | checked | no |
//! | `verify-full` | yes | checked | checked |

// A build without some of the backends leaves their helpers unused.
#![cfg_attr(
    not(all(
        feature = "postgres",
        feature = "redis",
        feature = "mysql",
        feature = "etcd"
    )),
    allow(dead_code, unused_imports)
)]

use std::sync::Arc;

use grantid::{Error, ErrorKind, GrantError};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The one crypto provider of every TLS connection grantid opens.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default rustls provider unless one is set: a
/// driver that builds its own `ClientConfig` (redis-rs) takes the default,
/// and rustls panics when the build enables two providers and none is set.
pub(crate) fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        // Err: another thread installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn invalid(url: &str, why: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("authority URL {:?}: {why}", crate::url::redact(url)),
    )
}

/// A `%XX`-decoded query value.
pub(crate) fn decoded(value: &str) -> String {
    percent_encoding::percent_decode_str(value)
        .decode_utf8_lossy()
        .into_owned()
}

/// Takes the options `keys` out of `url`'s query: the URL without them,
/// and their values (`%XX`-decoded; an empty one refused) in `keys`' order.
pub(crate) fn take_options<const N: usize>(
    url: &str,
    keys: [&str; N],
) -> Result<(String, [Option<String>; N]), Error> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut kept = Vec::new();
    let mut values = [const { None }; N];
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(i) = keys.iter().position(|key| *key == k) else {
            kept.push(pair);
            continue;
        };
        let v = decoded(v);
        if v.is_empty() {
            return Err(invalid(url, format!("{k}= needs a value")));
        }
        values[i] = Some(v);
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, values))
}

/// Reads a PEM file named by `option`; `secret` keeps its path out of the
/// message.
pub(crate) fn read_pem(
    url: &str,
    option: &str,
    path: &str,
    secret: bool,
) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        if secret {
            invalid(url, format!("{option}: cannot read the key file: {e}"))
        } else {
            invalid(url, format!("{option}={path}: cannot read the file: {e}"))
        }
    })
}

/// The certificates of a PEM file (at least one).
pub(crate) fn certificates(
    url: &str,
    option: &str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let pem = read_pem(url, option, path, false)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            invalid(
                url,
                format!("{option}={path}: not a PEM certificate file: {e}"),
            )
        })?;
    if certs.is_empty() {
        return Err(invalid(
            url,
            format!("{option}={path}: no certificate (-----BEGIN CERTIFICATE-----) in the file"),
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1, unencrypted).
pub(crate) fn private_key(
    url: &str,
    option: &str,
    path: &str,
) -> Result<PrivateKeyDer<'static>, Error> {
    let pem = read_pem(url, option, path, true)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        invalid(
            url,
            format!(
                "{option}: no unencrypted private key (PKCS#8, PKCS#1 or SEC1 PEM) in the key \
                 file: {e}"
            ),
        )
    })
}

/// The client certificate and key files named by the options `names`
/// (`["tls_cert", "tls_key"]`, `["sslcert", "sslkey"]`, ...): both or
/// neither, each a path.
pub(crate) fn client_pair<'a>(
    url: &str,
    names: [&str; 2],
    cert: Option<&'a str>,
    key: Option<&'a str>,
) -> Result<Option<(&'a str, &'a str)>, Error> {
    let [cert_name, key_name] = names;
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(""), _) => Err(invalid(
            url,
            format!("{cert_name}= needs the path of a PEM file"),
        )),
        (_, Some("")) => Err(invalid(
            url,
            format!("{key_name}= needs the path of a PEM file"),
        )),
        (Some(c), Some(k)) => Ok(Some((c, k))),
        _ => Err(invalid(
            url,
            format!(
                "{cert_name} and {key_name} go together: the paths of the client certificate \
                 and of its private key"
            ),
        )),
    }
}

/// The PEM text of a client certificate and of its key.
pub(crate) type ClientPem = (Vec<u8>, Vec<u8>);

/// The PEM text of the client certificate and key [`client_pair`] names,
/// each parsed first so that a bad file is refused here, by its option's
/// name (the key's path is never printed).
pub(crate) fn client_pem(
    url: &str,
    names: [&str; 2],
    cert: Option<&str>,
    key: Option<&str>,
) -> Result<Option<ClientPem>, Error> {
    let Some((cert, key)) = client_pair(url, names, cert, key)? else {
        return Ok(None);
    };
    certificates(url, names[0], cert)?;
    private_key(url, names[1], key)?;
    Ok(Some((
        read_pem(url, names[0], cert, false)?,
        read_pem(url, names[1], key, true)?,
    )))
}

/// A trust store of the certificates in `path`.
pub(crate) fn roots_from_file(url: &str, option: &str, path: &str) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(url, option, path)? {
        roots.add(cert).map_err(|e| {
            invalid(
                url,
                format!("{option}={path}: not a usable CA certificate: {e}"),
            )
        })?;
    }
    Ok(roots)
}

/// The operating system's trusted roots (rustls-native-certs: the
/// ca-certificates bundle on Linux, or `$SSL_CERT_FILE` / `$SSL_CERT_DIR`).
pub(crate) fn system_roots(url: &str, option: &str) -> Result<RootCertStore, Error> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(invalid(
            url,
            format!(
                "{option}=system: no trusted root certificate found on this system{why} (install \
                 the ca-certificates package, or set SSL_CERT_FILE, or give the CA file's path)"
            ),
        ));
    }
    Ok(roots)
}

/// Whether this process has reached a store: a call was answered, or a
/// renewal was asked for (the worker it names was given by the store, to
/// this process or to the one before it, so the settings did reach it).
/// Until then, a connection that fails on a setting (a certificate check,
/// a TLS mode the server does not meet) is `Refused`: a start fails at
/// once, naming it. After, it is `Unavailable`: a running generator keeps
/// its grant while the certificate is put right, and a restarted server
/// forwarding a client's renewal does not make that client lose its
/// worker. One per authority, shared by its sessions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reached(Arc<std::sync::atomic::AtomicBool>);

impl Reached {
    /// A call was answered.
    pub(crate) fn mark(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Marks the store reached when `request` renews a worker.
    pub(crate) fn renewing(&self, request: &grantid::GrantRequest) {
        if request.worker.is_some() {
            self.mark();
        }
    }

    pub(crate) fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The answer to a connection of `engine` that failed on a setting
    /// (`why`): `Refused` until the store was reached, `Unavailable` after.
    pub(crate) fn setting_failed(&self, engine: &str, why: impl std::fmt::Display) -> GrantError {
        let message = format!("{engine}: cannot connect: {why}");
        if self.get() {
            GrantError::Unavailable(message)
        } else {
            GrantError::Refused(message)
        }
    }

    /// A failed connection of `engine`: a certificate check
    /// ([`certificate_failure`]) as [`Reached::setting_failed`], anything
    /// else `Unavailable` with `text`.
    pub(crate) fn connect_failed(
        &self,
        engine: &str,
        e: &(dyn std::error::Error + 'static),
        text: impl std::fmt::Display,
    ) -> GrantError {
        match certificate_failure(e) {
            Some(why) => self.setting_failed(engine, format!("TLS: {why}")),
            None => GrantError::Unavailable(format!("{engine}: cannot connect: {text}")),
        }
    }
}

/// The certificate check that failed a connection, if one did: the
/// server's certificate failed ours (an unknown CA, another name, expired),
/// or the server refused ours (none, or one it does not trust). Walks the
/// error's causes, into `std::io::Error`s (whose `source` skips the error
/// they wrap). A failure a configuration change must fix: the backends
/// answer it as [`Reached`] says (docs/reference/, "Connecting securely"
/// of each engine).
pub(crate) fn certificate_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rustls::AlertDescription as A;
    let mut next = Some(e);
    while let Some(err) = next {
        match err.downcast_ref::<rustls::Error>() {
            Some(tls @ rustls::Error::InvalidCertificate(_)) => {
                return Some(format!("the server's certificate: {tls}"));
            }
            Some(
                tls @ rustls::Error::AlertReceived(
                    A::CertificateRequired
                    | A::BadCertificate
                    | A::UnknownCA
                    | A::CertificateExpired
                    | A::CertificateRevoked
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate,
                ),
            ) => {
                return Some(format!(
                    "the server refused this client's certificate: {tls}"
                ));
            }
            _ => {}
        }
        next = match err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

/// What is checked of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing (libpq's `require` without a root certificate): the
    /// connection is encrypted, the server not authenticated.
    Nothing,
    /// Its chain up to a trusted root, not the host name (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    ChainAndName,
}

/// A client configuration: `roots` (used unless `verify` is `Nothing`),
/// an optional client certificate chain and key, and `alpn` protocols.
pub(crate) fn client_config(
    url: &str,
    roots: Option<RootCertStore>,
    verify: Verify,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    alpn: &[&[u8]],
) -> Result<ClientConfig, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(url, format!("TLS: {e}")))?;
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match (verify, roots) {
        (Verify::Nothing, _) => Arc::new(AnyCertificate { algorithms }),
        (_, None) => return Err(invalid(url, "TLS: no trusted root certificates")),
        (v, Some(roots)) => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid(url, format!("TLS: {e}")))?;
            if v == Verify::Chain {
                Arc::new(ChainOnly { inner: webpki })
            } else {
                webpki
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match client {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| invalid(url, format!("the client certificate and key: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Accepts any server certificate, and still checks that the server holds
/// its key (the handshake signatures): libpq's `sslmode=require`.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Checks the chain, not the host name: libpq's `sslmode=verify-ca`.
/// webpki checks the name only after the chain, so a name error means the
/// chain was good.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The TLS settings of a `postgres://` URL: tokio-postgres's `sslmode`
/// (`verify-ca` and `verify-full` are its `require` with a stricter
/// verifier) and the rustls configuration.
#[cfg(feature = "postgres")]
pub(crate) struct PgTls {
    pub(crate) mode: tokio_postgres::config::SslMode,
    pub(crate) config: ClientConfig,
}

/// The `sslmode` values, in libpq's order.
#[cfg(feature = "postgres")]
const PG_SSLMODES: &str = "disable, prefer, require, verify-ca, verify-full";

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a
/// `postgres://` URL (tokio-postgres knows only three of libpq's modes and
/// none of the files); returns the URL without them and its TLS settings.
#[cfg(feature = "postgres")]
pub(crate) fn postgres(url: &str) -> Result<(String, PgTls), Error> {
    use tokio_postgres::config::SslMode;
    let (driver_url, [mode, rootcert, cert, key]) =
        take_options(url, ["sslmode", "sslrootcert", "sslcert", "sslkey"])?;
    let system = rootcert.as_deref() == Some("system");
    // libpq 16: sslrootcert=system makes verify-full the default, and
    // refuses a weaker mode (the system's roots vouch for names, not for
    // one server).
    let mode = mode.unwrap_or_else(|| if system { "verify-full" } else { "prefer" }.to_owned());
    let (ssl_mode, verify_named) = match mode.as_str() {
        "disable" => (SslMode::Disable, None),
        "prefer" => (SslMode::Prefer, None),
        "require" => (SslMode::Require, None),
        "verify-ca" => (SslMode::Require, Some(Verify::Chain)),
        "verify-full" => (SslMode::Require, Some(Verify::ChainAndName)),
        "allow" => {
            return Err(invalid(
                url,
                format!("sslmode=allow is not supported (use one of {PG_SSLMODES})"),
            ));
        }
        other => {
            return Err(invalid(
                url,
                format!("sslmode={other:?} is not one of {PG_SSLMODES}"),
            ));
        }
    };
    if system && verify_named != Some(Verify::ChainAndName) {
        return Err(invalid(
            url,
            format!(
                "sslmode={mode} with sslrootcert=system: the system's roots vouch for host \
                 names, so only sslmode=verify-full checks anything (as libpq)"
            ),
        ));
    }
    let roots = match rootcert.as_deref() {
        None if verify_named.is_some() => {
            return Err(invalid(
                url,
                format!(
                    "sslmode={mode} needs the CA that signed the server's certificate: \
                     sslrootcert=PATH (a PEM file), or sslrootcert=system for the system's \
                     trusted roots"
                ),
            ));
        }
        None => None,
        Some("system") => Some(system_roots(url, "sslrootcert")?),
        Some(path) => Some(roots_from_file(url, "sslrootcert", path)?),
    };
    // libpq: with a root certificate, `prefer` and `require` check the
    // chain too (as verify-ca).
    let verify = verify_named.unwrap_or(if roots.is_some() {
        Verify::Chain
    } else {
        Verify::Nothing
    });
    let client = match client_pair(url, ["sslcert", "sslkey"], cert.as_deref(), key.as_deref())? {
        Some((c, k)) => Some((
            certificates(url, "sslcert", c)?,
            private_key(url, "sslkey", k)?,
        )),
        None => None,
    };
    // ALPN "postgresql": what PostgreSQL 17 requires for
    // sslnegotiation=direct; older servers ignore it.
    let config = client_config(url, roots, verify, client, &[b"postgresql"])?;
    Ok((
        driver_url,
        PgTls {
            mode: ssl_mode,
            config,
        },
    ))
}
