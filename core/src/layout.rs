//! The bit layout of an ID: `timestamp | worker | sequence` (docs/DESIGN.md section 1),
//! with an optional datacenter split of the worker field.

use crate::error::Error;

/// 2026-01-01T00:00:00Z in Unix milliseconds: the default epoch.
pub const DEFAULT_EPOCH_MS: u64 = 1_767_225_600_000;

/// The bit widths, epoch and tick length of an ID format.
///
/// `id = (timestamp << (worker_bits + sequence_bits)) | (worker << sequence_bits) | sequence`,
/// where `timestamp` counts ticks of `tick_ms` milliseconds since `epoch_ms`.
/// A `Layout` is validated when made: the widths fit in 63 bits (every ID is a
/// positive `i64`), there is at least one timestamp and one sequence bit, and
/// the last tick's Unix time fits in a `u64` of milliseconds.
///
/// Optionally the top `datacenter_bits` bits of the worker field are a
/// datacenter number ([`Layout::with_datacenter_bits`], 0 by default, at
/// most `worker_bits`): the encoded ID does not change, [`Layout::decode`]
/// also reports the datacenter and the worker within it (docs/DESIGN.md
/// section 1, docs/AUTHORITIES.md "Regions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    timestamp_bits: u8,
    worker_bits: u8,
    sequence_bits: u8,
    datacenter_bits: u8,
    /// For one datacenter's part ([`Layout::datacenter_part`]): the
    /// datacenter bits of the layout it was cut from; 0 for a whole layout.
    split_bits: u8,
    epoch_ms: u64,
    tick_ms: u64,
}

/// The fields of a decoded ID. `unix_ms` is the start of the encoded tick:
/// a diagnostic, not a commit time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decoded {
    /// Ticks since the layout's epoch.
    pub timestamp: u64,
    /// The worker field (all of it, datacenter bits included: what
    /// [`Layout::encode`] takes and a grant carries).
    pub worker: u64,
    /// The sequence field.
    pub sequence: u64,
    /// `epoch_ms + timestamp * tick_ms`.
    pub unix_ms: u64,
    /// The datacenter: the top `datacenter_bits` bits of the worker field
    /// (0 when the layout has no datacenter bits).
    pub datacenter: u64,
    /// The worker within its datacenter: the low `worker_bits -
    /// datacenter_bits` bits of the worker field (the whole worker field
    /// when the layout has no datacenter bits).
    pub datacenter_worker: u64,
}

impl Default for Layout {
    /// The "snowflake" layout: 41 / 10 / 12 bits, 1 ms ticks, epoch
    /// 2026-01-01. That is 69.7 years, 1,024 workers and 4,096 IDs per worker
    /// per millisecond.
    fn default() -> Layout {
        Layout {
            timestamp_bits: 41,
            worker_bits: 10,
            sequence_bits: 12,
            datacenter_bits: 0,
            split_bits: 0,
            epoch_ms: DEFAULT_EPOCH_MS,
            tick_ms: 1,
        }
    }
}

impl Layout {
    /// A layout with the default epoch and a 1 ms tick.
    pub fn new(timestamp_bits: u8, worker_bits: u8, sequence_bits: u8) -> Result<Layout, Error> {
        Layout::with_all(
            timestamp_bits,
            worker_bits,
            sequence_bits,
            DEFAULT_EPOCH_MS,
            1,
        )
    }

