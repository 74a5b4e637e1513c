//! Fuzz harnesses for the stores' answers (grantid_authority::answer): the
//! row of PostgreSQL's `grantid.acquire`, the Lua script's reply, and the
//! worker records `status` reads. Hostile answers (unknown status strings,
//! negative or huge ticks, end <= start, a worker outside the layout,
//! missing fields) must give a typed error, never a panic, and a grant only
//! when it is valid for its request.

use grantid::{GrantError, GrantRequest, Layout};
use grantid_authority::answer::{AcquireAnswer, StoredWorker, grant_from_answer, worker_status};

const STATUSES: &[&str] = &[
    "granted", "lost", "refused", "wait", "Granted", "", "granted ",
];

/// A number as a store might send it: mostly small (so that whole answers
/// are often valid), sometimes at or past the edges of i64 / u64 / u32, or
/// missing.
#[derive(Debug, bolero::TypeGenerator)]
struct Number {
    kind: u8,
    small: u8,
    wide: i128,
}

impl Number {
    fn value(&self) -> Option<i128> {
        match self.kind % 8 {
            0..=4 => Some(i128::from(self.small)),
            5 => Some(i128::from(self.wide as u64)),
            6 => Some(self.wide),
            _ => None,
        }
    }
}

#[derive(Debug, bolero::TypeGenerator)]
struct AnswerInput {
    status: u8,
    other_status: Option<String>,
    message: Option<String>,
    worker: Number,
    grant_id: Number,
    start: Number,
    end: Number,
    /// The request: worker bits, not_before, a renewal's worker.
    worker_bits: u8,
    not_before: u8,
    renewal: Option<u8>,
}

fn request(worker_bits: u8, not_before: u64, renewal: Option<u32>) -> GrantRequest {
    GrantRequest {
        namespace: "fuzz".into(),
        incarnation: 5,
        request_id: 6,
        worker: renewal,
        not_before,
        now: 0,
        duration: 10,
        layout: Layout::new(40, worker_bits % 11, 8).unwrap(),
    }
}

/// The checks every decoded answer must pass.
fn check(request: &GrantRequest, answer: &AcquireAnswer<'_>) {
    match grant_from_answer("fuzz", request, answer) {
        Ok(grant) => {
            assert_eq!(answer.status, Some("granted"));
            grant.validate(request).unwrap();
            assert_eq!(Some(i128::from(grant.worker)), answer.worker);
            assert_eq!(Some(i128::from(grant.grant_id)), answer.grant_id);
            assert_eq!(Some(i128::from(grant.start)), answer.start);
            assert_eq!(Some(i128::from(grant.end)), answer.end);
        }
        Err(GrantError::Lost(_)) => assert_eq!(answer.status, Some("lost")),
        Err(GrantError::Refused(_)) => assert_eq!(answer.status, Some("refused")),
        Err(GrantError::Unavailable(_)) => assert_eq!(answer.status, Some("wait")),
        Err(GrantError::Invalid(why)) => assert!(why.contains("malformed answer"), "{why}"),
    }
}

#[test]
fn store_acquire_answer() {
    bolero::check!()
        .with_type::<AnswerInput>()
        .for_each(|input| {
            let status = match &input.other_status {
                Some(s) if input.status % 2 == 0 => Some(s.as_str()),
                _ => STATUSES
                    .get(usize::from(input.status) % (STATUSES.len() + 1))
                    .copied(),
            };
            let answer = AcquireAnswer {
                status,
                message: input.message.as_deref(),
                worker: input.worker.value(),
                grant_id: input.grant_id.value(),
                start: input.start.value(),
                end: input.end.value(),
            };
            let r = request(
                input.worker_bits,
                u64::from(input.not_before),
                input.renewal.map(u32::from),
            );
            check(&r, &answer);
        });
}

#[test]
fn store_script_reply() {
    bolero::check!()
        .with_type::<(bool, Vec<Number>, Option<(u8, String)>, u8)>()
        .for_each(|(granted, numbers, junk, worker_bits)| {
            let mut reply: Vec<String> = numbers
                .iter()
                .map(|n| n.value().map_or_else(|| "nil".into(), |v| v.to_string()))
                .collect();
            if *granted {
                reply.insert(0, "granted".into());
            }
            if let Some((at, text)) = junk {
                let at = usize::from(*at);
                if at < reply.len() {
                    reply[at] = text.clone();
                } else {
                    reply.push(text.clone());
                }
            }
            let r = request(*worker_bits, 0, None);
            check(&r, &AcquireAnswer::from_script_reply(&reply));
        });
}

#[derive(Debug, bolero::TypeGenerator)]
struct RecordInput {
    /// Keep the layout valid (the later checks get exercised).
    plausible: bool,
    namespace: String,
    layout: [Number; 5],
    worker: Number,
    holder: Number,
    lease_expiry: Number,
    high_water: Number,
    fencing: Number,
}

#[test]
fn store_worker_record() {
    bolero::check!()
        .with_type::<RecordInput>()
        .for_each(|input| {
            let record = StoredWorker {
                namespace: &input.namespace,
                layout: if input.plausible {
                    [40, 2, 8, 0, 1].map(Some)
                } else {
                    std::array::from_fn(|i| input.layout[i].value())
                },
                worker: input.worker.value(),
                holder: input.holder.value(),
                lease_expiry: input.lease_expiry.value(),
                high_water: input.high_water.value(),
                fencing: input.fencing.value(),
            };
            match worker_status("fuzz", &record) {
                Ok(s) => {
                    // Nothing truncated: every value is the record's own.
                    let l = s.layout;
                    let layout = [
                        i128::from(l.timestamp_bits()),
                        i128::from(l.worker_bits()),
                        i128::from(l.sequence_bits()),
                        i128::from(l.epoch_ms()),
                        i128::from(l.tick_ms()),
                    ];
                    assert_eq!(layout.map(Some), record.layout);
                    assert!(u64::from(s.worker) < l.worker_count());
                    assert_eq!(Some(i128::from(s.worker)), record.worker);
                    assert_eq!(Some(i128::from(s.high_water)), record.high_water);
                    assert_eq!(Some(i128::from(s.lease_expiry)), record.lease_expiry);
                    assert_eq!(Some(i128::from(s.fencing)), record.fencing);
                    assert_eq!(s.holder.is_some(), record.holder.is_some());
                }
                Err(GrantError::Unavailable(why)) => {
                    assert!(why.contains("malformed worker record"), "{why}")
                }
                Err(other) => panic!("{record:?}: {other:?}"),
            }
        });
}
