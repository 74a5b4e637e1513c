//! `datacenter=N`: one datacenter's workers from any backend
//! (docs/AUTHORITIES.md, "Regions").
//!
//! The backend is shown the datacenter's part of the worker field as a
//! layout of its own: the same timestamp, sequence, epoch and tick, and
//! `worker_bits - datacenter_bits` worker bits. It chooses, leases and
//! fences workers `0 .. 2^(worker_bits - datacenter_bits)` as it always
//! does; this wrapper maps them to and from the worker values of datacenter
//! N (`N << (worker_bits - datacenter_bits) | w`). So every backend, present
//! or future, hands out only datacenter N's workers. The namespace is
//! registered in the store with the reduced layout and the split's
//! datacenter bits ([`Layout::datacenter_part`]): a generator that reaches
//! the same store without the split (even one whose worker bits equal the
//! split's per-datacenter bits), or with another split, asks with another
//! layout and is refused, never given the same backend workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use grantid::{Error, Grant, GrantError, GrantRequest, GrantSource, Layout};

use crate::kernel::{Authority, WorkerStatus};

/// A backend restricted to the workers of one datacenter.
pub(crate) struct Datacenter {
    inner: Box<dyn Authority>,
    datacenter: u32,
    /// The full layout of each namespace seen by `acquire`, so `release`
    /// can map a grant's worker back; shared by the sessions of one
    /// `crate::registry::open_sessions`, since a release may come on another session
    /// than the acquire.
    layouts: Arc<Mutex<HashMap<String, Layout>>>,
}

/// `backend`, restricted to `datacenter` when the URL names one.
pub(crate) fn restrict(backend: Box<dyn Authority>, datacenter: Option<u32>) -> Box<dyn Authority> {
    match datacenter {
        None => backend,
        Some(datacenter) => wrap(backend, datacenter, Arc::default()),
    }
}

/// Sessions of one backend, each restricted to `datacenter` when the URL
/// names one, sharing what they learn of the namespaces' layouts.
pub(crate) fn restrict_all(
    backends: Vec<Box<dyn Authority>>,
    datacenter: Option<u32>,
) -> Vec<Box<dyn Authority>> {
    let Some(datacenter) = datacenter else {
        return backends;
    };
    let layouts: Arc<Mutex<HashMap<String, Layout>>> = Arc::default();
    backends
        .into_iter()
        .map(|inner| wrap(inner, datacenter, Arc::clone(&layouts)))
        .collect()
}

fn wrap(
    inner: Box<dyn Authority>,
    datacenter: u32,
    layouts: Arc<Mutex<HashMap<String, Layout>>>,
) -> Box<dyn Authority> {
    Box::new(Datacenter {
        inner,
        datacenter,
        layouts,
    })
}

/// The layout the backend sees: the worker field without its datacenter
/// bits; or a refusal when `datacenter` does not fit `layout`.
fn local_layout(layout: &Layout, datacenter: u32) -> Result<Layout, GrantError> {
    if layout.datacenter_bits() == 0 {
        return Err(GrantError::Refused(format!(
            "the authority URL says datacenter={datacenter}, but the layout has no datacenter bits \
             (set datacenter_bits)"
        )));
    }
    if u64::from(datacenter) >= layout.datacenter_count() {
        return Err(GrantError::Refused(format!(
            "the authority URL's datacenter={datacenter} does not fit in the layout's {} \
             datacenter bits",
            layout.datacenter_bits()
        )));
    }
    layout
        .datacenter_part()
        .map_err(|e| GrantError::Refused(e.message().to_owned()))
}

impl Datacenter {
    /// The backend's worker for the full worker value `worker` of `layout`.
    fn local_worker(&self, layout: &Layout, worker: u32) -> Result<u32, GrantError> {
        let dc = layout.datacenter_of(u64::from(worker));
        if dc != u64::from(self.datacenter) {
            return Err(GrantError::Refused(format!(
                "worker {worker} is in datacenter {dc}, this authority grants datacenter {}",
                self.datacenter
            )));
        }
        let mask = (1u64 << layout.datacenter_worker_bits()) - 1;
        // Fits: masked to at most 32 bits.
        Ok((u64::from(worker) & mask) as u32)
    }
}

