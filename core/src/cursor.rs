//! The lock-free cursor: where IDs are reserved.
//!
//! # Words
//!
//! Every cursor word is one `AtomicU64` packed as
//!
//! ```text
//! | gen: 16 | rel: R | seq: Q | owned: 1 |
//! ```
//!
//! `gen` is the grant generation: every switch of worker or interval (and
//! every close or loss) seals all words and installs them with a new `gen`,
//! so a compare-and-swap prepared against the old state fails. `rel` is the
//! tick relative to the generation's `base` tick; its all-ones value marks a
//! sealed word. `seq` is a sequence number (`Q = used sequence bits + 1`, so
//! "one past the last" fits) and `R = 47 - Q`.
//!
//! # Shards and chunks
//!
//! One **global** word holds the next free chunk of the current tick. Each
//! **shard** word (in its own cache line) holds the chunk its threads are
//! consuming. Threads are given shards round-robin on first use (the
//! generator keeps as many shards as CPUs by default), so a thread takes the
//! next sequence number with one CAS on a line that only the threads of its
//! shard write. When the chunk is used up, or the clock moves to a new tick,
//! the thread claims the next chunk from the global word: a thread making
//! fewer than one ID per tick does that on every call. Chunks of one tick are handed out in increasing order, so
//!
//! * a lone thread gets every chunk of a tick: the layout's full capacity;
//! * every ID is handed out once: the global word moves only forward, and a
//!   shard issues only inside a chunk it claimed;
//! * IDs returned to one thread strictly increase: a shard's position only
//!   moves forward, and a thread that reserves chunks directly (a batch)
//!   moves its shard's position past them before returning.
//!
//! # Safety of a generation switch
//!
//! The parameters (worker, base, end) live in two slots, chosen by the low
//! bit of the generation tag. A switch seals every word, stores the new
//! parameters in the slot the sealed generation does not use, then installs
//! fresh words of the new tag. A reader loads its word (Acquire) and reads
//! the parameters of that word's slot (Relaxed): the install that published
//! the word stored them first (its Release store or compare-and-swap heads
//! the word's release sequence), so the reader sees them. The slot is
//! rewritten only two switches later, after every word of the reader's
//! generation was sealed; a reader whose compare-and-swap on its word
//! succeeded came before that seal in the word's order, so its parameter
//! loads happened before the rewrite and read the right values. An outcome
//! that is not a reservation (behind, full, end, not yet valid) is returned
//! only after a compare-and-swap of the word with itself confirms it, for the
//! same reason. No ID mixes the fields of two grants, and no step rests on
//! the ordering of the parameter loads themselves (docs/UNIQUENESS.md
//! section 3; the loom models check both the protocol and controls with each
//! part removed). The tag is 16 bits: a stale CAS could only succeed if
//! 65,536 switches (each one an authority round trip) happened between one
//! thread's load and its CAS.

use crossbeam_utils::CachePadded;

use crate::error::Error;
use crate::layout::Layout;
use crate::sync::{AtomicU64, Ordering};

const GEN_BITS: u32 = 16;
const GEN_SHIFT: u32 = 64 - GEN_BITS;
/// At most 2^26 sequence numbers per tick are used (67,108,864), so that the
/// relative tick keeps at least 20 bits. Layouts with wider sequence fields
/// keep their format; higher sequence values are never issued.
pub const MAX_SEQUENCE_BITS_USED: u32 = 26;
/// Largest chunk a shard claims at once.
const MAX_CHUNK: u64 = 1 << 16;

/// What a sealed generator says when a call reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Status {
    /// A grant is installed.
    Active = 0,
    /// A switch is under way: retry in a moment.
    Switching = 1,
    /// No committed grant and the authority is uncertain.
    Unavailable = 2,
    /// The authority refused the worker; no new grant yet.
    LeaseLost = 3,
    /// Closed for good.
    Closed = 4,
    /// Forked: the parent's grant is not ours.
    Forked = 5,
}

impl Status {
    fn from_u64(v: u64) -> Status {
        match v {
            0 => Status::Active,
            1 => Status::Switching,
            2 => Status::Unavailable,
            3 => Status::LeaseLost,
            4 => Status::Closed,
            _ => Status::Forked,
        }
    }
}

