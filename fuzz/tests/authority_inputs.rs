//! Fuzz harnesses for the authorities' inputs: `from_url` for every scheme
//! and the file authority's state file (truncated, corrupted, hostile JSON),
//! read through the real `FileAuthority` on the real file system.

use std::path::{Path, PathBuf};

use grantid::{ErrorKind, GrantError, GrantRequest, Layout};

/// Every scheme the parser lists, and the spellings it also takes.
fn schemes() -> Vec<String> {
    let mut all: Vec<String> = grantid_authority::schemes()
        .split(", ")
        .map(str::to_owned)
        .collect();
    all.extend(["".to_owned(), "static:env:".to_owned()]);
    all
}

#[test]
fn from_url_every_scheme() {
    let schemes = schemes();
    bolero::check!()
        .with_type::<(u8, String)>()
        .for_each(|(scheme, tail)| {
            let url = format!("{}{tail}", schemes[usize::from(*scheme) % schemes.len()]);
            if let Err(e) = grantid_authority::from_url(&url) {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url:?}: {e}");
            }
        });
}

#[test]
fn from_url_bytes() {
    bolero::check!().for_each(|bytes: &[u8]| {
        let Ok(url) = std::str::from_utf8(bytes) else {
            return;
        };
        if let Err(e) = grantid_authority::from_url(url) {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url:?}: {e}");
        }
    });
}

/// Fields of a state file: mostly plausible, sometimes extreme.
#[derive(Debug, bolero::TypeGenerator)]
struct StateInput {
    format: u8,
    /// Keep the layout valid (the reader's later checks get exercised).
    plausible: bool,
    bits: (u8, u8, u8),
    epoch_ms: u64,
    tick_ms: u64,
    workers: Vec<(u32, Option<u64>, u64, u64, u64)>,
    answers: Vec<(u32, u64, u64, u64, u64, u64)>,
    /// Damage: cut the file at this byte, then overwrite one byte.
    truncate: Option<u16>,
    flip: Option<(u16, u8)>,
}

/// The file's bytes and the layout the request asks for (the file's own
/// when it is valid, so that the reader goes past the layout check).
fn state_bytes(s: &StateInput) -> (Vec<u8>, Layout) {
    let workers: Vec<_> = s
        .workers
        .iter()
        .map(|&(worker, holder, lease_expiry, high_water, fencing)| {
            serde_json::json!({"worker": worker, "holder": holder, "lease_expiry": lease_expiry,
                "high_water": high_water, "fencing": fencing})
        })
        .collect();
    let answers: Vec<_> = s
        .answers
        .iter()
        .map(|&(worker, incarnation, request_id, grant_id, start, end)| {
            serde_json::json!({"namespace": "fuzz", "worker": worker, "incarnation": incarnation,
                "request_id": request_id, "grant_id": grant_id, "start": start, "end": end})
        })
        .collect();
    let (mut t, mut w, mut q, mut epoch_ms, mut tick_ms) =
        (s.bits.0, s.bits.1, s.bits.2, s.epoch_ms, s.tick_ms);
    if s.plausible {
        (t, w, q) = (1 + t % 41, w % 11, 1 + q % 12);
        (epoch_ms, tick_ms) = (epoch_ms % (1 << 42), 1 + tick_ms % 1000);
    }
    let doc = serde_json::json!({
        "format": if s.plausible { 1 } else { s.format % 3 },
        "namespaces": {"fuzz": {
            "layout": {"timestamp_bits": t, "worker_bits": w,
                "sequence_bits": q, "epoch_ms": epoch_ms, "tick_ms": tick_ms},
            "workers": workers}},
        "answers": answers.clone(),
        "recent": answers,
    });
    let layout = Layout::with_all(t, w, q, epoch_ms, tick_ms).unwrap_or_default();
    let mut bytes = serde_json::to_vec(&doc).unwrap();
    if let Some(n) = s.truncate {
        bytes.truncate(usize::from(n));
    }
    if let Some((at, byte)) = s.flip
        && !bytes.is_empty()
    {
        let at = usize::from(at) % bytes.len();
        bytes[at] = byte;
    }
    (bytes, layout)
}

/// A state file of its own for each harness (harnesses run in parallel).
fn scratch_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("grantid-fuzz-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Asks the file authority for a grant from `bytes` as its state file, and
/// for its status: a grant that validates or a typed error, never a panic.
fn check_state_file(path: &PathBuf, bytes: &[u8], layout: Layout) {
    // Each input is a file of its own history: without this, the sidecar
    // of the previous input's grant would quarantine it as a restore.
    if let Some(sidecar) = grantid_authority::sidecar_path(path) {
        let _ = std::fs::remove_file(sidecar);
    }
    std::fs::write(path, bytes).unwrap();
    let url = format!("file:{}", path.display());
    let authority = grantid_authority::open(&url).unwrap();
    let request = GrantRequest {
        namespace: "fuzz".into(),
        incarnation: 1,
        request_id: 2,
        worker: None,
        not_before: 0,
        now: 1_000,
        duration: 1_000,
        layout,
    };
    match authority.acquire(&request) {
        Ok(grant) => grant.validate(&request).unwrap(),
        Err(GrantError::Unavailable(why)) if why.contains("damaged") => {
            // A damaged file is never replaced: its high-water marks matter.
            assert_eq!(std::fs::read(path).unwrap(), bytes, "{why}");
        }
        Err(_) => {}
    }
    let _ = authority.status(None);
    let _ = authority.status(Some("fuzz"));
}

#[test]
fn file_state_structured() {
    let path = scratch_file("structured.json");
    bolero::check!()
        .with_type::<StateInput>()
        .for_each(|input| {
            let (bytes, layout) = state_bytes(input);
            check_state_file(&path, &bytes, layout)
        });
    remove_scratch(&path);
}

#[test]
fn file_state_bytes() {
    let path = scratch_file("bytes.json");
    bolero::check!().for_each(|bytes: &[u8]| check_state_file(&path, bytes, Layout::default()));
    remove_scratch(&path);
}

/// Removes a harness's state file (and its lock file, if any) and the
/// directory once it is empty.
fn remove_scratch(path: &Path) {
    let dir = path.parent().unwrap();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&name) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
    if let Some(sidecar) = grantid_authority::sidecar_path(path) {
        let _ = std::fs::remove_file(sidecar);
    }
}