// Every method written out (`clippy::missing_trait_methods`): one the
// traits gain with a default must be forwarded or mapped here, or every
// backend behind `datacenter=N` would answer the default
// (`tests::every_method_reaches_the_backend`).
#[deny(clippy::missing_trait_methods)]
impl GrantSource for Datacenter {
    fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
        let layout = request.layout;
        let local = local_layout(&layout, self.datacenter)?;
        let worker = match request.worker {
            Some(w) => Some(self.local_worker(&layout, w)?),
            None => None,
        };
        let asked = GrantRequest {
            worker,
            layout: local,
            ..request.clone()
        };
        let mut grant = self.inner.acquire(&asked)?;
        if u64::from(grant.worker) >= local.worker_count() {
            return Err(GrantError::Invalid(format!(
                "the backend granted worker {}, outside the datacenter's {} worker bits",
                grant.worker,
                local.worker_bits()
            )));
        }
        let full = layout
            .worker_value(u64::from(self.datacenter), u64::from(grant.worker))
            .map_err(|e| GrantError::Invalid(e.message().to_owned()))?;
        // Fits: worker values have at most 32 bits.
        grant.worker = full as u32;
        if let Ok(mut layouts) = self.layouts.lock() {
            layouts.insert(request.namespace.clone(), layout);
        }
        Ok(grant)
    }

    fn release(&self, last: &Grant) {
        let layout = match self.layouts.lock() {
            Ok(layouts) => layouts.get(&last.namespace).copied(),
            Err(_) => None,
        };
        // A grant this wrapper never mapped is not released (best effort).
        if let Some(layout) = layout
            && let Ok(worker) = self.local_worker(&layout, last.worker)
        {
            self.inner.release(&Grant {
                worker,
                ..last.clone()
            });
        }
    }

    fn max_lead_ms(&self) -> Option<u64> {
        self.inner.max_lead_ms()
    }

    fn datacenter(&self) -> Option<u32> {
        Some(self.datacenter)
    }
}

#[deny(clippy::missing_trait_methods)]
impl Authority for Datacenter {
    fn init(&self) -> Result<String, Error> {
        self.inner.init()
    }

