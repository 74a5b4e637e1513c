//! Model test of the generator: random sequences of `next_id`,
//! `try_next_id`, `next_ids`, `fill`, clock steps (forward and back),
//! authority answers that force grant switches (refusals, outages), and
//! `close`, from several threads, checked after every step against the
//! rule: every ID lies in a grant the authority gave for its worker, no ID
//! is handed out twice, each thread's IDs strictly increase, no ID is ahead
//! of the clock by more than the drift, and nothing is issued after `close`.
//!
//! Each simulated thread is a real thread (so it gets its own shard), driven
//! one step at a time by the test: the interleaving is the one the input
//! chooses, at the granularity of calls; the generator's own renewal thread
//! runs freely beside them. bolero shrinks a failing sequence.

use std::collections::HashSet;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grantid::{
    DEFAULT_EPOCH_MS, ErrorKind, Generator, Grant, GrantError, GrantRequest, GrantSource, Layout,
    ManualClock, MemoryAuthority,
};

const THREADS: usize = 3;
const DRIFT_MS: u64 = 20;

#[derive(Debug, Clone, Copy, bolero::TypeGenerator)]
enum Answer {
    Grant,
    Outage,
    Refusal,
}

#[derive(Debug, Clone, Copy, bolero::TypeGenerator)]
enum Op {
    NextId(u8),
    TryNextId(u8),
    NextIds(u8, u8),
    Fill(u8, u8),
    Advance(u16),
    StepBack(u8),
    Authority(Answer),
    /// Closes the generator when the number is 0 mod 32 (a close ends the
    /// interesting part of a run), else a `next_id` on thread 0.
    Close(u8),
}

/// A real in-memory allocator behind a switch that makes it refuse or fail.
#[derive(Clone)]
struct Switched {
    inner: MemoryAuthority,
    answer: Arc<Mutex<Answer>>,
}

impl GrantSource for Switched {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        match *self.answer.lock().unwrap() {
            Answer::Grant => self.inner.acquire(request),
            Answer::Outage => Err(GrantError::Unavailable("model outage".into())),
            Answer::Refusal => Err(GrantError::Lost("model refusal".into())),
        }
    }

    fn release(&self, last: &Grant) {
        self.inner.release(last);
    }
}

/// What a thread's call gave back.
type Reply = Result<Vec<u64>, ErrorKind>;

fn call(g: &Generator, op: Op) -> Reply {
    match op {
        Op::NextId(_) => g.next_id().map(|id| vec![id]).map_err(|e| e.kind()),
        Op::TryNextId(_) => Ok(g.try_next_id().into_iter().collect()),
        Op::NextIds(_, n) => g.next_ids(usize::from(n % 9) + 1).map_err(|e| e.kind()),
        Op::Fill(_, n) => {
            let mut out = vec![0; usize::from(n % 9) + 1];
            g.fill(&mut out).map(|()| out).map_err(|e| e.kind())
        }
        _ => unreachable!("not a generator call"),
    }
}

struct Model {
    layout: Layout,
    seen: HashSet<u64>,
    last: [u64; THREADS],
    latest_clock_ms: u64,
    closed: bool,
}

impl Model {
    fn check(&mut self, thread: usize, op: Op, reply: Reply, grants: &[Grant]) {
        let ids = match reply {
            Ok(ids) => ids,
            Err(kind) => {
                assert!(kind != ErrorKind::InvalidArgument, "{op:?}: {kind:?}");
                assert!(
                    !self.closed || kind == ErrorKind::Closed,
                    "{op:?} after close: {kind:?}"
                );
                return;
            }
        };
        assert!(
            !self.closed || ids.is_empty(),
            "{op:?} issued {ids:?} after close"
        );
        let latest_tick = self.layout.tick_at(self.latest_clock_ms) + DRIFT_MS;
        for id in ids {
            assert!(self.seen.insert(id), "{op:?}: ID {id} handed out twice");
            assert!(
                id > self.last[thread],
                "{op:?}: thread {thread} got {id} after {}",
                self.last[thread]
            );
            self.last[thread] = id;
            let d = self.layout.decode(id).unwrap();
            assert!(
                grants.iter().any(|g| u64::from(g.worker) == d.worker
                    && g.start <= d.timestamp
                    && d.timestamp < g.end),
                "{op:?}: ID {id} ({d:?}) lies in no grant of {grants:?}"
            );
            assert!(
                d.timestamp <= latest_tick,
                "{op:?}: ID {id} ({d:?}) is ahead of the clock"
            );
        }
    }
}

fn run(ops: &[Op]) {
    let layout = Layout::new(24, 3, 4).unwrap();
    let start_ms = DEFAULT_EPOCH_MS + 1_000;
    let clock = ManualClock::new(start_ms);
    let source = Switched {
        inner: MemoryAuthority::new().with_clock(clock.clone()),
        answer: Arc::new(Mutex::new(Answer::Grant)),
    };
    let generator = Generator::builder(layout, "model", source.clone())
        .clock(clock.clone())
        .max_drift_ms(DRIFT_MS)
        .max_wait(Duration::from_millis(2))
        .grant_duration_ms(40)
        .horizon_ms(60)
        .shards(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .startup_timeout(Duration::from_secs(5))
        .start()
        .unwrap();
    let generator = Arc::new(generator);
    let mut model = Model {
        layout,
        seen: HashSet::new(),
        last: [0; THREADS],
        latest_clock_ms: start_ms,
        closed: false,
    };
    let mut now_ms = start_ms;
    std::thread::scope(|scope| {
        let mut lanes: Vec<(Sender<Op>, Receiver<Reply>)> = Vec::new();
        for _ in 0..THREADS {
            let (op_tx, op_rx) = channel::<Op>();
            let (reply_tx, reply_rx) = channel::<Reply>();
            let g = Arc::clone(&generator);
            scope.spawn(move || {
                for op in op_rx {
                    reply_tx.send(call(&g, op)).unwrap();
                }
            });
            lanes.push((op_tx, reply_rx));
        }
        for &op in ops {
            match op {
                Op::NextId(t) | Op::TryNextId(t) | Op::NextIds(t, _) | Op::Fill(t, _) => {
                    let thread = usize::from(t) % THREADS;
                    lanes[thread].0.send(op).unwrap();
                    // A thread that died (a panic in the generator) fails here.
                    let reply = lanes[thread].1.recv().expect("the generator panicked");
                    model.check(thread, op, reply, &source.inner.grants());
                }
                Op::Advance(ms) => {
                    now_ms += u64::from(ms % 200);
                    clock.set(now_ms);
                    model.latest_clock_ms = model.latest_clock_ms.max(now_ms);
                }
                Op::StepBack(ms) => {
                    now_ms -= u64::from(ms % 100).min(now_ms - DEFAULT_EPOCH_MS);
                    clock.set(now_ms);
                }
                Op::Authority(answer) => *source.answer.lock().unwrap() = answer,
                Op::Close(n) if n % 32 == 0 => {
                    generator.close();
                    model.closed = true;
                }
                Op::Close(_) => {
                    let op = Op::NextId(0);
                    lanes[0].0.send(op).unwrap();
                    let reply = lanes[0].1.recv().expect("the generator panicked");
                    model.check(0, op, reply, &source.inner.grants());
                }
            }
        }
        drop(lanes);
    });
}

#[test]
fn generator_model() {
    bolero::check!()
        .with_type::<Vec<Op>>()
        .for_each(|ops| run(ops));
}