    /// A layout with every parameter given, validated.
    pub fn with_all(
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        epoch_ms: u64,
        tick_ms: u64,
    ) -> Result<Layout, Error> {
        let layout = Layout {
            timestamp_bits,
            worker_bits,
            sequence_bits,
            datacenter_bits: 0,
            split_bits: 0,
            epoch_ms,
            tick_ms,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// The same layout with another epoch (Unix ms).
    pub fn with_epoch_ms(self, epoch_ms: u64) -> Result<Layout, Error> {
        Layout { epoch_ms, ..self }.validated()
    }

    /// The same layout with another tick length in milliseconds (>= 1).
    pub fn with_tick_ms(self, tick_ms: u64) -> Result<Layout, Error> {
        Layout { tick_ms, ..self }.validated()
    }

    /// The same layout with the top `bits` bits of the worker field read as
    /// a datacenter number (0 to `worker_bits`). The encoded ID does not
    /// change; a layout with another split is another layout (a namespace
    /// is registered with one).
    pub fn with_datacenter_bits(self, bits: u8) -> Result<Layout, Error> {
        Layout {
            datacenter_bits: bits,
            ..self
        }
        .validated()
    }

    /// The same layout without a datacenter split: the encoding alone. An
    /// authority registers a namespace with it (and its
    /// [`Layout::split_bits`]).
    pub fn without_datacenter_bits(self) -> Layout {
        Layout {
            datacenter_bits: 0,
            ..self
        }
    }

    /// One datacenter's workers as a layout of their own, which an
    /// authority that grants one datacenter (`datacenter=N`) chooses from:
    /// the same timestamp, sequence, epoch and tick, `worker_bits -
    /// datacenter_bits` worker bits, and the split kept
    /// ([`Layout::split_bits`]). An authority registers the split with the
    /// other fields, so a namespace's workers are numbered one way only:
    /// within a datacenter of this split, or as whole worker values
    /// (docs/AUTHORITIES.md, "Regions").
    pub fn datacenter_part(self) -> Result<Layout, Error> {
        if self.datacenter_bits == 0 {
            return Err(Error::invalid(
                "the layout has no datacenter bits (set datacenter_bits)",
            ));
        }
        Layout {
            worker_bits: self.worker_bits - self.datacenter_bits,
            datacenter_bits: 0,
            split_bits: self.datacenter_bits,
            ..self
        }
        .validated()
    }

    /// The layout a store registered as `timestamp_bits`, `worker_bits`,
    /// `sequence_bits`, `epoch_ms`, `tick_ms` and `split_bits`: a whole
    /// layout when `split_bits` is 0, else one datacenter's part
    /// ([`Layout::datacenter_part`]) of the layout with `worker_bits +
    /// split_bits` worker bits.
    pub fn registered(
        timestamp_bits: u8,
        worker_bits: u8,
        sequence_bits: u8,
        epoch_ms: u64,
        tick_ms: u64,
        split_bits: u8,
    ) -> Result<Layout, Error> {
        let layout = Layout::with_all(
            timestamp_bits,
            worker_bits,
            sequence_bits,
            epoch_ms,
            tick_ms,
        )?;
        if split_bits == 0 {
            return Ok(layout);
        }
        Layout {
            worker_bits: worker_bits.saturating_add(split_bits),
            ..layout
        }
        .with_datacenter_bits(split_bits)?
        .datacenter_part()
    }

    /// For one datacenter's part of a layout ([`Layout::datacenter_part`]):
    /// the datacenter bits of the whole layout; 0 for a whole layout. With
    /// [`Layout::worker_bits`] it gives the whole layout's worker bits.
    pub fn split_bits(&self) -> u8 {
        self.split_bits
    }

    fn validated(self) -> Result<Layout, Error> {
        self.validate()?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), Error> {
        if self.timestamp_bits < 1 {
            return Err(Error::invalid("timestamp_bits must be at least 1"));
        }
        if self.sequence_bits < 1 {
            return Err(Error::invalid("sequence_bits must be at least 1"));
        }
        if self.worker_bits > 32 {
            return Err(Error::invalid(format!(
                "worker_bits is {}, at most 32 are supported",
                self.worker_bits
            )));
        }
        if self.datacenter_bits > self.worker_bits {
            return Err(Error::invalid(format!(
                "datacenter_bits is {}, more than worker_bits ({}): the datacenter is the top of the worker field",
                self.datacenter_bits, self.worker_bits
            )));
        }
        let total = u32::from(self.timestamp_bits)
            + u32::from(self.worker_bits)
            + u32::from(self.sequence_bits);
        if total > 63 {
            return Err(Error::invalid(format!(
                "timestamp_bits + worker_bits + sequence_bits is {total}, more than 63"
            )));
        }
        if self.tick_ms < 1 {
            return Err(Error::invalid("tick_ms must be at least 1"));
        }
        let last_tick = (1u64 << self.timestamp_bits) - 1;
        if last_tick
            .checked_mul(self.tick_ms)
            .and_then(|ms| ms.checked_add(self.epoch_ms))
            .is_none()
        {
            return Err(Error::invalid(format!(
                "epoch_ms + (2^{} - 1) * tick_ms overflows u64 milliseconds",
                self.timestamp_bits
            )));
        }
        Ok(())
    }

    /// Width of the timestamp field.
    pub fn timestamp_bits(&self) -> u8 {
        self.timestamp_bits
    }
    /// Width of the worker field.
    pub fn worker_bits(&self) -> u8 {
        self.worker_bits
    }
    /// Width of the sequence field.
    pub fn sequence_bits(&self) -> u8 {
        self.sequence_bits
    }
    /// Width of the datacenter part of the worker field (0: none).
    pub fn datacenter_bits(&self) -> u8 {
        self.datacenter_bits
    }
    /// Width of the worker within a datacenter: `worker_bits -
    /// datacenter_bits`.
    pub fn datacenter_worker_bits(&self) -> u8 {
        self.worker_bits - self.datacenter_bits
    }
    /// Unix ms of timestamp 0.
    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }
    /// Milliseconds per tick.
    pub fn tick_ms(&self) -> u64 {
        self.tick_ms
    }
    /// Total bits used by an ID.
    pub fn total_bits(&self) -> u8 {
        self.timestamp_bits + self.worker_bits + self.sequence_bits
    }
    /// The number of timestamp values, `2^timestamp_bits`: the exclusive
    /// upper bound of any grant's `end`.
    pub fn timestamp_limit(&self) -> u64 {
        1u64 << self.timestamp_bits
    }
    /// The number of worker values, `2^worker_bits`.
    pub fn worker_count(&self) -> u64 {
        1u64 << self.worker_bits
    }
    /// The number of datacenters, `2^datacenter_bits` (1 without a split).
    pub fn datacenter_count(&self) -> u64 {
        1u64 << self.datacenter_bits
    }
    /// The datacenter of a worker value: its top `datacenter_bits` bits.
    pub fn datacenter_of(&self, worker: u64) -> u64 {
        worker >> self.datacenter_worker_bits()
    }
    /// The worker value of worker `datacenter_worker` of `datacenter`,
    /// checking that each fits its part of the worker field.
    pub fn worker_value(&self, datacenter: u64, datacenter_worker: u64) -> Result<u64, Error> {
        check_field("datacenter", datacenter, self.datacenter_bits)?;
        let local = self.datacenter_worker_bits();
        check_field("datacenter worker", datacenter_worker, local)?;
        Ok((datacenter << local) | datacenter_worker)
    }
    /// The number of sequence values per worker per tick, `2^sequence_bits`.
    pub fn sequence_count(&self) -> u64 {
        1u64 << self.sequence_bits
    }

    /// The tick containing a Unix time in ms; times before the epoch map to 0
    /// (the generator never issues before a grant's start, so this only
    /// affects diagnostics).
    pub fn tick_at(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.epoch_ms) / self.tick_ms
    }