/// Constants derived from a layout and the generator's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    seq_limit: u64,
    chunk: u64,
    chunks_per_tick: u64,
    q: u32,
    max_rel: u64,
    shard_mask: usize,
    drift: u64,
    seq_shift: u32,
    ts_shift: u32,
}

impl Shape {
    /// Shape for `layout` with `shards` shards (rounded up to a power of two,
    /// at most 64 and at most the sequence count) and `drift` ticks of
    /// allowed lead over the clock.
    pub fn new(layout: &Layout, shards: usize, drift: u64) -> Result<Shape, Error> {
        if shards == 0 {
            return Err(Error::invalid("shards must be at least 1"));
        }
        let used_bits = u32::from(layout.sequence_bits()).min(MAX_SEQUENCE_BITS_USED);
        let seq_limit = 1u64 << used_bits;
        let shards = shards.min(64).next_power_of_two().min(seq_limit as usize);
        let chunk = (seq_limit / (4 * shards as u64)).clamp(1, MAX_CHUNK);
        let q = used_bits + 1;
        let r = GEN_SHIFT - 1 - q;
        Ok(Shape {
            seq_limit,
            chunk,
            chunks_per_tick: seq_limit / chunk,
            q,
            max_rel: (1u64 << r) - 1,
            shard_mask: shards - 1,
            drift,
            seq_shift: u32::from(layout.sequence_bits()),
            ts_shift: u32::from(layout.sequence_bits()) + u32::from(layout.worker_bits()),
        })
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shard_mask + 1
    }
    /// Sequence numbers per chunk.
    pub fn chunk(&self) -> u64 {
        self.chunk
    }
    /// Sequence numbers used per tick.
    pub fn sequence_limit(&self) -> u64 {
        self.seq_limit
    }
    /// Longest interval one generation can address, in ticks.
    pub fn max_span(&self) -> u64 {
        self.max_rel
    }
    /// Allowed lead of the cursor over the clock, in ticks.
    pub fn drift(&self) -> u64 {
        self.drift
    }

    #[inline]
    fn pack(&self, gen_: u64, rel: u64, seq: u64, owned: bool) -> u64 {
        (gen_ << GEN_SHIFT) | (rel << (self.q + 1)) | (seq << 1) | u64::from(owned)
    }
    #[inline]
    fn gen_of(w: u64) -> u64 {
        w >> GEN_SHIFT
    }
    /// Nothing reserved yet in this generation.
    #[inline]
    fn untouched(w: u64) -> bool {
        w & ((1u64 << GEN_SHIFT) - 1) == 0
    }
    #[inline]
    fn rel(&self, w: u64) -> u64 {
        (w >> (self.q + 1)) & self.max_rel
    }
    #[inline]
    fn seq(&self, w: u64) -> u64 {
        (w >> 1) & ((1u64 << self.q) - 1)
    }
    #[inline]
    fn sealed(&self, w: u64) -> bool {
        self.rel(w) == self.max_rel
    }
    /// Sealed by a close: sealed, with sequence 1 (other seals have 0).
    #[inline]
    fn closed(&self, w: u64) -> bool {
        self.sealed(w) && self.seq(w) == 1
    }
    /// (rel, seq) as one comparable number.
    #[inline]
    fn position(&self, w: u64) -> u64 {
        (w >> 1) & ((1u64 << (GEN_SHIFT - 1)) - 1)
    }
    #[inline]
    fn chunk_end(&self, seq: u64) -> u64 {
        (seq | (self.chunk - 1)) + 1
    }

    /// Composes an ID from fields that the cursor proved valid.
    #[inline]
    pub fn compose(&self, tick: u64, worker: u64, seq: u64) -> u64 {
        (tick << self.ts_shift) | (worker << self.seq_shift) | seq
    }
}

/// A reservation: `count` consecutive sequence numbers from `seq` at `tick`
/// for `worker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The tick of every ID in the span.
    pub tick: u64,
    /// The worker of every ID in the span.
    pub worker: u64,
    /// The first sequence number.
    pub seq: u64,
    /// How many sequence numbers.
    pub count: u64,
}

