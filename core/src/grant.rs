//! Grants, grant requests, and the authority interface (docs/DESIGN.md section 2).

use std::fmt;
use std::sync::Arc;

use crate::layout::Layout;

/// A half-open interval of ticks `[start, end)` that an authority reserved
/// durably for one worker of one namespace, for one generator incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The ID format's namespace (`"orders-v1"`).
    pub namespace: String,
    /// The worker value the IDs carry.
    pub worker: u32,
    /// The incarnation of the generator the grant was made for.
    pub incarnation: u64,
    /// The authority's identifier for the grant (a fencing token or a log
    /// row id; the generator only reports it).
    pub grant_id: u64,
    /// First tick of the interval.
    pub start: u64,
    /// First tick after the interval (exclusive).
    pub end: u64,
}

/// What a generator asks an authority for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrantRequest {
    /// The ID format's namespace.
    pub namespace: String,
    /// The asking generator's incarnation: fresh random 64 bits per
    /// activation.
    pub incarnation: u64,
    /// Increases per request of one incarnation; a retry of the same request
    /// reuses it, and the authority answers a retry with the recorded grant.
    pub request_id: u64,
    /// `Some(w)` to renew worker `w`; `None` for any free worker.
    pub worker: Option<u32>,
    /// The grant may not start before this tick (the end of the committed
    /// grants, for a renewal).
    pub not_before: u64,
    /// The generator's clock, in ticks. Authorities with a clock of their
    /// own use theirs.
    pub now: u64,
    /// The wanted length of the interval, in ticks.
    pub duration: u64,
    /// The layout of the namespace, so an authority can refuse a namespace
    /// registered with another layout and cap `end` at the timestamp field.
    pub layout: Layout,
}

/// An authority's answer other than a grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GrantError {
    /// A positive refusal: the worker belongs to someone else, or no worker
    /// is free. The generator stops issuing from that worker at once.
    Lost(String),
    /// Uncertain: a timeout, a dropped connection, an exception. The
    /// generator keeps issuing inside its committed grant and retries.
    Unavailable(String),
    /// The answer was not a grant at all (a binding could not read a field of
    /// what a host callback returned). Counted as an invalid grant, handled
    /// as uncertain.
    Invalid(String),
    /// A permanent refusal: the request can never succeed as asked (the
    /// namespace is registered with another layout, the worker is outside
    /// the layout, the authority is configured unsafely). Start-up fails at
    /// once with `InvalidArgument` instead of retrying until its timeout; a
    /// running generator treats it as [`GrantError::Lost`].
    Refused(String),
}

impl GrantError {
    /// Every variant's name, in declaration order: what a binding's host
    /// callback names when it reports one (`grantError` in Node,
    /// `grant_error` in Python).
    pub const NAMES: [&'static str; 4] = ["lost", "unavailable", "invalid", "refused"];

    /// The variant's name: `"lost"`, `"unavailable"`, `"invalid"` or
    /// `"refused"`.
    pub fn name(&self) -> &'static str {
        match self {
            GrantError::Lost(_) => Self::NAMES[0],
            GrantError::Unavailable(_) => Self::NAMES[1],
            GrantError::Invalid(_) => Self::NAMES[2],
            GrantError::Refused(_) => Self::NAMES[3],
        }
    }

    /// The variant named `name` (see [`GrantError::name`]) with the reason
    /// `why`; `None` for any other name.
    pub fn named(name: &str, why: String) -> Option<GrantError> {
        match name {
            "lost" => Some(GrantError::Lost(why)),
            "unavailable" => Some(GrantError::Unavailable(why)),
            "invalid" => Some(GrantError::Invalid(why)),
            "refused" => Some(GrantError::Refused(why)),
            _ => None,
        }
    }

    /// The reason, without the variant's name.
    pub fn reason(&self) -> &str {
        match self {
            GrantError::Lost(why)
            | GrantError::Unavailable(why)
            | GrantError::Invalid(why)
            | GrantError::Refused(why) => why,
        }
    }
}

impl fmt::Display for GrantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantError::Lost(why) => write!(f, "lost: {why}"),
            GrantError::Unavailable(why) => write!(f, "unavailable: {why}"),
            GrantError::Invalid(why) => write!(f, "invalid grant: {why}"),
            GrantError::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

impl std::error::Error for GrantError {}

