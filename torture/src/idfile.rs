//! Record files: every ID a worker process issued, 8 bytes little-endian
//! each, after a 24-byte header (magic, incarnation, pid).
//!
//! Threads buffer IDs locally and append whole buffers with one `write(2)`
//! each (whole records, 8-byte aligned). A `kill -9` loses at most the
//! buffered IDs: they were issued but never recorded, which the checks
//! allow (they prove what was recorded). A trailing partial record (a write
//! cut short by the kill) is ignored and counted.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// First 8 bytes of every record file.
pub const MAGIC: &[u8; 8] = b"GTIDREC1";
/// Header length in bytes.
pub const HEADER_LEN: usize = 24;
/// IDs a thread buffers before appending them (32 KiB).
pub const BUFFER_IDS: usize = 4096;
/// Longest a thread keeps IDs buffered.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// The file of one worker process, shared by its threads.
#[derive(Debug)]
pub struct RecordFile {
    file: Mutex<File>,
}

impl RecordFile {
    /// Creates `path` (it must not exist) and writes the header.
    pub fn create(path: &Path, incarnation: u64) -> io::Result<RecordFile> {
        let mut file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)?;
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        header[8..16].copy_from_slice(&incarnation.to_le_bytes());
        header[16..24].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        file.write_all(&header)?;
        Ok(RecordFile {
            file: Mutex::new(file),
        })
    }

    /// Appends whole records.
    fn append(&self, bytes: &[u8]) -> io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(bytes)
    }
}

/// One thread's buffer in front of a [`RecordFile`].
#[derive(Debug)]
pub struct Recorder<'a> {
    file: &'a RecordFile,
    buf: Vec<u8>,
    last_flush: Instant,
}

impl<'a> Recorder<'a> {
    /// An empty buffer for `file`.
    pub fn new(file: &'a RecordFile) -> Recorder<'a> {
        Recorder {
            file,
            buf: Vec::with_capacity(BUFFER_IDS * 8),
            last_flush: Instant::now(),
        }
    }

    /// Buffers one ID; appends the buffer when it is full or old.
    #[inline]
    pub fn push(&mut self, id: u64) -> io::Result<()> {
        self.buf.extend_from_slice(&id.to_le_bytes());
        if self.buf.len() >= BUFFER_IDS * 8 {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends the buffer if it has waited [`FLUSH_EVERY`].
    pub fn flush_if_old(&mut self) -> io::Result<()> {
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends whatever is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        self.last_flush = Instant::now();
        Ok(())
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The header of a record file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The generator's incarnation when the process started.
    pub incarnation: u64,
    /// The worker process's pid.
    pub pid: u64,
}

/// Reads the header of a record file.
pub fn header(path: &Path) -> io::Result<Header> {
    let mut header = [0u8; HEADER_LEN];
    File::open(path)?.read_exact(&mut header)?;
    parse_header(path, &header)
}

fn parse_header(path: &Path, header: &[u8; HEADER_LEN]) -> io::Result<Header> {
    if &header[..8] != MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a record file", path.display()),
        ));
    }
    Ok(Header {
        incarnation: u64::from_le_bytes(header[8..16].try_into().expect("8 bytes")),
        pid: u64::from_le_bytes(header[16..24].try_into().expect("8 bytes")),
    })
}

/// Reads a record file: its header, then calls `each` per ID. Returns the
/// header and the number of trailing bytes that did not make a whole record.
pub fn read(path: &Path, mut each: impl FnMut(u64)) -> io::Result<(Header, usize)> {
    let mut r = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header)?;
    let h = parse_header(path, &header)?;
    let mut chunk = vec![0u8; 1 << 16];
    let mut carry = 0usize;
    loop {
        let n = r.read(&mut chunk[carry..])?;
        if n == 0 {
            return Ok((h, carry));
        }
        let have = carry + n;
        let whole = have / 8 * 8;
        for rec in chunk[..whole].chunks_exact(8) {
            each(u64::from_le_bytes(rec.try_into().expect("8 bytes")));
        }
        chunk.copy_within(whole..have, 0);
        carry = have - whole;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_ignored() {
        let dir = std::env::temp_dir().join(format!("grantid-idfile-{}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.ids");
        let file = RecordFile::create(&path, 0xfeed).unwrap();
        {
            let mut rec = Recorder::new(&file);
            for id in 1..=10_000u64 {
                rec.push(id).unwrap();
            }
        }
        file.append(&[1, 2, 3]).unwrap();
        let mut got = Vec::new();
        let (h, torn) = read(&path, |id| got.push(id)).unwrap();
        assert_eq!(h.incarnation, 0xfeed);
        assert_eq!(header(&path).unwrap(), h);
        assert_eq!(h.pid, u64::from(std::process::id()));
        assert_eq!(torn, 3);
        assert_eq!(got, (1..=10_000).collect::<Vec<_>>());
        assert!(RecordFile::create(&path, 1).is_err(), "never overwrites");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