/// The result of one attempt to reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Reserved.
    Span(Span),
    /// The clock (plus drift) is before the generation's first tick.
    NotYetValid {
        /// The first usable tick.
        start: u64,
    },
    /// The cursor is ahead of the clock by more than the drift: the clock
    /// stepped back.
    Behind {
        /// The cursor's tick.
        cursor: u64,
    },
    /// Every sequence number up to the clock plus drift is used: the clock
    /// must reach `until` first.
    Full {
        /// The clock tick to wait for.
        until: u64,
    },
    /// The next usable tick is at or past the committed end.
    End {
        /// The committed end.
        end: u64,
    },
    /// The words are sealed.
    Sealed(Status),
}

struct Shard {
    word: AtomicU64,
    claimed: AtomicU64,
    dropped: AtomicU64,
}

/// One generation's parameters. Two slots, chosen by the generation tag's
/// low bit: a switch writes the slot the current generation does not use.
#[derive(Default)]
struct Params {
    worker: AtomicU64,
    base: AtomicU64,
    end: AtomicU64,
}

/// A snapshot of one generation's parameters.
#[derive(Debug, Clone, Copy)]
struct Grant {
    worker: u64,
    base: u64,
    end: u64,
}

/// One attempt of [`Cursor::take`]: the shard, the word read from it, the
/// parameters of the word's generation, and what is asked.
#[derive(Clone, Copy)]
struct Attempt<'a> {
    shard: &'a Shard,
    word: u64,
    grant: Grant,
    want: u64,
    /// The clock's tick.
    t: u64,
    /// The latest tick the cursor may use: the clock plus the drift.
    latest: u64,
}

/// Where one step of [`Cursor::take`] left the reservation.
enum Step {
    /// Decided.
    Done(Take),
    /// The word moved under us: read it again.
    Retry,
    /// The shard's chunk cannot serve: claim from the global word.
    Claim,
}

/// What sealing found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// The highest tick a chunk was claimed at (or the base, if none), or
    /// `None` if the words were sealed already.
    pub reached: Option<u64>,
}

/// The cursor of one generator: a global chunk word, one word per shard,
/// and the current generation's parameters.
pub struct Cursor {
    shape: Shape,
    global: CachePadded<AtomicU64>,
    shards: Box<[CachePadded<Shard>]>,
    /// Parameters of the generations with an even and an odd tag.
    params: CachePadded<[Params; 2]>,
    status: AtomicU64,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("shape", &self.shape)
            .finish()
    }
}

impl Cursor {
    /// A cursor with no grant: every word sealed with status `Unavailable`.
    pub fn new(shape: Shape) -> Cursor {
        let sealed = shape.pack(0, shape.max_rel, 0, false);
        Cursor {
            shape,
            global: CachePadded::new(AtomicU64::new(sealed)),
            shards: (0..shape.shards())
                .map(|_| {
                    CachePadded::new(Shard {
                        word: AtomicU64::new(sealed),
                        claimed: AtomicU64::new(0),
                        dropped: AtomicU64::new(0),
                    })
                })
                .collect(),
            params: CachePadded::new([Params::default(), Params::default()]),
            status: AtomicU64::new(Status::Unavailable as u64),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The status a sealed cursor reports.
    pub fn status(&self) -> Status {
        Status::from_u64(self.status.load(Ordering::Acquire))
    }

    /// Sets the status without touching the words (to tell a sealed cursor's
    /// callers why it is sealed). `Closed` is final: once set, no other
    /// status replaces it. False if the cursor is closed.
    pub fn set_status(&self, status: Status) -> bool {
        self.status
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                (s != Status::Closed as u64).then_some(status as u64)
            })
            .is_ok()
    }

    /// True once the cursor was sealed with `Status::Closed`.
    pub fn is_closed(&self) -> bool {
        self.status() == Status::Closed
    }

    /// The parameters of the generation a word of `gen_` belongs to.
    #[inline]
    fn slot(&self, gen_: u64) -> &Params {
        &self.params[(gen_ & 1) as usize]
    }

    /// The parameters of `w`'s generation, read through `w`: they were
    /// stored before the install that published `w`'s generation (whose
    /// Release store or compare-and-swap `w` was read from, with Acquire),
    /// and no install rewrites them before every word of that generation is
    /// sealed. Relaxed loads suffice; see docs/UNIQUENESS.md section 3.
    #[inline]
    fn grant_of(&self, w: u64) -> Grant {
        let p = self.slot(Shape::gen_of(w));
        Grant {
            worker: p.worker.load(Ordering::Relaxed),
            base: p.base.load(Ordering::Relaxed),
            end: p.end.load(Ordering::Relaxed),
        }
    }

