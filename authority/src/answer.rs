//! The answers of the stores' own procedures, decoded: pure functions of
//! the fields as the driver read them (a row of `grantid.acquire` in
//! authority/src/engines/postgres/v1.sql, the reply of authority/src/engines/redis/v1.lua, a worker record
//! read for `grantid authority status`).
//!
//! The store is trusted to apply the rule, not to be well-formed: a schema
//! edited by hand, a script of another version, or a damaged record must
//! give a typed error, never a panic and never a silently truncated value.
//! So every number arrives here as an `i128` wide enough for any column or
//! decimal the stores hold, and is range-checked once:
//!
//! * a status other than `granted`, `lost`, `refused` or `wait`, a missing
//!   field, a negative or too large number, or a grant that fails
//!   [`Grant::validate`] against its request (end not after start, a worker
//!   outside the layout, a start before `not_before`, ...) is
//!   [`GrantError::Invalid`] (counted as an invalid grant, handled as
//!   uncertain: the generator keeps its committed grants and retries);
//! * a worker record that does not fit a [`WorkerStatus`] is
//!   [`GrantError::Unavailable`] naming the record (`ErrorKind::Unavailable`
//!   from `status`).
//!
//! fuzz/tests/store_answers.rs feeds these functions hostile input.

use grantid::{Grant, GrantError, GrantRequest, Layout};

use crate::kernel::WorkerStatus;

/// The fields of one answer to `acquire`, as the store sent them. `None`
/// is a field that is missing, NULL or not an integer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AcquireAnswer<'a> {
    /// `granted`, `lost`, `refused` or `wait` (anything else is malformed).
    pub status: Option<&'a str>,
    /// The reason given with an answer other than `granted`.
    pub message: Option<&'a str>,
    /// The worker granted.
    pub worker: Option<i128>,
    /// The fencing token of the grant.
    pub grant_id: Option<i128>,
    /// First tick of the interval (inclusive).
    pub start: Option<i128>,
    /// First tick after the interval (exclusive).
    pub end: Option<i128>,
}

impl<'a> AcquireAnswer<'a> {
    /// The fields of the Lua script's reply: `{"granted", worker, grant_id,
    /// start, end}` or `{status, message}`, every element a string (Redis
    /// turns the script's numbers into integers, redis-rs those into
    /// decimal strings).
    pub fn from_script_reply(reply: &'a [String]) -> AcquireAnswer<'a> {
        let status = reply.first().map(String::as_str);
        if status != Some("granted") {
            return AcquireAnswer {
                status,
                message: reply.get(1).map(String::as_str),
                ..AcquireAnswer::default()
            };
        }
        let number = |i: usize| reply.get(i).and_then(|s| s.parse().ok());
        AcquireAnswer {
            status,
            message: None,
            worker: number(1),
            grant_id: number(2),
            start: number(3),
            end: number(4),
        }
    }
}

/// Decodes `answer` to `request` from the store named `store` (`postgres`,
/// `redis`): the grant, checked against the request, or the typed refusal.
pub fn grant_from_answer(
    store: &str,
    request: &GrantRequest,
    answer: &AcquireAnswer<'_>,
) -> Result<Grant, GrantError> {
    let malformed = |why: String| {
        GrantError::Invalid(format!(
            "{store}: malformed answer to namespace {:?}: {why}",
            request.namespace
        ))
    };
    let why = || {
        format!(
            "namespace {:?}: {}",
            request.namespace,
            answer.message.unwrap_or_default()
        )
    };
    match answer.status {
        Some("granted") => {}
        Some("lost") => return Err(GrantError::Lost(why())),
        Some("refused") => return Err(GrantError::Refused(why())),
        Some("wait") => return Err(GrantError::Unavailable(why())),
        Some(other) => return Err(malformed(format!("unknown status {other:?}"))),
        None => return Err(malformed("no status".into())),
    }
    let field = |name: &str, value: Option<i128>| -> Result<u64, GrantError> {
        let value =
            value.ok_or_else(|| malformed(format!("{name} is missing or not an integer")))?;
        u64::try_from(value).map_err(|_| malformed(format!("{name} {value} is out of range")))
    };
    let worker = field("worker", answer.worker)?;
    let grant = Grant {
        namespace: request.namespace.clone(),
        worker: u32::try_from(worker)
            .map_err(|_| malformed(format!("worker {worker} is out of range")))?,
        incarnation: request.incarnation,
        grant_id: field("grant_id", answer.grant_id)?,
        start: field("start", answer.start)?,
        end: field("end", answer.end)?,
    };
    grant.validate(request).map_err(|e| malformed(e.0))?;
    Ok(grant)
}

/// The fields of one worker record, as the store holds them. `None` is a
/// field that is missing, NULL or not an integer (for `holder`: no holder).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredWorker<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// timestamp_bits, worker_bits, sequence_bits, epoch_ms, tick_ms.
    pub layout: [Option<i128>; 5],
    /// The worker value.
    pub worker: Option<i128>,
    /// The incarnation holding the lease (two's complement in PostgreSQL's
    /// bigint, as authority/src/engines/postgres/v1.sql stores it), `None` when released.
    pub holder: Option<i128>,
    /// The tick at which the lease expires.
    pub lease_expiry: Option<i128>,
    /// The end of every interval ever granted (ticks).
    pub high_water: Option<i128>,
    /// The last grant's fencing token.
    pub fencing: Option<i128>,
}

