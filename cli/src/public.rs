//! `grantid public`: public IDs (docs/PUBLIC_IDS.md). The key comes from a
//! file (`--key-file`, or `GRANTID_PUBLIC_KEY_FILE`) or from the
//! environment (`GRANTID_PUBLIC_KEY`), never from an argument, and is never
//! printed or logged.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use grantid::{Error, ErrorKind, PUBLIC_ID_KEY_LEN, PublicIds};

/// The variable holding the key as 32 hex digits.
pub const KEY_ENV: &str = "GRANTID_PUBLIC_KEY";

#[derive(Debug, Subcommand)]
pub enum PublicCommand {
    /// Prints the public form of each ID (13 Crockford base32 characters).
    Encode(PublicArgs),
    /// Prints the ID of each public form.
    Decode(PublicArgs),
    /// Writes a new random key to a new file (mode 0600); prints nothing.
    Keygen {
        /// The file to create; an existing file is never overwritten.
        #[arg(long)]
        key_file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct PublicArgs {
    /// IDs (decimal or 0x hex) to encode, or public IDs to decode; one per
    /// line on standard input when none are given.
    pub values: Vec<String>,
    /// The key file: 32 hex digits (surrounding whitespace ignored) or 16
    /// raw bytes. Without it, the key is read from GRANTID_PUBLIC_KEY.
    #[arg(long, env = "GRANTID_PUBLIC_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Public IDs as decimal numbers in [1, 2^63) instead of text.
    #[arg(long)]
    pub numeric: bool,
}

pub fn run(command: PublicCommand) -> Result<(), Error> {
    match command {
        PublicCommand::Encode(a) => each(&a, |ids, v| {
            let id = grantid::parse_id(v)?;
            if a.numeric {
                ids.encode(id).map(|p| p.to_string())
            } else {
                ids.encode_str(id)
            }
        }),
        PublicCommand::Decode(a) => each(&a, |ids, v| {
            let id = if a.numeric {
                ids.decode(grantid::parse_id(v)?)?
            } else {
                ids.decode_str(v)?
            };
            Ok(id.to_string())
        }),
        PublicCommand::Keygen { key_file } => keygen(&key_file),
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Unavailable, format!("{what}: {e}"))
}

/// Loads the key, then maps every value (arguments, else stdin lines) to
/// one output line; stops at the first bad value.
fn each(
    a: &PublicArgs,
    map: impl Fn(&PublicIds, &str) -> Result<String, Error>,
) -> Result<(), Error> {
    let ids = load_key(a.key_file.as_deref(), std::env::var_os(KEY_ENV))?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut emit = |v: &str| -> Result<(), Error> {
        writeln!(out, "{}", map(&ids, v)?).map_err(|e| io_error("cannot write output", e))
    };
    if a.values.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| io_error("cannot read standard input", e))?;
            let v = line.trim();
            if !v.is_empty() {
                emit(v)?;
            }
        }
    } else {
        for v in &a.values {
            emit(v)?;
        }
    }
    out.flush().map_err(|e| io_error("cannot write output", e))
}

/// The key from `file` if given, else from the environment variable's
/// value. Errors name where the key came from, never the key.
pub fn load_key(file: Option<&Path>, env: Option<std::ffi::OsString>) -> Result<PublicIds, Error> {
    if let Some(path) = file {
        let bytes = std::fs::read(path)
            .map_err(|e| io_error(&format!("cannot read the key file {}", path.display()), e))?;
        warn_if_shared(path);
        let where_ = format!("the key file {}", path.display());
        return if bytes.len() == PUBLIC_ID_KEY_LEN {
            PublicIds::new(&bytes)
        } else {
            let text = std::str::from_utf8(&bytes).unwrap_or("");
            PublicIds::from_hex(text.trim())
                .map_err(|e| within(&where_, e, "16 raw bytes or 32 hex digits"))
        };
    }
    let Some(value) = env else {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "no public-ID key: pass --key-file (or set GRANTID_PUBLIC_KEY_FILE) or set {KEY_ENV} \
             to 32 hex digits"
            ),
        ));
    };
    PublicIds::from_hex(value.to_str().unwrap_or("").trim())
        .map_err(|e| within(KEY_ENV, e, "32 hex digits"))
}

fn within(where_: &str, e: Error, wanted: &str) -> Error {
    Error::new(
        e.kind(),
        format!("{where_} does not hold {wanted}: {}", e.message()),
    )
}

/// A key readable by group or others is reported on stderr (not the key).
fn warn_if_shared(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            eprintln!(
                "grantid: warning: the key file {} is readable by others (chmod 600 it)",
                path.display()
            );
        }
    }
}

fn keygen(path: &Path) -> Result<(), Error> {
    let key = PublicIds::generate_key()?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .map_err(|e| io_error(&format!("cannot create the key file {}", path.display()), e))?;
    writeln!(file, "{hex}")
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(&format!("cannot write the key file {}", path.display()), e))?;
    eprintln!("grantid: wrote a new public-ID key to {}", path.display());
    Ok(())
}