    #[inline]
    fn shard(&self, shard: usize) -> &Shard {
        &self.shards[shard & self.shape.shard_mask]
    }

    /// One attempt on the fast path: the next sequence number of the shard's
    /// chunk, when the shard owns one at a tick within `[t, t + drift]`.
    #[inline]
    pub fn try_next(&self, shard: usize, t: u64) -> Option<u64> {
        let s = self.shard(shard);
        let w = s.word.load(Ordering::Acquire);
        if w & 1 == 0 {
            return None;
        }
        let p = self.slot(Shape::gen_of(w));
        let base = p.base.load(Ordering::Relaxed);
        let worker = p.worker.load(Ordering::Relaxed);
        let tick = base + self.shape.rel(w);
        if tick < t || tick > t.saturating_add(self.shape.drift) {
            return None;
        }
        let seq = self.shape.seq(w);
        // seq + 1, and drop the owned bit when the chunk is used up.
        let still_owned = (seq + 1) & (self.shape.chunk - 1) != 0;
        let next = w + 2 - u64::from(!still_owned);
        s.word
            .compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| self.shape.compose(tick, worker, seq))
    }

    /// Reserves up to `want` (>= 1) sequence numbers at one tick, reading the
    /// clock as `t`. Never waits: the caller decides on the outcome.
    ///
    /// Steps: read the shard's word and its generation's parameters; take
    /// from the chunk the shard owns ([`Cursor::take_from_shard`]); else
    /// claim chunks from the global word ([`Cursor::claim_chunks`]). A span
    /// is proven by the compare-and-swap that reserved it; any other outcome
    /// was decided on parameters read beside the word, so it is returned
    /// only once the word is confirmed unchanged ([`Cursor::confirm`]).
    pub fn take(&self, shard: usize, want: u64, t: u64) -> Take {
        let s = self.shard(shard);
        // The latest tick the cursor may use: the clock plus the drift.
        let latest = t.saturating_add(self.shape.drift);
        loop {
            let w = s.word.load(Ordering::Acquire);
            if self.shape.sealed(w) {
                return Take::Sealed(self.status());
            }
            let attempt = Attempt {
                shard: s,
                word: w,
                grant: self.grant_of(w),
                want,
                t,
                latest,
            };
            let step = match self.take_from_shard(attempt) {
                Step::Claim => self.claim_chunks(attempt),
                step => step,
            };
            match step {
                Step::Done(take @ (Take::Span(_) | Take::Sealed(_))) => return take,
                Step::Done(take) if self.confirm(s, w) => return take,
                _ => crate::sync::spin(),
            }
        }
    }

    /// The shard's own chunk: the next `want` sequence numbers, if it owns
    /// a chunk at a tick the clock allows.
    fn take_from_shard(&self, a: Attempt<'_>) -> Step {
        let Attempt {
            shard: s,
            word: w,
            grant,
            want,
            t,
            latest,
        } = a;
        let shape = &self.shape;
        let tick_w = grant.base + shape.rel(w);
        if tick_w > latest && !Shape::untouched(w) {
            return Step::Done(Take::Behind { cursor: tick_w });
        }
        if w & 1 == 0 || tick_w < t {
            return Step::Claim;
        }
        let seq = shape.seq(w);
        let chunk_end = shape.chunk_end(seq);
        let k = want.min(chunk_end - seq);
        let next = shape.pack(Shape::gen_of(w), shape.rel(w), seq + k, seq + k < chunk_end);
        if s.word
            .compare_exchange(w, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Step::Retry;
        }
        Step::Done(Take::Span(Span {
            tick: tick_w,
            worker: grant.worker,
            seq,
            count: k,
        }))
    }

    /// Claims the next chunks of the current tick (or of the clock's tick,
    /// if later) from the global word, then moves the shard past them.
    fn claim_chunks(&self, a: Attempt<'_>) -> Step {
        let Attempt {
            shard: s,
            word: w,
            grant,
            want,
            t,
            latest,
        } = a;
        let shape = &self.shape;
        let generation = Shape::gen_of(w);
        let g = self.global.load(Ordering::Acquire);
        if shape.sealed(g) {
            return Step::Done(Take::Sealed(self.status()));
        }
        if Shape::gen_of(g) != generation {
            // A switch is being installed (the global word goes first). If
            // the shard's word is still `w`, say so; else read both again
            // (the failed compare-and-swap saw the newer word, so the next
            // load cannot return `w` again).
            return if self.confirm(s, w) {
                Step::Done(Take::Sealed(Status::Switching))
            } else {
                Step::Retry
            };
        }
        let base = grant.base;
        let tick_g = base + shape.rel(g);
        if tick_g > latest {
            return Step::Done(if Shape::untouched(g) {
                Take::NotYetValid { start: base }
            } else {
                Take::Behind { cursor: tick_g }
            });
        }
        let target = t.max(base + shape.rel(w));
        let (mut tick, mut chunk) = if tick_g >= target {
            (tick_g, shape.seq(g))
        } else {
            (target, 0)
        };
        if chunk >= shape.chunks_per_tick {
            tick += 1;
            chunk = 0;
        }
        if tick > latest {
            return Step::Done(Take::Full {
                until: tick - shape.drift,
            });
        }
        if tick >= grant.end {
            return Step::Done(Take::End { end: grant.end });
        }
        let skip = u64::from(tick == 0 && grant.worker == 0 && chunk == 0);
        let chunks = (skip + want)
            .div_ceil(shape.chunk)
            .min(shape.chunks_per_tick - chunk);
        let claimed = shape.pack(generation, tick - base, chunk + chunks, false);
        if self
            .global
            .compare_exchange(g, claimed, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Step::Retry;
        }
        let first = chunk * shape.chunk + skip;
        let span_end = (chunk + chunks) * shape.chunk;
        let k = want.min(span_end - first);
        s.claimed.fetch_add(span_end - first, Ordering::Relaxed);
        let position = shape.pack(generation, tick - base, first + k, first + k < span_end);
        self.advance_shard(s, w, position);
        Step::Done(Take::Span(Span {
            tick,
            worker: grant.worker,
            seq: first,
            count: k,
        }))
    }

    /// True if `w` is still the shard's word. A compare-and-swap of `w` with
    /// itself, not a load: a successful read-modify-write comes before the
    /// seal of `w` in the word's order, so the parameters read beside `w`
    /// are `w`'s own (a load could return `w` after a seal it has not seen
    /// yet, beside parameters two switches newer).
    fn confirm(&self, s: &Shard, w: u64) -> bool {
        s.word
            .compare_exchange(w, w, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Moves a shard's word to `position` unless it is already there or
    /// beyond, so the next reservation through this shard comes after the
    /// span just claimed. Whatever the shard still owned below is dropped.
    fn advance_shard(&self, s: &Shard, mut current: u64, position: u64) {
        let shape = &self.shape;
        loop {
            match s
                .word
                .compare_exchange(current, position, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.count_drop(s, current);
                    return;
                }
                Err(actual) => {
                    if shape.sealed(actual)
                        || Shape::gen_of(actual) != Shape::gen_of(position)
                        || shape.position(actual) >= shape.position(position)
                    {
                        if position & 1 == 1 {
                            let seq = shape.seq(position);
                            s.dropped
                                .fetch_add(shape.chunk_end(seq) - seq, Ordering::Relaxed);
                        }
                        return;
                    }
                    current = actual;
                }
            }
        }
    }

    fn count_drop(&self, s: &Shard, word: u64) {
        if word & 1 == 1 {
            let seq = self.shape.seq(word);
            s.dropped
                .fetch_add(self.shape.chunk_end(seq) - seq, Ordering::Relaxed);
        }
    }

    /// Records `n` reserved sequence numbers that were never handed out (a
    /// batch that failed part way).
    pub fn add_dropped(&self, shard: usize, n: u64) {
        self.shards[shard & self.shape.shard_mask]
            .dropped
            .fetch_add(n, Ordering::Relaxed);
    }

    /// The words, the global one first.
    fn words(&self) -> impl Iterator<Item = &AtomicU64> {
        std::iter::once(&*self.global).chain(self.shards.iter().map(|s| &s.word))
    }

    /// Seals every word so no reservation of the current generation can
    /// complete, and sets the status callers will see. Sealing with
    /// `Status::Closed` is final: it marks every word closed, and neither a
    /// later seal nor [`Cursor::install`] changes a closed word.
    pub fn seal(&self, status: Status) -> Sealed {
        let closing = status == Status::Closed;
        if closing {
            self.status.store(status as u64, Ordering::SeqCst);
        } else {
            self.set_status(status);
        }
        let shape = &self.shape;
        let mut reached = None;
        for (i, word) in self.words().enumerate() {
            let mut w = word.load(Ordering::Acquire);
            while !shape.closed(w) && (closing || !shape.sealed(w)) {
                let sealed = shape.pack(Shape::gen_of(w), shape.max_rel, u64::from(closing), false);
                match word.compare_exchange(w, sealed, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        if shape.sealed(w) {
                            // Already sealed: a close only marks it.
                        } else if i == 0 {
                            reached = Some(self.grant_of(w).base + shape.rel(w));
                        } else {
                            self.count_drop(&self.shards[i - 1], w);
                        }
                        break;
                    }
                    Err(actual) => w = actual,
                }
            }
        }
        Sealed { reached }
    }

    /// Installs generation `generation` (mod 2^16) for `worker` over ticks
    /// `[base, end)`, on a sealed cursor. `end` is capped at the span one
    /// generation can address; the return value is the end installed, or
    /// `None` if the cursor is closed (then nothing is installed: a closed
    /// word is never replaced).
    pub fn install(&self, generation: u64, worker: u64, base: u64, end: u64) -> Option<u64> {
        let shape = &self.shape;
        let generation = generation & ((1 << GEN_BITS) - 1);
        let end = end.min(base.saturating_add(shape.max_rel));
        // The slot the current generation does not use (the words are
        // sealed, so no reservation of the generation before it can still
        // complete); the words' install below publishes it.
        let p = self.slot(generation);
        p.worker.store(worker, Ordering::Relaxed);
        p.base.store(base, Ordering::Relaxed);
        p.end.store(end, Ordering::Relaxed);
        if !self.set_status(Status::Active) {
            return None;
        }
        let fresh = shape.pack(generation, 0, 0, false);
        for word in self.words() {
            // A close that seals in the same order, global word first, has
            // already marked every word up to a closed one: stop there.
            let mut w = word.load(Ordering::Acquire);
            loop {
                if shape.closed(w) {
                    return None;
                }
                match word.compare_exchange(w, fresh, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(actual) => w = actual,
                }
            }
        }
        Some(end)
    }

    /// The generation tag the words carry now (sealed or not): a switch
    /// installs the next one.
    pub fn generation(&self) -> u64 {
        Shape::gen_of(self.global.load(Ordering::Acquire))
    }

    /// Moves the committed end forward (never back), capped at the span the
    /// current generation can address. Returns the end now in force.
    pub fn extend(&self, end: u64) -> u64 {
        let p = self.slot(Shape::gen_of(self.global.load(Ordering::Acquire)));
        let base = p.base.load(Ordering::Relaxed);
        let end = end.min(base.saturating_add(self.shape.max_rel));
        p.end.fetch_max(end, Ordering::Relaxed).max(end)
    }

    /// The sequence numbers handed out so far (claimed minus dropped minus
    /// what shards still own).
    pub fn issued(&self) -> u64 {
        let shape = &self.shape;
        let mut total: u64 = 0;
        for s in self.shards.iter() {
            let w = s.word.load(Ordering::Acquire);
            let unused = if w & 1 == 1 {
                let seq = shape.seq(w);
                shape.chunk_end(seq) - seq
            } else {
                0
            };
            total = total
                .wrapping_add(s.claimed.load(Ordering::Relaxed))
                .wrapping_sub(s.dropped.load(Ordering::Relaxed))
                .wrapping_sub(unused);
        }
        total
    }
}

