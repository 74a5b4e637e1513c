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

/// True when the call's token is bound to namespaces: its effects must stay
/// inside them (docs/SERVICE.md, "Threat model").
pub(crate) fn scoped(extensions: &tonic::Extensions) -> bool {
    matches!(extensions.get::<Scope>(), Some(Scope(Some(_))))
}

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

/// The entries of a token file's text, and its bad lines (`line N:
/// why`, never the token): a bad line is skipped, and a token on two
/// lines is on neither (which line's namespaces were meant is unknown).
fn parse(text: &str) -> (Vec<Entry>, Vec<String>) {
    let mut lines: Vec<(usize, Entry)> = Vec::new();
    let mut bad = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match entry(line) {
            Ok(e) => lines.push((n + 1, e)),
            Err(why) => bad.push(format!("line {}: {why}", n + 1)),
        }
    }
    let mut twice: Vec<Vec<u8>> = Vec::new();
    for (i, (n, e)) in lines.iter().enumerate() {
        if lines[..i].iter().any(|(_, o)| o.token == e.token) {
            bad.push(format!("line {n}: the same token is on an earlier line"));
            twice.push(e.token.clone());
        }
    }
    let entries = lines
        .into_iter()
        .map(|(_, e)| e)
        .filter(|e| !twice.contains(&e.token))
        .collect();
    (entries, bad)
}

/// One line's entry (not blank, not a comment), or why it is none.
fn entry(line: &str) -> Result<Entry, String> {
    let mut words = line.split_whitespace();
    let token = words.next().unwrap_or_default();
    let namespaces = words.next();
    if words.next().is_some() {
        return Err("expected TOKEN or TOKEN NAMESPACE[,NAMESPACE...]".to_owned());
    }
    if token.len() < MIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "a token is at least {MIN_TOKEN_LEN} printable ASCII characters (for example 32 \
             hex digits: openssl rand -hex 16)"
        ));
    }
    let scope = match namespaces {
        None => Scope(None),
        Some(list) => {
            let names: Vec<String> = list.split(',').map(str::to_owned).collect();
            if names.iter().any(String::is_empty) {
                return Err(format!(
                    "an empty namespace in {list:?} (NAMESPACE,NAMESPACE,...)"
                ));
            }
            Scope(Some(names.into()))
        }
    };
    Ok(Entry {
        token: token.as_bytes().to_vec(),
        scope,
    })
}

/// What a reload of the token file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reloaded {
    /// The tokens now valid.
    pub tokens: usize,
    /// The bad lines skipped (`line N: why`).
    pub skipped: Vec<String>,
    /// Why no token is valid, when none is.
    pub none: Option<String>,
    /// Whether a token valid before is not now: the connections it made
    /// trusted are trusted no more (`crate::conns::Conns::distrust_all`).
    pub revoked: bool,
}

impl Reloaded {
    /// Logs and counts the reload (`grantid_reloads_total`, outcome `ok`,
    /// `partial` with bad lines, `none` without a token): each bad line,
    /// then `event=tokens_none` or `event=reloaded`.
    pub fn report(&self) {
        for why in &self.skipped {
            log::warn!(target: "grantid_server", "event=token_line_skipped reason={why:?}");
        }
        let skipped = self.skipped.len();
        if let Some(why) = &self.none {
            crate::telemetry::reload("tokens", "none");
            log::error!(
                target: "grantid_server",
                "event=tokens_none reason={why:?} skipped={skipped} note=\"no token is valid: \
                 every call but health's is UNAUTHENTICATED until the file holds one\""
            );
            return;
        }
        let outcome = if skipped > 0 { "partial" } else { "ok" };
        crate::telemetry::reload("tokens", outcome);
        log::info!(
            target: "grantid_server",
            "event=reloaded what=tokens tokens={} skipped={skipped}", self.tokens
        );
    }
}

