//! The registry: which backend a URL names, and how it is opened. The one
//! module that imports every backend; backends import only the kernel
//! (`kernel.rs`) and the shared modules below it.

use grantid::{Error, GrantSource};

use crate::datacenter;
use crate::kernel::Authority;
use crate::url::{self, AuthorityUrl, Target, default_file_path};

/// The default authority URL: the file authority at [`default_file_path`].
pub const DEFAULT_URL: &str = "file:";

/// The default authority URL with its path spelled out
/// (`file:/home/me/.local/state/grantid/authority.json`).
pub fn default_url() -> String {
    format!("file:{}", default_file_path().display())
}

/// Opens the authority named by `url` (see the crate's table of URLs). Only parsing
/// happens here: a server that cannot be reached makes `acquire` answer
/// `Unavailable`, it does not fail this call. With `datacenter=N` the
/// backend grants only the workers of datacenter N (docs/AUTHORITIES.md,
/// "Regions").
pub fn open(url: &str) -> Result<Box<dyn Authority>, Error> {
    open_in(url, None)
}

/// [`open`], restricted to `datacenter` when the URL names none.
fn open_in(url: &str, datacenter: Option<u32>) -> Result<Box<dyn Authority>, Error> {
    let parsed = url::parse(url)?;
    let datacenter = parsed.options.datacenter.or(datacenter);
    Ok(datacenter::restrict(open_backend(url, parsed)?, datacenter))
}

fn open_backend(url: &str, parsed: AuthorityUrl) -> Result<Box<dyn Authority>, Error> {
    // Unused only in a build with no authority at all.
    #[allow(unused_variables)]
    let options = parsed.options;
    match parsed.target {
        #[cfg(feature = "file")]
        Target::File(path) => Ok(Box::new(crate::engines::file::FileAuthority::new(
            path, options,
        ))),
        #[cfg(feature = "static")]
        Target::Static { worker, state } => Ok(Box::new(
            crate::engines::static_worker::StaticAuthority::new(worker, state, options),
        )),
        #[cfg(feature = "postgres")]
        Target::Postgres(u) => Ok(Box::new(crate::engines::postgres::PgAuthority::new(
            &u, options,
        )?)),
        #[cfg(feature = "redis")]
        Target::Redis(u) => Ok(Box::new(crate::engines::redis::RedisAuthority::new(
            &u, options,
        )?)),
        #[cfg(feature = "grpc")]
        Target::Grpc(addr) => Ok(Box::new(crate::engines::grpc::GrpcAuthority::new(
            &addr, options,
        )?)),
        #[cfg(feature = "grpc")]
        Target::Grpcs(spec) => Ok(Box::new(crate::engines::grpc::GrpcAuthority::new_tls(
            url, &spec, options,
        )?)),
        #[cfg(feature = "mysql")]
        Target::Mysql(u) => Ok(Box::new(crate::engines::mysql::MysqlAuthority::new(
            &u, options,
        )?)),
        #[cfg(feature = "etcd")]
        target @ (Target::Etcd(_) | Target::Etcds(..)) => Ok(Box::new(
            crate::engines::etcd::EtcdAuthority::open(url, target, options)?,
        )),
        #[cfg(not(feature = "etcd"))]
        Target::Etcd(_) | Target::Etcds(..) => Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            format!(
                "authority URL {:?}: this build has no etcd authority: build with the cargo \
                 feature `etcd` (for example `cargo build -p grantid-cli --features etcd`; it \
                 needs protoc: apt-get install protobuf-compiler); see docs/reference/etcd.md, \
                 \"Setup\"",
                url::redact(url)
            ),
        )),
        #[allow(unreachable_patterns)]
        // (Only the redacted URL is shown: the parsed target holds the
        // password.)
        _ => Err(Error::new(
            grantid::ErrorKind::InvalidArgument,
            format!(
                "authority URL {:?}: this build lacks the cargo feature of its scheme \
                 (docs/reference/urls.md)",
                url::redact(url)
            ),
        )),
    }
}

/// Opens `n` independent sessions of the authority named by `url` (at
/// least one), for a caller that runs several calls at once, such as a
/// grantid server forwarding a fleet's grants: each session has its own
/// connection, so calls on different sessions do not wait for each other.
/// The store serialises what must be serialised (a row lock, a script, a
/// transaction). What a process remembers of the store is shared by its
/// sessions: etcd's revision floor (a store that went back in time is
/// noticed whichever session saw the higher revision), whether etcd or
/// MySQL was once connected to (a certificate failure is `Refused` only
/// before: after it a running generator keeps its grant) and the datacenter
/// wrapper's layouts (a release may come on another session than its
/// acquire). `file:` and `static:` run every call under one file lock, so
/// more sessions would only wait on it: for them one session is returned,
/// whatever `n` is.
pub fn open_sessions(url: &str, n: usize) -> Result<Vec<Box<dyn Authority>>, Error> {
    let parsed = url::parse(url)?;
    let datacenter = parsed.options.datacenter;
    let backends: Vec<Box<dyn Authority>> = match parsed.target {
        Target::File(_) | Target::Static { .. } => vec![open_backend(url, parsed)?],
        #[cfg(feature = "etcd")]
        target @ (Target::Etcd(_) | Target::Etcds(..)) => with_siblings(
            crate::engines::etcd::EtcdAuthority::open(url, target, parsed.options)?,
            n,
            crate::engines::etcd::EtcdAuthority::sibling,
        ),
        // Whether the server was once connected to (a certificate failure
        // is `Refused` only before).
        #[cfg(feature = "mysql")]
        Target::Mysql(u) => with_siblings(
            crate::engines::mysql::MysqlAuthority::new(&u, parsed.options)?,
            n,
            crate::engines::mysql::MysqlAuthority::sibling,
        ),
        // No process-side state beyond the connection.
        _ => (0..n.max(1))
            .map(|_| open_backend(url, url::parse(url)?))
            .collect::<Result<_, _>>()?,
    };
    Ok(datacenter::restrict_all(backends, datacenter))
}

/// `first` and `n - 1` more sessions made by `sibling` (at least one in
/// all), which share what `first` remembers of the store.
#[cfg(any(feature = "etcd", feature = "mysql"))]
fn with_siblings<A: Authority + 'static>(
    first: A,
    n: usize,
    sibling: fn(&A) -> A,
) -> Vec<Box<dyn Authority>> {
    let mut all: Vec<Box<dyn Authority>> = (1..n.max(1))
        .map(|_| Box::new(sibling(&first)) as Box<dyn Authority>)
        .collect();
    all.insert(0, Box::new(first));
    all
}

/// Opens the authority named by `url` as a [`GrantSource`]: the entry point
/// every binding uses. See [`open`].
pub fn from_url(url: &str) -> Result<Box<dyn GrantSource>, Error> {
    from_url_in(url, None)
}

/// As [`from_url`], for a generator that runs in `datacenter`: a URL
/// without `datacenter=N` grants that datacenter's workers, as if it said
/// `datacenter=N` (docs/AUTHORITIES.md, "Regions"); a URL that names one
/// grants its own (the generator refuses a disagreement at start).
pub fn from_url_in(url: &str, datacenter: Option<u32>) -> Result<Box<dyn GrantSource>, Error> {
    let authority: Box<dyn GrantSource> = open_in(url, datacenter)?;
    Ok(authority)
}
