/* The test authority: see authority.h. */
#define _DEFAULT_SOURCE
#include "authority.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

test_authority *test_authority_new(int mode) {
    void *p = mmap(NULL, sizeof(test_authority), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    test_authority *a = p;
    memset(a, 0, sizeof *a);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(&a->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    a->mode = mode;
    return a;
}

void test_authority_destroy(test_authority *a) {
    pthread_mutex_destroy(&a->lock);
    munmap(a, sizeof *a);
}

uint64_t test_authority_get(test_authority *a, const uint64_t *field) {
    pthread_mutex_lock(&a->lock);
    uint64_t v = *field;
    pthread_mutex_unlock(&a->lock);
    return v;
}

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* The allocation rule: a lease per worker, start = max(high water, now,
 * not_before), end = start + duration capped at 2^timestamp_bits. */
static int allocate(test_authority *a, const grantid_grant_request *req, grantid_grant *out) {
    uint32_t count = 1u << (req->layout.worker_bits < 6 ? req->layout.worker_bits : 6);
    uint64_t limit = (uint64_t)1 << req->layout.timestamp_bits;
    uint32_t w = 0;
    if (req->has_worker) {
        w = req->worker;
        if (w >= count) {
            snprintf(out->reason, sizeof out->reason, "worker %u is unknown", w);
            return GRANTID_GRANT_LOST;
        }
        test_worker *rec = &a->workers[w];
        if (rec->holder != 0 && rec->holder != req->incarnation && rec->lease_expiry > req->now) {
            snprintf(out->reason, sizeof out->reason, "worker %u is held by another", w);
            return GRANTID_GRANT_LOST;
        }
    } else {
        for (w = 0; w < count; w++) {
            test_worker *rec = &a->workers[w];
            if (rec->holder == 0 || rec->holder == req->incarnation || rec->lease_expiry <= req->now) {
                break;
            }
        }
        if (w == count) {
            snprintf(out->reason, sizeof out->reason, "no free worker");
            return GRANTID_GRANT_LOST;
        }
    }
    test_worker *rec = &a->workers[w];
    uint64_t start = max3(rec->high_water, req->now, req->not_before);
    uint64_t end = start + req->duration;
    if (end > limit) {
        end = limit;
    }
    if (start >= end) {
        snprintf(out->reason, sizeof out->reason, "timestamp space used up");
        return GRANTID_GRANT_LOST;
    }
    rec->high_water = end;
    rec->holder = req->incarnation;
    rec->lease_expiry = end + 1000;
    rec->fencing++;
    out->namespace_ = req->namespace_;
    out->worker = w;
    out->incarnation = req->incarnation;
    out->grant_id = rec->fencing;
    out->start = start;
    out->end = end;
    a->grants++;
    return GRANTID_GRANT_OK;
}

int test_authority_grant(void *user_data, const grantid_grant_request *req, grantid_grant *out) {
    test_authority *a = user_data;
    pthread_mutex_lock(&a->lock);
    a->calls++;
    int rc = GRANTID_GRANT_UNAVAILABLE;
    switch (a->mode) {
    case AUTH_LOST:
        snprintf(out->reason, sizeof out->reason, "worker owned by test-peer");
        rc = GRANTID_GRANT_LOST;
        break;
    case AUTH_UNAVAILABLE:
        snprintf(out->reason, sizeof out->reason, "test authority is down");
        rc = GRANTID_GRANT_UNAVAILABLE;
        break;
    case AUTH_GARBAGE_RC:
        rc = 42;
        break;
    case AUTH_LOSE_RENEWAL:
        if (a->grants > 0) {
            snprintf(out->reason, sizeof out->reason, "taken over by test-peer");
            rc = GRANTID_GRANT_LOST;
            break;
        }
        rc = allocate(a, req, out);
        break;
    default:
        rc = allocate(a, req, out);
        if (rc != GRANTID_GRANT_OK) {
            break;
        }
        switch (a->mode) {
        case AUTH_BAD_NAMESPACE:
            out->namespace_ = "someone-else-v1";
            break;
        case AUTH_BAD_INCARNATION:
            out->incarnation ^= 1;
            break;
        case AUTH_BAD_WORKER:
            out->worker = 1u << req->layout.worker_bits;
            break;
        case AUTH_EMPTY_INTERVAL:
            out->end = out->start;
            break;
        case AUTH_NULL_NAMESPACE:
            out->namespace_ = NULL;
            break;
        default:
            break;
        }
    }
    pthread_mutex_unlock(&a->lock);
    return rc;
}

void test_authority_release(void *user_data, const grantid_grant *last) {
    test_authority *a = user_data;
    pthread_mutex_lock(&a->lock);
    if (last->worker < TEST_AUTHORITY_WORKERS && a->workers[last->worker].holder == last->incarnation) {
        a->workers[last->worker].holder = 0;
    }
    a->releases++;
    pthread_mutex_unlock(&a->lock);
}

void test_authority_count_free(void *user_data) {
    test_authority *a = user_data;
    pthread_mutex_lock(&a->lock);
    a->frees++;
    pthread_mutex_unlock(&a->lock);
}

void test_authority_lease_lost(void *user_data, uint32_t worker, const char *reason) {
    test_authority *a = user_data;
    pthread_mutex_lock(&a->lock);
    a->lost_calls++;
    a->lost_worker = worker;
    snprintf(a->lost_reason, sizeof a->lost_reason, "%s", reason);
    pthread_mutex_unlock(&a->lock);
}

void test_options(grantid_generator_options *o, test_authority *a) {
    grantid_generator_options_default(o);
    o->namespace_ = "test-v1";
    o->startup_timeout_ms = 2000;
    o->grant = test_authority_grant;
    o->release = test_authority_release;
    o->on_lease_lost = test_authority_lease_lost;
    o->user_data = a;
    o->free_user_data = test_authority_count_free;
}
