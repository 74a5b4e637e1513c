//! Bearer tokens of `grantid serve --token-file PATH` (docs/SERVICE.md,
//! "TLS, mTLS and tokens").
//!
//! The file holds one token per line, alone (every namespace) or followed
//! by the namespaces it may use, comma-separated; `#` starts a comment
//! line; blank lines are skipped:
//!
//! ```text
//! # the order service
//! 6f1c0e5b8a4d4e0f9a3b7c2d1e8f5a6b orders-v1,orders-v2
//! # operators: every namespace, Init, Status of every namespace
//! 0b9e7d6c5a4f3e2d1c0b9a8f7e6d5c4b
//! ```
//!
//! * Each call but health's must carry `authorization: Bearer TOKEN`;
//!   without it, or with a token not in the file: `UNAUTHENTICATED`.
//! * A token bound to namespaces may call for those only, else
//!   `PERMISSION_DENIED`; calls about the whole authority (`Init`, `Status`
//!   of every namespace) need a token of every namespace.
//! * Tokens are compared in constant time (`subtle`), every entry each
//!   time; they are never printed, and the messages give line numbers.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use grantid::{Error, ErrorKind};
use subtle::ConstantTimeEq;
use tonic::Status;

/// Shortest token accepted: a guessable token is no lock.
pub const MIN_TOKEN_LEN: usize = 16;

/// What a call's token may reach: `None`, every namespace.
#[derive(Debug, Clone)]
pub(crate) struct Scope(Option<Arc<[String]>>);

#[derive(Debug)]
struct Entry {
    token: Vec<u8>,
    scope: Scope,
}

/// The tokens of a token file, reloadable.
#[derive(Debug)]
pub(crate) struct Tokens {
    pub path: PathBuf,
    current: RwLock<Arc<Vec<Entry>>>,
}

fn parse(path: &Path) -> Result<Vec<Entry>, Error> {
    let shown = path.display();
    let bad = |why: String| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("--token-file {shown}: {why}"),
        )
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("{e}")))?;
    let mut entries: Vec<Entry> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = n + 1;
        let mut words = line.split_whitespace();
        let token = words.next().unwrap_or_default();
        let namespaces = words.next();
        if words.next().is_some() {
            return Err(bad(format!(
                "line {n}: expected TOKEN or TOKEN NAMESPACE[,NAMESPACE...]"
            )));
        }
        if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(format!(
                "line {n}: a token is at least {MIN_TOKEN_LEN} printable ASCII characters \
                 (for example 32 hex digits: openssl rand -hex 16)"
            )));
        }
        if entries.iter().any(|e| e.token == token.as_bytes()) {
            return Err(bad(format!(
                "line {n}: the same token is on an earlier line"
            )));
        }
        let scope = match namespaces {
            None => Scope(None),
            Some(list) => {
                let names: Vec<String> = list.split(',').map(str::to_owned).collect();
                if names.iter().any(String::is_empty) {
                    return Err(bad(format!(
                        "line {n}: an empty namespace in {list:?} (NAMESPACE,NAMESPACE,...)"
                    )));
                }
                Scope(Some(names.into()))
            }
        };
        entries.push(Entry {
            token: token.as_bytes().to_vec(),
            scope,
        });
    }
    if entries.is_empty() {
        return Err(bad(
            "no token in the file: every call would be refused".to_owned()
        ));
    }
    Ok(entries)
}

impl Tokens {
    /// Reads the file: any problem is `InvalidArgument`.
    pub fn load(path: &Path) -> Result<Tokens, Error> {
        Ok(Tokens {
            current: RwLock::new(Arc::new(parse(path)?)),
            path: path.to_owned(),
        })
    }

    /// Reads the file again; on failure the tokens in use stay. Returns
    /// how many tokens it holds now.
    pub fn reload(&self) -> Result<usize, Error> {
        let fresh = Arc::new(parse(&self.path)?);
        let n = fresh.len();
        if let Ok(mut current) = self.current.write() {
            *current = fresh;
        }
        Ok(n)
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }

    fn entries(&self) -> Arc<Vec<Entry>> {
        match self.current.read() {
            Ok(c) => Arc::clone(&c),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The scope of the call's bearer token, or `UNAUTHENTICATED`.
    fn check(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Scope, Status> {
        let Some(value) = metadata.get("authorization") else {
            return Err(unauthenticated(
                "no bearer token: send the metadata authorization: Bearer TOKEN",
            ));
        };
        let bytes = value.as_bytes();
        let token = match bytes.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => bytes[7..].trim_ascii(),
            _ => {
                return Err(unauthenticated(
                    "the authorization metadata is not a bearer token (Bearer TOKEN)",
                ));
            }
        };
        // Every entry is compared, whichever matches.
        let mut found = None;
        for entry in self.entries().iter() {
            if bool::from(entry.token.as_slice().ct_eq(token)) {
                found = Some(entry.scope.clone());
            }
        }
        found.ok_or_else(|| {
            unauthenticated("the bearer token is not one of the server's (--token-file)")
        })
    }
}

fn unauthenticated(why: &str) -> Status {
    crate::telemetry::unauthenticated();
    log::debug!(target: "grantid_server", "event=unauthenticated reason={why:?}");
    Status::unauthenticated(why)
}

/// The interceptor of every service but health: checks the bearer token
/// when the server has a token file, and leaves the token's [`Scope`] in
/// the request's extensions for [`allow`].
#[derive(Debug, Clone)]
pub(crate) struct Guard(pub Option<Arc<Tokens>>);

impl tonic::service::Interceptor for Guard {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(tokens) = &self.0 {
            let scope = tokens.check(request.metadata())?;
            request.extensions_mut().insert(scope);
        }
        Ok(request)
    }
}

/// Whether the call's token may act on `namespace` (`None`: the whole
/// authority); without a token file every call may.
pub(crate) fn allow(extensions: &tonic::Extensions, namespace: Option<&str>) -> Result<(), Status> {
    let Some(Scope(Some(names))) = extensions.get::<Scope>() else {
        return Ok(());
    };
    match namespace {
        Some(ns) if names.iter().any(|n| n == ns) => Ok(()),
        Some(ns) => Err(Status::permission_denied(format!(
            "this token is not bound to the namespace {ns:?} (--token-file)"
        ))),
        None => Err(Status::permission_denied(
            "this call is about every namespace: it needs a token bound to no namespace \
             (--token-file)",
        )),
    }
}

/// `call`'s answer if `allowed`, else the refusal (`call` is not run).
pub(crate) async fn guarded<T>(
    allowed: Result<(), Status>,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    allowed?;
    call.await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("grantid-tokens-{}-{n}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn metadata(value: &str) -> tonic::metadata::MetadataMap {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn tokens_and_their_namespaces() {
        let path = file("# c\n\n0123456789abcdef0 a,b\n  fedcba98765432100  \n");
        let t = Tokens::load(&path).unwrap();
        assert_eq!(t.len(), 2);
        let scope = t.check(&metadata("Bearer 0123456789abcdef0")).unwrap();
        let mut ext = tonic::Extensions::new();
        ext.insert(scope);
        assert!(allow(&ext, Some("a")).is_ok());
        assert_eq!(
            allow(&ext, Some("c")).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert!(allow(&ext, None).is_err());
        let every = t.check(&metadata("bearer fedcba98765432100")).unwrap();
        ext.insert(every);
        assert!(allow(&ext, None).is_ok());
        for bad in ["Bearer 0123456789abcdef", "Basic x", "Bearer "] {
            let e = t.check(&metadata(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad}");
        }
        assert!(t.check(&tonic::metadata::MetadataMap::new()).is_err());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn bad_files_name_the_line_and_never_the_token() {
        for (text, needle) in [
            ("", "no token"),
            ("short\n", "line 1: a token is at least"),
            ("0123456789abcdef0 a b\n", "line 1: expected TOKEN"),
            ("0123456789abcdef0 a,,b\n", "line 1: an empty namespace"),
            (
                "0123456789abcdef0\n#\n0123456789abcdef0 a\n",
                "line 3: the same token",
            ),
        ] {
            let path = file(text);
            let e = Tokens::load(&path).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().contains(needle), "{text:?}: {e}");
            assert!(!e.message().contains("0123456789abcdef0"), "{e}");
            let _ = std::fs::remove_file(path);
        }
    }
}