    /// The backend's records: workers within the datacenter, in the
    /// reduced layout the namespace is registered with.
    fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
        self.inner.status(namespace)
    }

    fn init_new_deployment(&self) -> Result<String, Error> {
        self.inner.init_new_deployment()
    }

    fn fence(&self) -> Result<String, Error> {
        self.inner.fence()
    }

    fn caveats(&self) -> Result<Vec<String>, Error> {
        self.inner.caveats()
    }

    fn worker_status(&self, namespace: &str, worker: u32) -> Result<Option<WorkerStatus>, Error> {
        self.inner.worker_status(namespace, worker)
    }

    /// In the backend's terms: the datacenter's worker in the reduced
    /// layout. A request this wrapper refuses never reaches the backend:
    /// no claim of it is weighed (`Ok(None)`).
    fn renewal_high_water(&self, request: &GrantRequest) -> Result<Option<u64>, Error> {
        let Some(worker) = request.worker else {
            return Ok(None);
        };
        let (Ok(layout), Ok(worker)) = (
            local_layout(&request.layout, self.datacenter),
            self.local_worker(&request.layout, worker),
        ) else {
            return Ok(None);
        };
        self.inner.renewal_high_water(&GrantRequest {
            worker: Some(worker),
            layout,
            ..request.clone()
        })
    }

    fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
        self.inner.quarantine()
    }

    fn lift_quarantine(&self) -> Result<String, Error> {
        self.inner.lift_quarantine()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use grantid::ErrorKind;

    use super::*;

    /// A backend whose every method answers something other than the
    /// traits' defaults.
    #[derive(Debug, Default)]
    struct Marked {
        released: Arc<AtomicU32>,
    }

    #[deny(clippy::missing_trait_methods)]
    impl GrantSource for Marked {
        fn acquire(&self, request: &GrantRequest) -> Result<Grant, GrantError> {
            Ok(Grant {
                namespace: request.namespace.clone(),
                worker: 3,
                incarnation: request.incarnation,
                grant_id: 41,
                start: request.not_before,
                end: request.not_before + request.duration,
            })
        }
        fn datacenter(&self) -> Option<u32> {
            Some(9)
        }
        fn release(&self, last: &Grant) {
            self.released.store(last.worker, Ordering::SeqCst);
        }
        fn max_lead_ms(&self) -> Option<u64> {
            Some(60_000)
        }
    }

    #[deny(clippy::missing_trait_methods)]
    impl Authority for Marked {
        fn init(&self) -> Result<String, Error> {
            Ok("init".into())
        }
        fn status(&self, namespace: Option<&str>) -> Result<Vec<WorkerStatus>, Error> {
            Err(Error::new(
                ErrorKind::Unavailable,
                format!("status of {namespace:?}"),
            ))
        }
        fn init_new_deployment(&self) -> Result<String, Error> {
            Ok("new deployment".into())
        }
        fn fence(&self) -> Result<String, Error> {
            Ok("fenced".into())
        }
        fn caveats(&self) -> Result<Vec<String>, Error> {
            Ok(vec!["a limit".into()])
        }
        fn worker_status(
            &self,
            namespace: &str,
            worker: u32,
        ) -> Result<Option<WorkerStatus>, Error> {
            Err(Error::new(
                ErrorKind::Unavailable,
                format!("worker {worker} of {namespace}"),
            ))
        }
        fn renewal_high_water(&self, request: &GrantRequest) -> Result<Option<u64>, Error> {
            Ok(request.worker.map(u64::from))
        }
        fn quarantine(&self) -> Result<Option<grantid::rule::Quarantine>, Error> {
            Ok(Some(grantid::rule::Quarantine {
                until_ms: 9,
                since_ms: 8,
                reason: "marked".into(),
            }))
        }
        fn lift_quarantine(&self) -> Result<String, Error> {
            Ok("lifted".into())
        }
    }

    #[test]
    fn every_method_reaches_the_backend() {
        let marked = Marked::default();
        let released = Arc::clone(&marked.released);
        let dc = restrict(Box::new(marked), Some(2));
        let layout = Layout::new(41, 10, 12)
            .unwrap()
            .with_datacenter_bits(5)
            .unwrap();
        let request = GrantRequest {
            namespace: "ns".into(),
            incarnation: 7,
            request_id: 1,
            worker: None,
            not_before: 100,
            now: 100,
            duration: 50,
            layout,
        };
        let grant = dc.acquire(&request).unwrap();
        // Backend worker 3 of datacenter 2: 2 << 5 | 3.
        assert_eq!((grant.worker, grant.grant_id), (67, 41));
        dc.release(&grant);
        assert_eq!(released.load(Ordering::SeqCst), 3, "release");
        assert_eq!(dc.datacenter(), Some(2), "datacenter: the URL's");
        assert_eq!(dc.max_lead_ms(), Some(60_000), "max_lead_ms");
        assert_eq!(dc.init().unwrap(), "init");
        assert_eq!(
            dc.status(Some("ns")).unwrap_err().message(),
            "status of Some(\"ns\")"
        );
        assert_eq!(dc.init_new_deployment().unwrap(), "new deployment");
        assert_eq!(dc.fence().unwrap(), "fenced");
        assert_eq!(dc.caveats().unwrap(), ["a limit"]);
        assert_eq!(
            dc.worker_status("ns", 4).unwrap_err().message(),
            "worker 4 of ns"
        );
        // Datacenter 2's worker 67 is the backend's worker 3.
        let renewal = GrantRequest {
            worker: Some(67),
            not_before: 200,
            ..GrantRequest::clone(&request)
        };
        assert_eq!(dc.renewal_high_water(&renewal).unwrap(), Some(3));
        let elsewhere = GrantRequest {
            worker: Some(3),
            ..renewal
        };
        assert_eq!(dc.renewal_high_water(&elsewhere).unwrap(), None);
        assert_eq!(dc.quarantine().unwrap().unwrap().reason, "marked");
        assert_eq!(dc.lift_quarantine().unwrap(), "lifted");
    }
}