/// Decodes one worker record of the store named `store`.
pub fn worker_status(store: &str, record: &StoredWorker<'_>) -> Result<WorkerStatus, GrantError> {
    let malformed = |why: String| {
        GrantError::Unavailable(format!(
            "{store}: malformed worker record of namespace {:?}: {why}",
            record.namespace
        ))
    };
    fn number<T: TryFrom<i128>>(
        name: &str,
        value: Option<i128>,
        malformed: &impl Fn(String) -> GrantError,
    ) -> Result<T, GrantError> {
        let value =
            value.ok_or_else(|| malformed(format!("{name} is missing or not an integer")))?;
        T::try_from(value).map_err(|_| malformed(format!("{name} {value} is out of range")))
    }
    let [t, w, q, epoch, tick] = record.layout;
    let layout = Layout::with_all(
        number("timestamp_bits", t, &malformed)?,
        number("worker_bits", w, &malformed)?,
        number("sequence_bits", q, &malformed)?,
        number("epoch_ms", epoch, &malformed)?,
        number("tick_ms", tick, &malformed)?,
    )
    .map_err(|e| malformed(format!("layout: {}", e.message())))?;
    let worker: u32 = number("worker", record.worker, &malformed)?;
    if u64::from(worker) >= layout.worker_count() {
        return Err(malformed(format!(
            "worker {worker} does not fit in {} worker bits",
            layout.worker_bits()
        )));
    }
    let holder = match record.holder {
        None => None,
        // A bigint holds the incarnation's 64 bits as two's complement.
        Some(h) => Some(match i64::try_from(h) {
            Ok(signed) => signed as u64,
            Err(_) => number("holder", Some(h), &malformed)?,
        }),
    };
    Ok(WorkerStatus {
        namespace: record.namespace.to_owned(),
        layout,
        worker,
        holder,
        lease_expiry: number("lease_expiry", record.lease_expiry, &malformed)?,
        high_water: number("high_water", record.high_water, &malformed)?,
        fencing: number("fencing", record.fencing, &malformed)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: 9,
            request_id: 1,
            worker: None,
            not_before: 100,
            now: 0,
            duration: 10,
            layout: Layout::new(40, 2, 8).unwrap(),
        }
    }

    fn granted(worker: i128, grant_id: i128, start: i128, end: i128) -> AcquireAnswer<'static> {
        AcquireAnswer {
            status: Some("granted"),
            worker: Some(worker),
            grant_id: Some(grant_id),
            start: Some(start),
            end: Some(end),
            ..AcquireAnswer::default()
        }
    }

    #[test]
    fn a_good_answer_is_the_grant() {
        let g = grant_from_answer("pg", &request(), &granted(3, 7, 100, 110)).unwrap();
        assert_eq!(
            (g.worker, g.grant_id, g.start, g.end, g.incarnation),
            (3, 7, 100, 110, 9)
        );
        assert_eq!(g.namespace, "ns");
    }

    #[test]
    fn hostile_answers_are_invalid() {
        for (answer, needle) in [
            (granted(3, -1, 100, 110), "grant_id -1 is out of range"),
            (granted(3, 7, -5, 110), "start -5"),
            (granted(3, 7, 110, 110), "not before end"),
            (granted(3, 7, 120, 110), "not before end"),
            (granted(4, 7, 100, 110), "does not fit in 2 worker bits"),
            (granted(1 << 40, 7, 100, 110), "out of range"),
            (granted(0, 7, 100, 1 << 41), "past the timestamp"),
            (granted(0, 7, 50, 110), "before not_before"),
            (granted(0, 1 << 70, 100, 110), "out of range"),
            (
                AcquireAnswer {
                    end: None,
                    ..granted(0, 1, 100, 110)
                },
                "end is missing",
            ),
            (
                AcquireAnswer {
                    status: Some("Granted"),
                    ..granted(0, 1, 100, 110)
                },
                "unknown status",
            ),
            (AcquireAnswer::default(), "no status"),
        ] {
            match grant_from_answer("pg", &request(), &answer) {
                Err(GrantError::Invalid(why)) => assert!(why.contains(needle), "{why}"),
                other => panic!("{answer:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn refusals_keep_their_kind_and_message() {
        let answer = |status| AcquireAnswer {
            status: Some(status),
            message: Some("held by 5"),
            ..AcquireAnswer::default()
        };
        let r = request();
        assert!(matches!(grant_from_answer("x", &r, &answer("lost")),
            Err(GrantError::Lost(m)) if m.contains("held by 5")));
        assert!(matches!(
            grant_from_answer("x", &r, &answer("refused")),
            Err(GrantError::Refused(_))
        ));
        assert!(matches!(
            grant_from_answer("x", &r, &answer("wait")),
            Err(GrantError::Unavailable(_))
        ));
    }

    #[test]
    fn script_replies() {
        let reply: Vec<String> = ["granted", "1", "2", "100", "110"].map(String::from).into();
        assert_eq!(
            AcquireAnswer::from_script_reply(&reply),
            granted(1, 2, 100, 110)
        );
        let short: Vec<String> = ["granted", "1", "2", "100"].map(String::from).into();
        assert_eq!(AcquireAnswer::from_script_reply(&short).end, None);
        let float: Vec<String> = ["granted", "1", "2", "1e3", "1.5"].map(String::from).into();
        let a = AcquireAnswer::from_script_reply(&float);
        assert_eq!((a.start, a.end), (None, None));
        assert!(AcquireAnswer::from_script_reply(&[]).status.is_none());
    }

    fn record() -> StoredWorker<'static> {
        StoredWorker {
            namespace: "ns",
            layout: [Some(40), Some(2), Some(8), Some(0), Some(1)],
            worker: Some(3),
            holder: Some(-1),
            lease_expiry: Some(5),
            high_water: Some(6),
            fencing: Some(7),
        }
    }

    #[test]
    fn worker_records() {
        let s = worker_status("pg", &record()).unwrap();
        assert_eq!(s.holder, Some(u64::MAX), "two's complement of the bigint");
        assert_eq!(
            (s.worker, s.lease_expiry, s.high_water, s.fencing),
            (3, 5, 6, 7)
        );
        let released = StoredWorker {
            holder: None,
            ..record()
        };
        assert_eq!(worker_status("pg", &released).unwrap().holder, None);
        let mut truncating = record();
        truncating.layout[0] = Some(256 + 40);
        let mut outside = record();
        outside.worker = Some(4);
        for (bad, needle) in [
            (truncating, "timestamp_bits 296 is out of range"),
            (outside, "does not fit in 2 worker bits"),
            (
                StoredWorker {
                    worker: Some(-1),
                    ..record()
                },
                "worker -1",
            ),
            (
                StoredWorker {
                    high_water: None,
                    ..record()
                },
                "high_water is missing",
            ),
            (
                StoredWorker {
                    layout: [Some(40), Some(2), Some(8), Some(0), Some(0)],
                    ..record()
                },
                "layout",
            ),
        ] {
            match worker_status("pg", &bad) {
                Err(GrantError::Unavailable(why)) => assert!(why.contains(needle), "{why}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