/// Test-only mutants: broken switches the loom models (loom-tests/, built
/// with `--cfg grantid_loom`) use to show that they bite. Not in the
/// library as others build it (core/tests/release_api.rs).
#[cfg(any(test, grantid_loom))]
impl Cursor {
    /// Test-only: [`Cursor::install`] with its two halves swapped, the
    /// parameters stored after the words that publish them. The loom models
    /// use it to show that they see a reader take a new generation's word
    /// beside an older generation's parameters.
    pub fn install_params_last_for_tests(&self, generation: u64, worker: u64, base: u64, end: u64) {
        let fresh = self.shape.pack(generation & 0xffff, 0, 0, false);
        for word in self.words() {
            word.store(fresh, Ordering::Release);
        }
        let p = self.slot(generation);
        p.worker.store(worker, Ordering::Relaxed);
        p.base.store(base, Ordering::Relaxed);
        p.end.store(end, Ordering::Relaxed);
        self.set_status(Status::Active);
    }

    /// Test-only: the tick of the global word, read without sealing it (what
    /// a switch without the seal would take as the last tick reached).
    pub fn reached_unsealed_for_tests(&self) -> u64 {
        let g = self.global.load(Ordering::Acquire);
        self.grant_of(g).base + self.shape.rel(g)
    }