    /// The Unix time in ms at which `tick` starts (saturating).
    pub fn unix_ms_of(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_ms)
            .saturating_add(self.epoch_ms)
    }

    /// Encodes a tuple, checking every field's width before shifting. The
    /// tuple (0, 0, 0) is reserved: ID 0 is never an ID.
    pub fn encode(&self, timestamp: u64, worker: u64, sequence: u64) -> Result<u64, Error> {
        check_field("timestamp", timestamp, self.timestamp_bits)?;
        check_field("worker", worker, self.worker_bits)?;
        check_field("sequence", sequence, self.sequence_bits)?;
        if timestamp == 0 && worker == 0 && sequence == 0 {
            return Err(Error::invalid(
                "the tuple (0, 0, 0) encodes ID 0, which is reserved",
            ));
        }
        Ok(self.compose(timestamp, worker, sequence))
    }

    /// Shifts fields already known to fit. Callers check widths.
    #[inline]
    pub(crate) fn compose(&self, timestamp: u64, worker: u64, sequence: u64) -> u64 {
        let seq_bits = u32::from(self.sequence_bits);
        (timestamp << (u32::from(self.worker_bits) + seq_bits)) | (worker << seq_bits) | sequence
    }

    /// Decodes an ID into its fields. Refuses 0, values with the sign bit
    /// set, and values with bits above the layout's width.
    pub fn decode(&self, id: u64) -> Result<Decoded, Error> {
        if id == 0 {
            return Err(Error::invalid("ID 0 is reserved and never issued"));
        }
        let total = u32::from(self.total_bits());
        if id >> total != 0 {
            return Err(Error::invalid(format!(
                "ID {id} has bits set above this layout's {total} bits"
            )));
        }
        let seq_bits = u32::from(self.sequence_bits);
        let worker_bits = u32::from(self.worker_bits);
        let sequence = id & ((1u64 << seq_bits) - 1);
        let worker = (id >> seq_bits) & ((1u64 << worker_bits) - 1);
        let timestamp = id >> (seq_bits + worker_bits);
        let local_bits = u32::from(self.datacenter_worker_bits());
        Ok(Decoded {
            timestamp,
            worker,
            sequence,
            // Cannot overflow: checked when the layout was made.
            unix_ms: self.epoch_ms + timestamp * self.tick_ms,
            datacenter: self.datacenter_of(worker),
            datacenter_worker: worker & ((1u64 << local_bits) - 1),
        })
    }
}