/// An authority's refusal as a generator error: `Lost` is `LeaseLost`;
/// `Unavailable` and `Invalid` are `Unavailable`; `Refused` is
/// `InvalidArgument`.
impl From<GrantError> for crate::Error {
    fn from(e: GrantError) -> crate::Error {
        use crate::ErrorKind;
        match e {
            GrantError::Lost(m) => crate::Error::new(ErrorKind::LeaseLost, m),
            GrantError::Unavailable(m) => crate::Error::new(ErrorKind::Unavailable, m),
            GrantError::Invalid(m) => {
                crate::Error::new(ErrorKind::Unavailable, format!("invalid grant: {m}"))
            }
            GrantError::Refused(m) => crate::Error::new(ErrorKind::InvalidArgument, m),
        }
    }
}

/// The longest namespace, in bytes.
pub const NAMESPACE_MAX_LEN: usize = 128;

/// Checks a namespace: 1 to [`NAMESPACE_MAX_LEN`] bytes of ASCII letters,
/// digits and `-`, `_`, `.`, `:`, `/` (docs/AUTHORITIES.md, "Namespaces").
/// Every authority stores the name as given (a PostgreSQL `text`, part of a
/// Redis key, a JSON string), so a byte none of them can hold (NUL), a
/// brace that would move Redis keys to another hash slot, or a name that
/// looks alike but differs in Unicode normalisation is refused here, before
/// any authority sees it.
pub fn check_namespace(namespace: &str) -> Result<(), crate::Error> {
    if namespace.is_empty() {
        return Err(crate::Error::invalid("namespace must not be empty"));
    }
    if namespace.len() > NAMESPACE_MAX_LEN {
        return Err(crate::Error::invalid(format!(
            "namespace is {} bytes long, more than {NAMESPACE_MAX_LEN}",
            namespace.len()
        )));
    }
    if let Some(bad) = namespace
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')))
    {
        return Err(crate::Error::invalid(format!(
            "namespace {namespace:?} contains {bad:?}; allowed: ASCII letters, digits and - _ . : /"
        )));
    }
    Ok(())
}

/// The authority, supplied by the host.
///
/// `acquire` runs only on the generator's renewal thread (the thread that
/// calls [`crate::GeneratorBuilder::start`] waits for its first answer), never
/// on the `next_id` path. It may block; a source that never returns stops
/// renewal, but never lets an ID out past the committed grants. A panic
/// inside it is caught and counted as uncertain. `release` runs on the
/// thread that calls `close()` (or drops the generator).
pub trait GrantSource: Send + Sync + 'static {
    /// Reserves an interval, or says why not.
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError>;

    /// The datacenter whose workers this source grants, when it grants only
    /// one datacenter's (an authority URL with `datacenter=N`). The
    /// generator checks it against its own datacenter at start-up
    /// ([`crate::GeneratorBuilder::datacenter`]) and takes it as its
    /// datacenter when it was given none. The default is `None`: any
    /// worker of the layout.
    fn datacenter(&self) -> Option<u32> {
        None
    }

    /// Gives the worker back (best effort) when the generator closes. The
    /// high-water mark stays; only the worker lease ends. The default does
    /// nothing.
    fn release(&self, _last: &Grant) {}

    /// The source's bounded lead, in ms, if it has one: no interval it
    /// grants ends more than this after its own clock (docs/AUTHORITIES.md,
    /// "State loss"). A generator whose horizon plus grant duration exceed
    /// it fails at start-up with `InvalidArgument` instead of renewing
    /// against a cap it can never get past. The default: none.
    fn max_lead_ms(&self) -> Option<u64> {
        None
    }
}

/// `GrantSource` for the pointers that own a source, every method forwarded
/// to the pointee: the one list of forwards. A method added to the trait
/// with a default and not added here would answer its default through a
/// `Box<dyn Authority>`; `clippy::missing_trait_methods` refuses such an
/// impl, and `tests::pointers_forward_every_method` calls each method
/// through each pointer.
macro_rules! forward_grant_source {
    ($($pointer:ident),+) => {$(
        #[deny(clippy::missing_trait_methods)]
        impl<S: GrantSource + ?Sized> GrantSource for $pointer<S> {
            fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
                (**self).acquire(request)
            }
            fn datacenter(&self) -> Option<u32> {
                (**self).datacenter()
            }
            fn release(&self, last: &Grant) {
                (**self).release(last)
            }
            fn max_lead_ms(&self) -> Option<u64> {
                (**self).max_lead_ms()
            }
        }
    )+};
}

forward_grant_source!(Arc, Box);

/// A grant source made of a closure (no release).
pub struct FnSource<F>(pub F);

impl<F> fmt::Debug for FnSource<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnSource")
    }
}

impl<F> GrantSource for FnSource<F>
where
    F: Fn(&GrantRequest) -> Result<Grant, GrantError> + Send + Sync + 'static,
{
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        (self.0)(request)
    }
}