    /// Test-only: installs a generation without sealing first, breaking the
    /// switch protocol. The loom models use it to show that they catch a
    /// cursor that lets a reservation mix two grants.
    pub fn install_unsealed_for_tests(&self, generation: u64, worker: u64, base: u64, end: u64) {
        let shape = &self.shape;
        let p = self.slot(generation);
        p.worker.store(worker, Ordering::Relaxed);
        p.base.store(base, Ordering::Relaxed);
        p.end.store(end, Ordering::Relaxed);
        let fresh = shape.pack(generation & 0xffff, 0, 0, false);
        self.global.store(fresh, Ordering::Release);
        for s in self.shards.iter() {
            s.word.store(fresh, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(grantid_loom)))]
mod tests {
    use super::*;

    fn cursor(layout: Layout, shards: usize, drift: u64) -> Cursor {
        Cursor::new(Shape::new(&layout, shards, drift).unwrap())
    }

    fn ids(c: &Cursor, shard: usize, t: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| match c.take(shard, 1, t) {
                Take::Span(s) => c.shape().compose(s.tick, s.worker, s.seq),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn shape_of_the_default_layout() {
        let s = Shape::new(&Layout::default(), 2, 0).unwrap();
        assert_eq!(s.shards(), 2);
        assert_eq!(s.chunk(), 512);
        assert_eq!(s.sequence_limit(), 4096);
        assert_eq!(s.max_span(), (1 << 34) - 1);
        let s = Shape::new(&Layout::new(1, 0, 62).unwrap(), 3, 0).unwrap();
        assert_eq!(s.shards(), 4);
        assert_eq!(s.sequence_limit(), 1 << 26);
        assert_eq!(s.max_span(), (1 << 20) - 1);
        assert!(Shape::new(&Layout::default(), 0, 0).is_err());
    }

    #[test]
    fn a_new_cursor_is_sealed_unavailable() {
        let c = cursor(Layout::default(), 2, 0);
        assert_eq!(c.take(0, 1, 5), Take::Sealed(Status::Unavailable));
        assert_eq!(c.try_next(0, 5), None);
    }

    #[test]
    fn a_lone_thread_gets_the_full_tick() {
        let l = Layout::new(12, 3, 4).unwrap();
        let c = cursor(l, 2, 0);
        c.install(1, 1, 160, 200);
        let got = ids(&c, 1, 160, 16);
        let want: Vec<u64> = (0..16).map(|s| l.encode(160, 1, s).unwrap()).collect();
        assert_eq!(got, want);
        assert_eq!(c.take(1, 1, 160), Take::Full { until: 161 });
        assert_eq!(ids(&c, 1, 161, 1), vec![20624]);
        assert_eq!(c.issued(), 17);
    }

    #[test]
    fn drift_lets_the_cursor_run_ahead_and_no_further() {
        let l = Layout::new(12, 3, 4).unwrap();
        let c = cursor(l, 1, 2);
        c.install(1, 1, 160, 200);
        let got = ids(&c, 0, 160, 48);
        assert_eq!(l.decode(*got.last().unwrap()).unwrap().timestamp, 162);
        assert_eq!(c.take(0, 1, 160), Take::Full { until: 161 });
        // The clock steps back: within drift the cursor goes on from 162...
        assert!(matches!(c.take(0, 1, 161), Take::Span(s) if s.tick == 163));
        // ...beyond drift it refuses.
        assert_eq!(c.take(0, 1, 150), Take::Behind { cursor: 163 });
    }

    #[test]
    fn not_yet_valid_and_end() {
        let l = Layout::new(12, 3, 4).unwrap();
        let c = cursor(l, 1, 0);
        c.install(1, 2, 100, 101);
        assert_eq!(c.take(0, 1, 99), Take::NotYetValid { start: 100 });
        assert_eq!(ids(&c, 0, 100, 16).len(), 16);
        assert_eq!(c.take(0, 1, 100), Take::Full { until: 101 });
        assert_eq!(c.take(0, 1, 101), Take::End { end: 101 });
        assert_eq!(c.extend(103), 103);
        assert!(matches!(c.take(0, 1, 101), Take::Span(s) if s.tick == 101));
    }

    #[test]
    fn id_zero_is_never_issued() {
        let l = Layout::new(12, 0, 4).unwrap();
        let c = cursor(l, 2, 0);
        c.install(1, 0, 0, 2);
        let got = ids(&c, 0, 0, 15);
        assert_eq!(got, (1..16).collect::<Vec<u64>>());
        assert!(matches!(c.take(0, 1, 0), Take::Full { .. }));
    }

    #[test]
    fn seal_stops_everything_and_install_resumes_past_it() {
        let l = Layout::new(12, 3, 4).unwrap();
        let c = cursor(l, 2, 0);
        c.install(1, 1, 160, 200);
        ids(&c, 0, 160, 3);
        let sealed = c.seal(Status::LeaseLost);
        assert_eq!(sealed.reached, Some(160));
        assert_eq!(c.take(0, 1, 160), Take::Sealed(Status::LeaseLost));
        assert_eq!(c.try_next(0, 160), None);
        assert_eq!(c.seal(Status::LeaseLost).reached, None, "already sealed");
        c.install(2, 5, 161, 200);
        let d = l.decode(ids(&c, 0, 161, 1)[0]).unwrap();
        assert_eq!((d.worker, d.timestamp), (5, 161));
    }

    #[test]
    fn closed_is_final() {
        let l = Layout::new(12, 3, 4).unwrap();
        let c = cursor(l, 2, 0);
        c.install(1, 1, 160, 200);
        ids(&c, 1, 160, 3);
        // A switch seals, a close lands before the install: the install
        // must not reopen the cursor.
        c.seal(Status::Switching);
        c.seal(Status::Closed);
        assert_eq!(c.install(2, 1, 161, 200), None);
        assert_eq!(c.take(0, 1, 161), Take::Sealed(Status::Closed));
        assert_eq!(c.try_next(1, 161), None);
        // Neither a later seal nor a status change replaces `Closed`.
        c.seal(Status::LeaseLost);
        assert!(!c.set_status(Status::Unavailable));
        assert_eq!(c.take(1, 1, 161), Take::Sealed(Status::Closed));
    }

    #[test]
    fn batches_take_whole_spans_in_order() {
        let l = Layout::new(20, 0, 12).unwrap();
        let c = cursor(l, 2, 0);
        c.install(1, 0, 10, 100);
        let Take::Span(a) = c.take(0, 1000, 10) else {
            panic!()
        };
        assert_eq!((a.seq, a.count), (0, 1000));
        let b = ids(&c, 0, 10, 1)[0];
        assert_eq!(b, l.compose(10, 0, 1000));
        // The rest of the shard's chunk first, then whole chunks per CAS.
        let Take::Span(d) = c.take(0, 5000, 10) else {
            panic!()
        };
        assert_eq!((d.seq, d.count), (1001, 23));
        let Take::Span(e) = c.take(0, 5000 - 23, 10) else {
            panic!()
        };
        assert_eq!((e.seq, e.count), (1024, 4096 - 1024));
        assert_eq!(c.take(0, 1, 10), Take::Full { until: 11 });
    }

    #[test]
    fn the_fast_path_stays_inside_its_chunk() {
        let l = Layout::new(20, 0, 12).unwrap();
        let c = cursor(l, 1, 0);
        c.install(1, 0, 10, 100);
        assert_eq!(c.try_next(0, 10), None, "no chunk owned yet");
        let first = ids(&c, 0, 10, 1)[0];
        let mut last = first;
        let mut fast = 0;
        while let Some(id) = c.try_next(0, 10) {
            assert_eq!(id, last + 1);
            last = id;
            fast += 1;
        }
        assert_eq!(fast, c.shape().chunk() - 1);
        assert_eq!(c.try_next(0, 11), None, "clock moved: slow path");
    }
}