fn check_field(name: &str, value: u64, bits: u8) -> Result<(), Error> {
    if bits < 64 && value >> bits != 0 {
        return Err(Error::invalid(format!(
            "{name} {value} does not fit in {bits} bits"
        )));
    }
    Ok(())
}

/// Parses an ID written as decimal digits or as `0x`-prefixed hexadecimal.
/// Surrounding whitespace is refused, as are signs, empty strings and values
/// above `i64::MAX` (no ID has the sign bit).
pub fn parse_id(text: &str) -> Result<u64, Error> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(Error::invalid(format!(
            "{text:?} is not an ID (decimal digits or 0x-prefixed hex)"
        )));
    }
    let value = u64::from_str_radix(digits, radix)
        .map_err(|_| Error::invalid(format!("{text:?} is larger than any ID")))?;
    if value > i64::MAX as u64 {
        return Err(Error::invalid(format!(
            "{text:?} is larger than any ID (2^63 - 1)"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn worked_vectors() {
        let l = Layout::new(12, 3, 4).unwrap();
        assert_eq!(l.encode(160, 1, 1).unwrap(), 20497);
        assert_eq!(l.encode(160, 1, 2).unwrap(), 20498);
        assert_eq!(l.encode(161, 1, 0).unwrap(), 20624);
        let d = l.decode(20497).unwrap();
        assert_eq!((d.timestamp, d.worker, d.sequence), (160, 1, 1));
        assert_eq!(d.unix_ms, DEFAULT_EPOCH_MS + 160);
    }

    #[test]
    fn default_layout() {
        let l = Layout::default();
        assert_eq!(
            (l.timestamp_bits(), l.worker_bits(), l.sequence_bits()),
            (41, 10, 12)
        );
        assert_eq!(l.epoch_ms(), 1_767_225_600_000);
        assert_eq!(l.tick_ms(), 1);
        assert_eq!(l.sequence_count(), 4096);
        assert_eq!(l.worker_count(), 1024);
        let max = l.encode((1 << 41) - 1, 1023, 4095).unwrap();
        assert_eq!(max, i64::MAX as u64);
    }

    #[test]
    fn invalid_layouts_name_the_field() {
        let cases = [
            (Layout::new(0, 10, 12), "timestamp_bits"),
            (Layout::new(41, 10, 0), "sequence_bits"),
            (Layout::new(41, 11, 12), "more than 63"),
            (Layout::default().with_tick_ms(0), "tick_ms"),
            (Layout::new(62, 0, 1).unwrap().with_tick_ms(4), "overflows"),
            (Layout::new(20, 33, 1), "worker_bits"),
        ];
        for (result, needle) in cases {
            let err = result.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains(needle), "{err} lacks {needle}");
        }
    }

    #[test]
    fn encode_checks_widths_and_reserves_zero() {
        let l = Layout::new(12, 3, 4).unwrap();
        assert!(
            l.encode(1 << 12, 0, 0)
                .unwrap_err()
                .message()
                .contains("timestamp")
        );
        assert!(l.encode(1, 8, 0).unwrap_err().message().contains("worker"));
        assert!(
            l.encode(1, 0, 16)
                .unwrap_err()
                .message()
                .contains("sequence")
        );
        assert!(
            l.encode(0, 0, 0)
                .unwrap_err()
                .message()
                .contains("reserved")
        );
        assert_eq!(l.encode(0, 0, 1).unwrap(), 1);
    }

    #[test]
    fn decode_refuses_junk() {
        let l = Layout::new(12, 3, 4).unwrap();
        assert_eq!(l.decode(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert!(l.decode(1 << 19).is_err());
        assert!(Layout::default().decode(1 << 63).is_err());
    }

    #[test]
    fn extreme_layouts() {
        let l = Layout::new(1, 0, 62).unwrap();
        let id = l.encode(1, 0, (1 << 62) - 1).unwrap();
        assert_eq!(id, i64::MAX as u64);
        assert_eq!(l.decode(id).unwrap().sequence, (1 << 62) - 1);
        let l = Layout::new(41, 0, 22).unwrap();
        assert_eq!(l.encode(1, 0, 0).unwrap(), 1 << 22);
    }

    #[test]
    fn datacenter_split() {
        // The Snowflake service layout: 41 / 5 datacenter + 5 worker / 12.
        let l = Layout::new(41, 10, 12)
            .unwrap()
            .with_datacenter_bits(5)
            .unwrap();
        assert_eq!((l.datacenter_bits(), l.datacenter_worker_bits()), (5, 5));
        assert_eq!(l.datacenter_count(), 32);
        let worker = l.worker_value(17, 3).unwrap();
        assert_eq!(worker, 17 * 32 + 3);
        assert_eq!(l.datacenter_of(worker), 17);
        let id = l.encode(1000, worker, 9).unwrap();
        // The split does not change the encoding.
        assert_eq!(
            id,
            Layout::new(41, 10, 12)
                .unwrap()
                .encode(1000, worker, 9)
                .unwrap()
        );
        let d = l.decode(id).unwrap();
        assert_eq!(
            (
                d.timestamp,
                d.worker,
                d.datacenter,
                d.datacenter_worker,
                d.sequence
            ),
            (1000, worker, 17, 3, 9)
        );
        let flat = Layout::default().decode(id).unwrap();
        assert_eq!((flat.datacenter, flat.datacenter_worker), (0, worker));
        for (result, needle) in [
            (
                l.worker_value(32, 0).map(|_| ()),
                "datacenter 32 does not fit in 5 bits",
            ),
            (
                l.worker_value(0, 32).map(|_| ()),
                "datacenter worker 32 does not fit in 5 bits",
            ),
            (
                Layout::default().with_datacenter_bits(11).map(|_| ()),
                "datacenter_bits is 11",
            ),
        ] {
            let err = result.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidArgument);
            assert!(err.message().contains(needle), "{err} lacks {needle}");
        }
        // All of the worker field may be the datacenter.
        let all = Layout::new(41, 5, 12)
            .unwrap()
            .with_datacenter_bits(5)
            .unwrap();
        let d = all.decode(all.encode(1, 31, 0).unwrap()).unwrap();
        assert_eq!((d.datacenter, d.datacenter_worker), (31, 0));
        // Other setters keep the split.
        assert_eq!(l.with_tick_ms(2).unwrap().datacenter_bits(), 5);
    }

    #[test]
    fn parse_ids() {
        assert_eq!(parse_id("20497").unwrap(), 20497);
        assert_eq!(parse_id("0x5011").unwrap(), 0x5011);
        assert_eq!(parse_id("9223372036854775807").unwrap(), i64::MAX as u64);
        for junk in [
            "",
            "-1",
            "+1",
            " 1",
            "1.0",
            "0x",
            "abc",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(
                parse_id(junk).unwrap_err().kind(),
                ErrorKind::InvalidArgument,
                "{junk}"
            );
        }
    }
}
