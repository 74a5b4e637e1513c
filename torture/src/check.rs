//! The end-of-run proof: duplicates across every record file, and every
//! ID's (worker, tick) inside a grant of the authority's grant log that was
//! made for that worker and for the recording process's incarnation.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// IDs sorted in memory at once (256 MiB); larger runs are partitioned.
pub const IN_MEMORY_IDS: u64 = 32 << 20;

/// One grant of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedGrant {
    /// Worker value.
    pub worker: u32,
    /// The incarnation it was made for.
    pub incarnation: u64,
    /// First tick.
    pub start: u64,
    /// First tick after (exclusive).
    pub end: u64,
}

/// The grant log, per worker, sorted by start.
#[derive(Debug, Default)]
pub struct GrantIndex {
    by_worker: HashMap<u32, Vec<LoggedGrant>>,
    /// Pairs of grants of one worker that overlap (must be 0).
    pub overlaps: u64,
    /// Grants in the log.
    pub grants: u64,
}

/// Where an ID's (worker, tick) falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Inside a grant made for this incarnation.
    Own,
    /// Inside a grant of this worker, made for another incarnation.
    OtherIncarnation(u64),
    /// Inside no grant of this worker.
    Outside,
}

impl GrantIndex {
    /// Indexes `grants` and counts overlaps within each worker.
    pub fn new(grants: impl IntoIterator<Item = LoggedGrant>) -> GrantIndex {
        let mut index = GrantIndex::default();
        for g in grants {
            index.grants += 1;
            index.by_worker.entry(g.worker).or_default().push(g);
        }
        for list in index.by_worker.values_mut() {
            list.sort_by_key(|g| (g.start, g.end));
            for pair in list.windows(2) {
                if pair[1].start < pair[0].end {
                    index.overlaps += 1;
                }
            }
        }
        index
    }

    /// Distinct worker values in the log.
    pub fn workers(&self) -> usize {
        self.by_worker.len()
    }

    /// Where `(worker, tick)` falls for a process of `incarnation`.
    pub fn place(&self, worker: u32, tick: u64, incarnation: u64) -> Placement {
        let Some(list) = self.by_worker.get(&worker) else {
            return Placement::Outside;
        };
        // The last grant starting at or before `tick`.
        let i = list.partition_point(|g| g.start <= tick);
        if i == 0 {
            return Placement::Outside;
        }
        let g = &list[i - 1];
        if tick >= g.end {
            Placement::Outside
        } else if g.incarnation == incarnation {
            Placement::Own
        } else {
            Placement::OtherIncarnation(g.incarnation)
        }
    }
}

/// Counts repeated IDs: in memory for small runs, else by partitioning the
/// IDs into bucket files by a hash (equal IDs land in the same bucket) and
/// sorting each bucket.
#[derive(Debug)]
pub struct DupCounter {
    mem: Vec<u64>,
    buckets: Vec<BufWriter<File>>,
    paths: Vec<PathBuf>,
    /// IDs fed.
    pub seen: u64,
}

/// What [`DupCounter::finish`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DupReport {
    /// Occurrences beyond the first of each ID (0 when unique).
    pub duplicates: u64,
    /// Distinct IDs.
    pub distinct: u64,
    /// A few repeated IDs, for the report.
    pub samples: Vec<u64>,
}

