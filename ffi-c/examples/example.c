/*
 * grantid from C: a generator whose authority is a C callback.
 *
 * The authority here keeps, in this process's memory, one worker lease and
 * the worker's high-water mark: every grant starts at or after the end of
 * the previous one, so intervals never overlap. (It forgets everything when
 * the process exits: a real authority keeps the high-water mark durably, in
 * a file or a database, and serves every process of the fleet.)
 *
 * Build and run: see ffi-c/README.md (`make -C ffi-c example`).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "grantid.h"

typedef struct authority {
    pthread_mutex_t lock;
    uint64_t holder;     /* incarnation holding worker 0, 0 if none */
    uint64_t high_water; /* end of every interval granted so far (ticks) */
    uint64_t grants;
} authority;

/* Runs on the generator's renewal thread. */
static int grant(void *user_data, const grantid_grant_request *req, grantid_grant *out) {
    authority *a = user_data;
    int rc = GRANTID_GRANT_OK;
    pthread_mutex_lock(&a->lock);
    if (a->holder != 0 && a->holder != req->incarnation) {
        snprintf(out->reason, sizeof out->reason, "worker 0 is held by incarnation %" PRIx64,
                 a->holder);
        rc = GRANTID_GRANT_LOST;
    } else {
        uint64_t start = a->high_water;
        if (req->now > start) start = req->now;
        if (req->not_before > start) start = req->not_before;
        uint64_t limit = (uint64_t)1 << req->layout.timestamp_bits;
        uint64_t end = start + req->duration < limit ? start + req->duration : limit;
        if (start >= end) {
            snprintf(out->reason, sizeof out->reason, "the timestamp field is used up");
            rc = GRANTID_GRANT_LOST;
        } else {
            a->high_water = end; /* moved before answering */
            a->holder = req->incarnation;
            a->grants++;
            out->namespace_ = req->namespace_;
            out->worker = 0;
            out->incarnation = req->incarnation;
            out->grant_id = a->grants;
            out->start = start;
            out->end = end;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

/* Runs on the thread that closes the generator. */
static void release(void *user_data, const grantid_grant *last) {
    authority *a = user_data;
    pthread_mutex_lock(&a->lock);
    if (a->holder == last->incarnation) a->holder = 0;
    pthread_mutex_unlock(&a->lock);
}

static void lease_lost(void *user_data, uint32_t worker, const char *reason) {
    (void)user_data;
    fprintf(stderr, "lost worker %u: %s\n", worker, reason);
}

static void free_authority(void *user_data) {
    authority *a = user_data;
    pthread_mutex_destroy(&a->lock);
    free(a);
}

static int fail(const char *what, grantid_status s) {
    fprintf(stderr, "%s: %s (%s)\n", what, grantid_status_message(s), grantid_last_error_message());
    return 1;
}

int main(void) {
    authority *a = calloc(1, sizeof *a);
    if (a == NULL) return 1;
    pthread_mutex_init(&a->lock, NULL);

    grantid_generator_options o;
    grantid_generator_options_default(&o);
    o.namespace_ = "example-v1";
    o.grant = grant;
    o.release = release;
    o.on_lease_lost = lease_lost;
    o.user_data = a;              /* owned by the generator from here on */
    o.free_user_data = free_authority;

    grantid_generator *gen;
    grantid_status s = grantid_generator_new(&o, &gen);
    if (s != GRANTID_OK) return fail("grantid_generator_new", s);

    printf("grantid %s\n", grantid_version());
    for (int i = 0; i < 5; i++) {
        uint64_t id;
        grantid_decoded d;
        if ((s = grantid_next_id(gen, &id)) != GRANTID_OK) return fail("grantid_next_id", s);
        if ((s = grantid_decode(gen, id, &d)) != GRANTID_OK) return fail("grantid_decode", s);
        printf("%" PRIu64 "  timestamp=%" PRIu64 " worker=%" PRIu64 " sequence=%" PRIu64
               " unix_ms=%" PRIu64 "\n",
               id, d.timestamp, d.worker, d.sequence, d.unix_ms);
    }
    uint64_t batch[1000];
    if ((s = grantid_next_ids(gen, batch, 1000)) != GRANTID_OK) return fail("grantid_next_ids", s);
    printf("batch of 1000: %" PRIu64 " .. %" PRIu64 "\n", batch[0], batch[999]);

    uint64_t parsed;
    if ((s = grantid_parse_id("20497", &parsed)) != GRANTID_OK) return fail("grantid_parse_id", s);
    grantid_generator_stats st;
    if ((s = grantid_stats(gen, &st)) != GRANTID_OK) return fail("grantid_stats", s);
    printf("issued=%" PRIu64 " grants=%" PRIu64 " worker=%u grant_end=%" PRIu64 "\n",
           st.ids_issued, st.grants_acquired, st.worker, st.grant_end);

    grantid_generator_close(gen);
    if ((s = grantid_next_id(gen, &parsed)) != GRANTID_CLOSED) return fail("next_id after close", s);
    grantid_generator_free(gen); /* calls free_authority */
    return 0;
}
