//! Fuzz harness for the C ABI's generator entry point: a
//! `grantid_generator_options` with arbitrary fields and a grant callback
//! that fills `grantid_grant` with arbitrary contents (any namespace or NULL,
//! any worker, incarnation and interval, a reason with no NUL). The
//! generator answers a status (never `GRANTID_PANIC`) and issues only IDs
//! inside the grant it was given, when that grant is valid.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

use grantid_ffi::{
    grantid_generator, grantid_generator_free, grantid_generator_new, grantid_generator_options,
    grantid_generator_options_init, grantid_grant, grantid_grant_request, grantid_layout,
    grantid_next_id, grantid_status,
};

#[derive(Debug, Clone, bolero::TypeGenerator)]
struct Input {
    /// Keep the layout valid and the answer a grant, so that the generator
    /// starts and issues.
    plausible: bool,
    bits: (u8, u8, u8),
    epoch_ms: u64,
    tick_ms: u64,
    max_drift_ms: u64,
    max_batch: usize,
    shards: usize,
    grant_duration_ms: u64,
    horizon_ms: u64,
    fork_policy: u32,
    answer: c_int,
    namespace: NamespaceChoice,
    worker: u32,
    same_incarnation: bool,
    start: Option<u64>,
    len: u64,
    reason_byte: u8,
}

#[derive(Debug, Clone, Copy, bolero::TypeGenerator)]
enum NamespaceChoice {
    Request,
    Other,
    Null,
}

/// The grant the callback gave last, as Rust values.
#[derive(Debug, Clone, Copy)]
struct Given {
    worker: u32,
    start: u64,
    end: u64,
}

struct Script {
    input: Input,
    given: Mutex<Vec<Given>>,
}

unsafe extern "C" fn grant(
    user: *mut c_void,
    request: *const grantid_grant_request,
    out: *mut grantid_grant,
) -> c_int {
    // SAFETY: `user` is the `Script` passed in the options, alive until
    // `grantid_generator_free` returns; `request` and `out` are valid during
    // the call per the header.
    let (script, request, out) = unsafe { (&*(user as *const Script), &*request, &mut *out) };
    let input = &script.input;
    out.namespace_ = match input.namespace {
        NamespaceChoice::Request => request.namespace_,
        NamespaceChoice::Other => c"someone-else".as_ptr(),
        NamespaceChoice::Null => std::ptr::null(),
    };
    out.worker = input.worker % 4;
    out.incarnation = request.incarnation ^ u64::from(!input.same_incarnation);
    out.grant_id = 7;
    out.start = input.start.unwrap_or(request.now.max(request.not_before));
    out.end = out.start.saturating_add(input.len % 10_000);
    out.reason = [input.reason_byte as c_char; grantid_ffi::GRANTID_REASON_LEN];
    script.given.lock().unwrap().push(Given {
        worker: out.worker,
        start: out.start,
        end: out.end,
    });
    // OK, LOST, UNAVAILABLE, or a value the header does not define.
    match input.answer.rem_euclid(4) {
        3 => 77,
        answer => answer,
    }
}

#[test]
fn ffi_generator_callback() {
    bolero::check!().with_type::<Input>().for_each(|input| {
        let mut input = input.clone();
        if input.plausible {
            // The clock (the system's) lies inside the timestamp field.
            input.bits = (
                31 + input.bits.0 % 11,
                2 + input.bits.1 % 9,
                1 + input.bits.2 % 12,
            );
            input.epoch_ms = grantid::DEFAULT_EPOCH_MS - input.epoch_ms % (1 << 30);
            input.tick_ms = 1 + input.tick_ms % 100;
            // A valid grant (the worker and length stay arbitrary).
            (input.answer, input.namespace) = (0, NamespaceChoice::Request);
            (input.same_incarnation, input.start) = (true, None);
        }
        let input = &input;
        let script = Script {
            input: input.clone(),
            given: Mutex::new(Vec::new()),
        };
        // SAFETY: an all-zero options struct is a valid starting point
        // (pointers NULL, callbacks None); `_init` then fills the defaults.
        let mut options: grantid_generator_options = unsafe { std::mem::zeroed() };
        // SAFETY: `options` is writable for its size.
        let status = unsafe {
            grantid_generator_options_init(&mut options, size_of::<grantid_generator_options>())
        };
        assert_eq!(status, grantid_status::GRANTID_OK);
        options.namespace_ = c"fuzz".as_ptr();
        options.layout = grantid_layout {
            timestamp_bits: input.bits.0,
            worker_bits: input.bits.1,
            sequence_bits: input.bits.2,
            datacenter_bits: 0,
            epoch_ms: input.epoch_ms,
            tick_ms: input.tick_ms,
        };
        options.max_wait_ms = 2;
        if !input.plausible {
            // Arbitrary fields; a plausible input keeps the defaults.
            options.max_drift_ms = input.max_drift_ms;
            options.max_batch = input.max_batch;
            options.shards = input.shards;
            options.grant_duration_ms = input.grant_duration_ms;
            options.horizon_ms = input.horizon_ms;
            options.fork_policy = input.fork_policy;
        }
        options.startup_timeout_ms = 20;
        options.backoff_min_ms = 1;
        options.backoff_max_ms = 2;
        options.grant = Some(grant);
        options.user_data = &script as *const Script as *mut c_void;
        let mut generator: *mut grantid_generator = std::ptr::null_mut();
        // SAFETY: valid options (callback and user data outlive the
        // generator: it is freed below) and a live local.
        let status = unsafe { grantid_generator_new(&options, &mut generator) };
        assert_ne!(status, grantid_status::GRANTID_PANIC);
        if status != grantid_status::GRANTID_OK {
            assert!(generator.is_null());
            return;
        }
        let layout = grantid::Layout::with_all(
            input.bits.0,
            input.bits.1,
            input.bits.2,
            input.epoch_ms,
            input.tick_ms,
        )
        .expect("a generator started on an invalid layout");
        for _ in 0..3 {
            let mut id = 0;
            // SAFETY: a live handle and a live local.
            let status = unsafe { grantid_next_id(generator, &mut id) };
            assert_ne!(status, grantid_status::GRANTID_PANIC);
            if status == grantid_status::GRANTID_OK {
                let d = layout.decode(id).unwrap();
                let given = script.given.lock().unwrap();
                assert!(
                    given.iter().any(|g| u64::from(g.worker) == d.worker
                        && g.start <= d.timestamp
                        && d.timestamp < g.end),
                    "ID {id} ({d:?}) outside every grant given: {given:?}"
                );
                assert!(
                    input.same_incarnation
                        && !matches!(
                            input.namespace,
                            NamespaceChoice::Null | NamespaceChoice::Other
                        )
                );
            }
        }
        // SAFETY: the handle made above, freed once.
        unsafe { grantid_generator_free(generator) };
    });
}