#[inline]
fn mix(x: u64) -> u64 {
    // splitmix64 finaliser: spreads consecutive IDs over the buckets.
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl DupCounter {
    /// A counter for about `expected` IDs; bucket files (if needed) go to
    /// `scratch`.
    pub fn new(expected: u64, scratch: &Path) -> io::Result<DupCounter> {
        let k = expected.div_ceil(IN_MEMORY_IDS / 2).max(1);
        let mut counter = DupCounter {
            mem: Vec::new(),
            buckets: Vec::new(),
            paths: Vec::new(),
            seen: 0,
        };
        if k == 1 {
            counter.mem.reserve(expected as usize);
        } else {
            std::fs::create_dir_all(scratch)?;
            for i in 0..k {
                let p = scratch.join(format!("bucket-{i:04}.bin"));
                counter
                    .buckets
                    .push(BufWriter::with_capacity(1 << 16, File::create(&p)?));
                counter.paths.push(p);
            }
        }
        Ok(counter)
    }

    /// Feeds one ID.
    #[inline]
    pub fn push(&mut self, id: u64) -> io::Result<()> {
        self.seen += 1;
        if self.buckets.is_empty() {
            self.mem.push(id);
            return Ok(());
        }
        let k = self.buckets.len() as u64;
        let b = ((mix(id) >> 32) * k) >> 32;
        self.buckets[b as usize].write_all(&id.to_le_bytes())
    }

    /// Sorts and counts; deletes the bucket files.
    pub fn finish(mut self) -> io::Result<DupReport> {
        let mut report = DupReport::default();
        if self.buckets.is_empty() {
            count_sorted(std::mem::take(&mut self.mem), &mut report);
            return Ok(report);
        }
        for w in self.buckets.drain(..) {
            w.into_inner().map_err(|e| e.into_error())?;
        }
        for p in &self.paths {
            let mut bytes = Vec::new();
            BufReader::new(File::open(p)?).read_to_end(&mut bytes)?;
            let ids: Vec<u64> = bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            drop(bytes);
            count_sorted(ids, &mut report);
            std::fs::remove_file(p)?;
        }
        Ok(report)
    }
}

fn count_sorted(mut ids: Vec<u64>, report: &mut DupReport) {
    ids.sort_unstable();
    let mut prev: Option<u64> = None;
    for id in ids {
        if prev == Some(id) {
            report.duplicates += 1;
            if report.samples.len() < 5 && report.samples.last() != Some(&id) {
                report.samples.push(id);
            }
        } else {
            report.distinct += 1;
        }
        prev = Some(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(worker: u32, incarnation: u64, start: u64, end: u64) -> LoggedGrant {
        LoggedGrant {
            worker,
            incarnation,
            start,
            end,
        }
    }

    #[test]
    fn placement_follows_the_log() {
        let index = GrantIndex::new([g(1, 10, 100, 200), g(1, 11, 200, 300), g(2, 10, 0, 50)]);
        assert_eq!(index.overlaps, 0);
        assert_eq!(index.workers(), 2);
        assert_eq!(index.place(1, 100, 10), Placement::Own);
        assert_eq!(index.place(1, 199, 10), Placement::Own);
        assert_eq!(index.place(1, 200, 10), Placement::OtherIncarnation(11));
        assert_eq!(index.place(1, 99, 10), Placement::Outside);
        assert_eq!(index.place(1, 300, 11), Placement::Outside);
        assert_eq!(index.place(3, 10, 10), Placement::Outside);
        assert_eq!(index.place(2, 49, 10), Placement::Own);
    }

    #[test]
    fn overlapping_grants_are_counted() {
        let index = GrantIndex::new([g(1, 10, 100, 200), g(1, 11, 150, 300)]);
        assert_eq!(index.overlaps, 1);
    }

    fn run(ids: &[u64], expected: u64) -> DupReport {
        let scratch = std::env::temp_dir().join(format!("grantid-dup-{}", fastrand::u64(..)));
        let mut c = DupCounter::new(expected, &scratch).unwrap();
        for &id in ids {
            c.push(id).unwrap();
        }
        let r = c.finish().unwrap();
        let _ = std::fs::remove_dir_all(&scratch);
        r
    }

    #[test]
    fn duplicates_are_found_in_memory_and_partitioned() {
        let mut ids: Vec<u64> = (1..50_000).collect();
        ids.extend([7, 7, 49_999]);
        for expected in [ids.len() as u64, IN_MEMORY_IDS * 3] {
            let r = run(&ids, expected);
            assert_eq!(r.duplicates, 3, "expected {expected}");
            assert_eq!(r.distinct, 49_999);
            assert!(r.samples.contains(&7) && r.samples.contains(&49_999));
        }
        assert_eq!(
            run(&(1..1000).collect::<Vec<_>>(), IN_MEMORY_IDS * 2).duplicates,
            0
        );
    }
}