impl Tokens {
    /// Reads the file: a file that cannot be read, a bad line or no token
    /// at all is `InvalidArgument`, naming the first bad line.
    pub fn load(path: &Path) -> Result<Tokens, Error> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("--token-file {}: {why}", path.display()),
            )
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(&e.to_string()))?;
        let (entries, skipped) = parse(&text);
        if let Some(first) = skipped.first() {
            return Err(bad(first));
        }
        if entries.is_empty() {
            return Err(bad("no token in the file: every call would be refused"));
        }
        Ok(Tokens {
            current: RwLock::new(Arc::new(entries)),
            path: path.to_owned(),
        })
    }

    /// Reads the file again and fails closed: the tokens of its good lines
    /// replace the ones in use, the bad lines are skipped, and a file that
    /// is missing, cannot be read or holds no token leaves no token valid.
    pub fn reload(&self) -> Reloaded {
        let (entries, skipped, none) = match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                let (entries, skipped) = parse(&text);
                let none = entries
                    .is_empty()
                    .then(|| "the file holds no valid token".to_owned());
                (entries, skipped, none)
            }
            Err(e) => (
                Vec::new(),
                Vec::new(),
                Some(format!("cannot read the file: {e}")),
            ),
        };
        let tokens = entries.len();
        let was = {
            let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *current, Arc::new(entries))
        };
        let now = self.entries();
        let revoked = was
            .iter()
            .any(|old| !now.iter().any(|e| e.token == old.token));
        Reloaded {
            tokens,
            skipped,
            none,
            revoked,
        }
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
        crate::conns::trust(request.extensions());
        Ok(request)
    }
}

/// The interceptor of health, which needs no token: its calls trust their
/// connection only when the server has no token file (`.0`), since with one
/// only an authenticated call does (docs/SERVICE.md, "Connections").
#[derive(Debug, Clone)]
pub(crate) struct Probe(pub bool);

impl tonic::service::Interceptor for Probe {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if self.0 {
            crate::conns::trust(request.extensions());
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
    fn a_reload_fails_closed() {
        const KEPT: &str = "kept-token-0123456789";
        const LEAKED: &str = "leaked-token-0123456789";
        let valid =
            |t: &Tokens, token: &str| t.check(&metadata(&format!("Bearer {token}"))).is_ok();
        let path = file(&format!("{KEPT} a\n{LEAKED}\n"));
        let t = Tokens::load(&path).unwrap();
        // The leaked token's line replaced by a marker: the others stay.
        std::fs::write(&path, format!("{KEPT} a\nREVOKED\n")).unwrap();
        let r = t.reload();
        assert_eq!((r.tokens, r.none.as_deref()), (1, None));
        assert_eq!(r.skipped.len(), 1);
        assert!(
            r.skipped[0].starts_with("line 2: a token is at least"),
            "{r:?}"
        );
        assert!(valid(&t, KEPT) && !valid(&t, LEAKED));
        // Damaged (a third word) or on two lines: on none.
        for text in [
            format!("{KEPT} a b\n{LEAKED}\n"),
            format!("{KEPT}\n{LEAKED}\n{KEPT} a\n"),
        ] {
            std::fs::write(&path, text).unwrap();
            let r = t.reload();
            assert_eq!(r.tokens, 1, "{r:?}");
            assert!(!valid(&t, KEPT) && valid(&t, LEAKED));
        }
        // Empty, then missing: no token.
        std::fs::write(&path, "# none\n").unwrap();
        assert!(t.reload().none.unwrap().contains("no valid token"));
        assert!(!valid(&t, KEPT) && !valid(&t, LEAKED));
        std::fs::write(&path, format!("{KEPT}\n")).unwrap();
        assert_eq!(t.reload().tokens, 1);
        std::fs::remove_file(&path).unwrap();
        assert!(t.reload().none.unwrap().contains("cannot read the file"));
        assert!(!valid(&t, KEPT));
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
