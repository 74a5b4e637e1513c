//! The end of a run: load the grant log, read every record file, count
//! duplicates and IDs outside their grants, and load the IDs into a
//! PostgreSQL `BIGINT PRIMARY KEY` table as an independent count.

use std::path::{Path, PathBuf};

use grantid::Layout;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, NoTls};

use crate::check::{DupCounter, DupReport, GrantIndex, LoggedGrant, Placement};
use crate::idfile;

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    /// IDs read from the record files.
    pub ids: u64,
    /// Record files read.
    pub files: usize,
    /// Trailing partial records (writes cut by a kill -9), ignored.
    pub torn_bytes: u64,
    /// Duplicate count and samples.
    pub dups: DupReport,
    /// IDs whose (worker, tick) lies in no logged grant of that worker.
    pub outside: u64,
    /// IDs inside a grant made for another incarnation than the recording
    /// process's.
    pub foreign: u64,
    /// A few offending IDs with their file.
    pub samples: Vec<String>,
    /// Grants in the log.
    pub grants: u64,
    /// Worker values in the log.
    pub workers: usize,
    /// Overlapping grants of one worker in the log.
    pub overlaps: u64,
    /// Independent check: rows in the `BIGINT PRIMARY KEY` table, and the
    /// duplicates PostgreSQL counted (None when skipped).
    pub pg_rows: Option<u64>,
    /// Duplicates PostgreSQL counted.
    pub pg_dups: u64,
    /// Why the PostgreSQL check refused the COPY into the keyed table.
    pub pg_refusal: Option<String>,
}

/// Loads the grant log of `namespace`.
pub fn load_grants(client: &mut Client, namespace: &str) -> Result<GrantIndex, String> {
    let rows = client
        .query(
            "SELECT worker, incarnation, start_tick, end_tick FROM grantid.grant_log \
             WHERE namespace = $1",
            &[&namespace],
        )
        .map_err(|e| format!("cannot read grantid.grant_log: {e}"))?;
    Ok(GrantIndex::new(rows.iter().map(|r| LoggedGrant {
        worker: r.get::<_, i64>(0) as u32,
        incarnation: r.get::<_, i64>(1) as u64,
        start: r.get::<_, i64>(2) as u64,
        end: r.get::<_, i64>(3) as u64,
    })))
}

/// Reads every record file: duplicates, and grant placement when there is
/// a grant log (`None`: a state-loss run, whose authority's log was rolled
/// back with its state; then only duplicates are counted).
pub fn check_files(
    files: &[PathBuf],
    layout: &Layout,
    grants: Option<&GrantIndex>,
    scratch: &Path,
) -> Result<Findings, String> {
    let mut f = Findings {
        grants: grants.map_or(0, |g| g.grants),
        workers: grants.map_or(0, GrantIndex::workers),
        overlaps: grants.map_or(0, |g| g.overlaps),
        ..Findings::default()
    };
    let expected: u64 = files
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len() / 8)
        .sum();
    let mut dups = DupCounter::new(expected, scratch).map_err(|e| e.to_string())?;
    let seq_bits = u32::from(layout.sequence_bits());
    let worker_mask = layout.worker_count() - 1;
    let ts_shift = seq_bits + u32::from(layout.worker_bits());
    let mut io_error = None;
    for path in files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let header = idfile::header(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let read = idfile::read(path, |id| {
            f.ids += 1;
            if io_error.is_none()
                && let Err(e) = dups.push(id)
            {
                io_error = Some(e.to_string());
            }
            let Some(grants) = grants else {
                return;
            };
            let worker = ((id >> seq_bits) & worker_mask) as u32;
            let tick = id >> ts_shift;
            let placement = if id == 0 {
                Placement::Outside
            } else {
                grants.place(worker, tick, header.incarnation)
            };
            match placement {
                Placement::Own => {}
                Placement::OtherIncarnation(other) => {
                    f.foreign += 1;
                    if f.samples.len() < 8 {
                        f.samples.push(format!(
                            "{name}: id {id} (worker {worker}, tick {tick}) lies in a grant of incarnation {other:#x}, not {:#x}",
                            header.incarnation
                        ));
                    }
                }
                Placement::Outside => {
                    f.outside += 1;
                    if f.samples.len() < 8 {
                        f.samples.push(format!(
                            "{name}: id {id} (worker {worker}, tick {tick}) lies in no logged grant"
                        ));
                    }
                }
            }
        });
        let (_, torn) = read.map_err(|e| format!("{}: {e}", path.display()))?;
        f.files += 1;
        f.torn_bytes += torn as u64;
    }
    if let Some(e) = io_error {
        return Err(format!("duplicate counting: {e}"));
    }
    f.dups = dups.finish().map_err(|e| e.to_string())?;
    Ok(f)
}

fn copy_ids(client: &mut Client, table: &str, files: &[PathBuf]) -> Result<u64, postgres::Error> {
    let sink = client.copy_in(&format!("COPY {table} (id) FROM STDIN (FORMAT binary)"))?;
    let mut w = BinaryCopyInWriter::new(sink, &[Type::INT8]);
    let mut err = None;
    for path in files {
        let _ = idfile::read(path, |id| {
            if err.is_none()
                && let Err(e) = w.write(&[&(id as i64)])
            {
                err = Some(e);
            }
        });
        if let Some(e) = err.take() {
            return Err(e);
        }
    }
    w.finish()
}

/// The independent count: every ID COPYed into an unlogged table, then a
/// `BIGINT PRIMARY KEY` added (one sorted index build, much faster than
/// keyed inserts). When PostgreSQL refuses the key, it counts the repeats.
pub fn pg_check(client: &mut Client, files: &[PathBuf], f: &mut Findings) -> Result<(), String> {
    let e = |what: &str, err: postgres::Error| format!("{what}: {err}");
    client
        .batch_execute(
            "SET maintenance_work_mem = '512MB'; DROP TABLE IF EXISTS torture_ids; \
             CREATE UNLOGGED TABLE torture_ids (id bigint NOT NULL)",
        )
        .map_err(|x| e("cannot create torture_ids", x))?;
    let copied = copy_ids(client, "torture_ids", files).map_err(|x| e("COPY", x))?;
    match client.batch_execute("ALTER TABLE torture_ids ADD PRIMARY KEY (id)") {
        Ok(()) => {
            let n: i64 = client
                .query_one("SELECT count(*) FROM torture_ids", &[])
                .map_err(|x| e("count", x))?
                .get(0);
            f.pg_rows = Some(n as u64);
            f.pg_dups = 0;
        }
        Err(refused) => {
            f.pg_refusal = Some(
                refused
                    .as_db_error()
                    .map_or_else(|| refused.to_string(), |d| d.message().to_owned()),
            );
            let distinct: i64 = client
                .query_one("SELECT count(DISTINCT id) FROM torture_ids", &[])
                .map_err(|x| e("count", x))?
                .get(0);
            f.pg_rows = Some(distinct as u64);
            f.pg_dups = copied - distinct as u64;
        }
    }
    client
        .batch_execute("DROP TABLE IF EXISTS torture_ids")
        .map_err(|x| e("drop", x))?;
    Ok(())
}

/// A client for the checks (no statement timeout).
pub fn connect(url: &str) -> Result<Client, String> {
    Client::connect(url, NoTls).map_err(|e| format!("cannot connect to {url}: {e}"))
}