/// Wraps a closure as a [`GrantSource`].
pub fn source_fn<F>(f: F) -> FnSource<F>
where
    F: Fn(&GrantRequest) -> Result<Grant, GrantError> + Send + Sync + 'static,
{
    FnSource(f)
}

/// Why a grant was refused by the generator's validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidGrant(pub String);

impl fmt::Display for InvalidGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid grant: {}", self.0)
    }
}

impl std::error::Error for InvalidGrant {}

impl Grant {
    /// The interval's length in ticks.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True when the interval holds no tick.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks a grant against the request it answers: namespace,
    /// incarnation, worker range (and the same worker for a renewal),
    /// `not_before <= start < end <= 2^timestamp_bits`. A grant that fails is
    /// never used.
    pub fn validate(&self, request: &GrantRequest) -> Result<(), InvalidGrant> {
        self.validate_in(request, None)
    }

    /// [`Grant::validate`], and with `Some(datacenter)` also that the worker
    /// lies in that datacenter of the request's layout (its top
    /// `datacenter_bits` bits): a generator never issues another
    /// datacenter's IDs, whatever its authority says.
    pub fn validate_in(
        &self,
        request: &GrantRequest,
        datacenter: Option<u32>,
    ) -> Result<(), InvalidGrant> {
        let layout = &request.layout;
        if self.namespace != request.namespace {
            return Err(InvalidGrant(format!(
                "namespace is {:?}, expected {:?}",
                self.namespace, request.namespace
            )));
        }
        if self.incarnation != request.incarnation {
            return Err(InvalidGrant(format!(
                "incarnation is {:#x}, expected {:#x}",
                self.incarnation, request.incarnation
            )));
        }
        if u64::from(self.worker) >= layout.worker_count() {
            return Err(InvalidGrant(format!(
                "worker {} does not fit in {} worker bits",
                self.worker,
                layout.worker_bits()
            )));
        }
        if let Some(dc) = datacenter
            && layout.datacenter_of(u64::from(self.worker)) != u64::from(dc)
        {
            return Err(InvalidGrant(format!(
                "worker {} is in datacenter {}, this generator is in datacenter {dc}",
                self.worker,
                layout.datacenter_of(u64::from(self.worker))
            )));
        }
        if let Some(w) = request.worker
            && self.worker != w
        {
            return Err(InvalidGrant(format!(
                "worker is {}, the renewal asked for worker {w}",
                self.worker
            )));
        }
        if self.start >= self.end {
            return Err(InvalidGrant(format!(
                "start {} is not before end {}",
                self.start, self.end
            )));
        }
        if self.end > layout.timestamp_limit() {
            return Err(InvalidGrant(format!(
                "end {} is past the timestamp field's limit 2^{}",
                self.end,
                layout.timestamp_bits()
            )));
        }
        if self.start < request.not_before {
            return Err(InvalidGrant(format!(
                "start {} is before not_before {} (it overlaps committed time)",
                self.start, request.not_before
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grant_error_is_named_and_back() {
        let all = [
            GrantError::Lost("a".into()),
            GrantError::Unavailable("b".into()),
            GrantError::Invalid("c".into()),
            GrantError::Refused("d".into()),
        ];
        for (e, name) in all.iter().zip(GrantError::NAMES) {
            assert_eq!(e.name(), name);
            assert_eq!(
                GrantError::named(e.name(), e.reason().into()).as_ref(),
                Some(e)
            );
        }
        assert_eq!(GrantError::named("granted", String::new()), None);
    }

    fn request(worker: Option<u32>) -> GrantRequest {
        GrantRequest {
            namespace: "ns".into(),
            incarnation: 7,
            request_id: 1,
            worker,
            not_before: 100,
            now: 100,
            duration: 50,
            layout: Layout::new(12, 3, 4).unwrap(),
        }
    }

    fn grant() -> Grant {
        Grant {
            namespace: "ns".into(),
            worker: 1,
            incarnation: 7,
            grant_id: 1,
            start: 100,
            end: 150,
        }
    }

    /// A source whose every method answers something other than the
    /// trait's default.
    #[derive(Debug, Default)]
    struct Marked {
        released: std::sync::Mutex<Vec<u64>>,
    }

    #[deny(clippy::missing_trait_methods)]
    impl GrantSource for Marked {
        fn acquire(&self, _request: &GrantRequest) -> Result<Grant, GrantError> {
            Ok(Grant {
                grant_id: 41,
                ..grant()
            })
        }
        fn datacenter(&self) -> Option<u32> {
            Some(5)
        }
        fn release(&self, last: &Grant) {
            self.released.lock().unwrap().push(last.grant_id);
        }
        fn max_lead_ms(&self) -> Option<u64> {
            Some(60_000)
        }
    }

    /// Calls every method of `source` through `S`'s own impl; `marked` is
    /// the source behind it.
    fn answers_as_marked<S: GrantSource>(pointer: &str, source: S, marked: &Marked) {
        assert_eq!(
            source.acquire(&request(None)).map(|g| g.grant_id),
            Ok(41),
            "{pointer}: acquire"
        );
        assert_eq!(source.datacenter(), Some(5), "{pointer}: datacenter");
        assert_eq!(source.max_lead_ms(), Some(60_000), "{pointer}: max_lead_ms");
        let before = marked.released.lock().unwrap().len();
        source.release(&grant());
        assert_eq!(
            marked.released.lock().unwrap().len(),
            before + 1,
            "{pointer}: release"
        );
    }

    #[test]
    fn pointers_forward_every_method() {
        let marked = Arc::new(Marked::default());
        answers_as_marked("Arc<Marked>", Arc::clone(&marked), &marked);
        let shared: Arc<dyn GrantSource> = marked.clone();
        answers_as_marked("Arc<dyn GrantSource>", shared, &marked);
        let boxed: Box<dyn GrantSource> = Box::new(Arc::clone(&marked));
        answers_as_marked("Box<dyn GrantSource>", boxed, &marked);
        let nested: Arc<Box<dyn GrantSource>> = Arc::new(Box::new(Arc::clone(&marked)));
        answers_as_marked("Arc<Box<dyn GrantSource>>", nested, &marked);
        answers_as_marked("Box<Arc<Marked>>", Box::new(Arc::clone(&marked)), &marked);
    }

    #[test]
    fn namespaces_are_checked() {
        for good in [
            "ns",
            "orders-v1",
            "a.b:c/d_e",
            &"x".repeat(NAMESPACE_MAX_LEN),
        ] {
            assert_eq!(check_namespace(good).map_err(|e| e.to_string()), Ok(()));
        }
        for (bad, needle) in [
            ("", "empty"),
            ("a\0b", "contains"),
            ("a{b}", "contains"),
            ("caf\u{e9}", "contains"),
            ("a b", "contains"),
            (&"x".repeat(NAMESPACE_MAX_LEN + 1), "bytes long"),
        ] {
            let e = check_namespace(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
            assert!(e.message().contains(needle), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_good_grant_passes() {
        assert_eq!(grant().validate(&request(None)), Ok(()));
        assert_eq!(grant().validate(&request(Some(1))), Ok(()));
    }

    #[test]
    fn a_grant_outside_the_datacenter_is_refused() {
        // 12 / 3 / 4 with 1 datacenter bit: workers 0-3 are datacenter 0,
        // 4-7 datacenter 1.
        let mut r = request(None);
        r.layout = r.layout.with_datacenter_bits(1).unwrap();
        let g = |worker| Grant { worker, ..grant() };
        assert_eq!(g(3).validate_in(&r, Some(0)), Ok(()));
        assert_eq!(g(4).validate_in(&r, Some(1)), Ok(()));
        assert_eq!(g(4).validate_in(&r, None), Ok(()));
        let err = g(4).validate_in(&r, Some(0)).unwrap_err();
        assert!(
            err.0
                .contains("worker 4 is in datacenter 1, this generator is in datacenter 0"),
            "{err}"
        );
        assert!(g(3).validate_in(&r, Some(1)).is_err());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(Grant, Option<u32>, &str)> = vec![
            (
                Grant {
                    namespace: "other".into(),
                    ..grant()
                },
                None,
                "namespace",
            ),
            (
                Grant {
                    incarnation: 8,
                    ..grant()
                },
                None,
                "incarnation",
            ),
            (
                Grant {
                    worker: 8,
                    ..grant()
                },
                None,
                "worker 8 does not fit",
            ),
            (grant(), Some(2), "renewal asked for worker 2"),
            (
                Grant {
                    start: 150,
                    ..grant()
                },
                None,
                "not before end",
            ),
            (
                Grant {
                    end: 99,
                    start: 100,
                    ..grant()
                },
                None,
                "not before end",
            ),
            (
                Grant {
                    end: 4097,
                    ..grant()
                },
                None,
                "limit",
            ),
            (
                Grant {
                    start: 99,
                    ..grant()
                },
                None,
                "not_before",
            ),
        ];
        for (g, worker, needle) in cases {
            let err = g.validate(&request(worker)).unwrap_err();
            assert!(err.0.contains(needle), "{err} lacks {needle}");
        }
    }
}
