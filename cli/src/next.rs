//! `grantid next`: streams any number of IDs, in chunks the layout can
//! always fill, waiting out transient conditions up to `--wait-ms`.

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use grantid::{DEFAULT_MAX_BATCH, DEFAULT_MAX_DRIFT_MS, ErrorKind, Generator, Layout};

use crate::args::{GrantArgs, LayoutArgs};
use crate::exit::Failure;
use crate::output::{self, Format};

#[derive(Debug, Args)]
pub struct NextArgs {
    /// How many IDs (any number: they are streamed).
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    pub count: u64,
    /// The authority URL (default: the file authority under
    /// $XDG_STATE_HOME/grantid or ~/.local/state/grantid).
    #[arg(long, short = 'a', env = "GRANTID_AUTHORITY",
          long_help = format!("{}; default: the file authority under \
                               $XDG_STATE_HOME/grantid or ~/.local/state/grantid.",
                              crate::args::authority_help()))]
    pub authority: Option<String>,
    /// The ID format's namespace.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Dec)]
    pub format: Format,
    /// Longest wait, in ms, for the first grant and for any later stall
    /// (authority unavailable, sequence used up, clock stepped back, a lost
    /// lease waiting for a new worker) before the command fails
    /// (`--timeout-ms` is an older spelling).
    #[arg(long, alias = "timeout-ms", default_value_t = 10_000)]
    pub wait_ms: u64,
    /// The datacenter this process runs in (needs --datacenter-bits): the
    /// authority grants this datacenter's workers, as with datacenter=N in
    /// its URL; a URL's datacenter=N, if any, must agree.
    #[arg(long)]
    pub datacenter: Option<u32>,
    #[command(flatten)]
    pub grants: GrantArgs,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

pub fn run(a: NextArgs) -> Result<(), Failure> {
    let layout = a.layout.layout()?;
    let url = a
        .authority
        .clone()
        .unwrap_or_else(|| grantid_authority::DEFAULT_URL.to_owned());
    let source = grantid_authority::from_url_in(&url, a.datacenter)?;
    let timeout = Duration::from_millis(a.wait_ms);
    let mut builder = Generator::builder(layout, a.namespace.as_str(), source)
        .max_drift_ms(DEFAULT_MAX_DRIFT_MS)
        .shards(1)
        .startup_timeout(timeout)
        .grant_duration_ms(a.grants.grant_duration_ms)
        .horizon_ms(a.grants.horizon_ms);
    if let Some(dc) = a.datacenter {
        builder = builder.datacenter(dc);
    }
    let generator = builder.start()?;
    let mut out = output::stdout();
    output::header(&mut out, a.format, &layout)?;
    let chunk = chunk_size(&layout, DEFAULT_MAX_DRIFT_MS);
    let mut batch = vec![0u64; chunk.min(usize::try_from(a.count).unwrap_or(usize::MAX))];
    let mut left = a.count;
    while left > 0 {
        let ids = &mut batch[..usize::try_from(left).map_or(chunk, |l| l.min(chunk))];
        fill_waiting(&generator, ids, timeout)?;
        for &id in ids.iter() {
            output::id(&mut out, a.format, &layout, id, false)?;
        }
        // Written as issued: a reader of the stream (or of a file the
        // process is killed on) has every batch the generator handed out.
        out.flush()?;
        left -= ids.len() as u64;
    }
    out.flush()?;
    generator.close();
    Ok(())
}

/// The largest batch the generator can always fill in one call: at most the
/// sequence numbers of half the drift window (and at least one tick's), so a
/// layout with few sequence bits streams in small chunks instead of asking
/// for more than the window holds (which could never succeed).
pub fn chunk_size(layout: &Layout, max_drift_ms: u64) -> usize {
    let drift_ticks = max_drift_ms / layout.tick_ms();
    let ticks = (drift_ticks / 2).max(1);
    let window = layout.sequence_count().saturating_mul(ticks);
    usize::try_from(window).map_or(DEFAULT_MAX_BATCH, |w| w.min(DEFAULT_MAX_BATCH))
}

/// True for the conditions that pass on their own: the authority answers
/// again, the clock reaches the next tick, the clock catches up.
fn transient(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unavailable | ErrorKind::CapacityExhausted | ErrorKind::ClockRollback
    )
}

/// `generator.fill(ids)`, retrying transient failures until `timeout` has
/// passed since the first one. A failed attempt hands out nothing (IDs it
/// reserved are dropped, never reissued), so a retry cannot repeat an ID.
/// A lost lease is transient too: the generator stops issuing from the
/// lost worker at once and acquires another (after a store's state loss,
/// once its quarantine has passed), as a library caller retrying `next_id`
/// sees; the loss is logged at warn.
fn fill_waiting(generator: &Generator, ids: &mut [u64], timeout: Duration) -> Result<(), Failure> {
    let mut since: Option<Instant> = None;
    let mut pause = Duration::from_millis(1);
    loop {
        match generator.fill(ids) {
            Ok(()) => return Ok(()),
            Err(e) if transient(e.kind()) || e.kind() == ErrorKind::LeaseLost => {
                if e.kind() == ErrorKind::LeaseLost {
                    log::warn!(target: "grantid_cli", "event=lease_lost reason={}", e.message());
                }
                let first = *since.get_or_insert_with(Instant::now);
                let waited = first.elapsed();
                if waited >= timeout {
                    return Err(Failure::Grant(grantid::Error::new(
                        e.kind(),
                        format!("{} (still so after {} ms)", e.message(), waited.as_millis()),
                    )));
                }
                log::info!(target: "grantid_cli", "event=waiting code={} reason={}", e.code(), e.message());
                thread::sleep(pause.min(timeout - waited));
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_fit_the_drift_window() {
        let default = Layout::default();
        assert_eq!(chunk_size(&default, 100), DEFAULT_MAX_BATCH);
        // 8 sequence bits: 256 per tick, 50 ticks = 12,800, not 100,000.
        let small = Layout::new(41, 10, 8).unwrap();
        assert_eq!(chunk_size(&small, 100), 256 * 50);
        // Ticks longer than the drift window: one tick's worth.
        let slow = Layout::new(41, 10, 4).unwrap().with_tick_ms(1000).unwrap();
        assert_eq!(chunk_size(&slow, 100), 16);
    }
}
