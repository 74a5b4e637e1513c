/*
 * A test authority in C: worker leases and a high-water mark per worker,
 * kept in memory shared across fork() (so a child and its parent ask the
 * same authority), guarded by a process-shared mutex. `mode` makes it
 * misbehave on purpose.
 */
#ifndef GRANTID_TEST_AUTHORITY_H
#define GRANTID_TEST_AUTHORITY_H

#include <stdint.h>
#include <pthread.h>

#include "grantid.h"

#define TEST_AUTHORITY_WORKERS 64

enum test_authority_mode {
    AUTH_NORMAL = 0,
    AUTH_LOST,            /* every request: GRANTID_GRANT_LOST with a reason */
    AUTH_UNAVAILABLE,     /* every request: GRANTID_GRANT_UNAVAILABLE with a reason */
    AUTH_GARBAGE_RC,      /* returns 42 */
    AUTH_BAD_NAMESPACE,   /* a grant for another namespace */
    AUTH_BAD_INCARNATION, /* a grant for another incarnation */
    AUTH_BAD_WORKER,      /* a worker outside the layout */
    AUTH_EMPTY_INTERVAL,  /* end == start */
    AUTH_NULL_NAMESPACE,  /* grant.namespace left NULL */
    AUTH_LOSE_RENEWAL     /* first grant fine, then every request is lost */
};

typedef struct test_worker {
    uint64_t holder;
    uint64_t lease_expiry;
    uint64_t high_water;
    uint64_t fencing;
} test_worker;

typedef struct test_authority {
    pthread_mutex_t lock;
    int mode;
    uint64_t calls;
    uint64_t grants;
    uint64_t releases;
    uint64_t frees;
    uint64_t lost_calls;
    uint32_t lost_worker;
    char lost_reason[256];
    test_worker workers[TEST_AUTHORITY_WORKERS];
} test_authority;

/* A zeroed authority in MAP_SHARED memory. */
test_authority *test_authority_new(int mode);
/* Unmaps it (not the free_user_data callback: see test_authority_count_free). */
void test_authority_destroy(test_authority *a);

int test_authority_grant(void *user_data, const grantid_grant_request *req, grantid_grant *out);
void test_authority_release(void *user_data, const grantid_grant *last);
void test_authority_count_free(void *user_data);
void test_authority_lease_lost(void *user_data, uint32_t worker, const char *reason);

/* Options for `a` with short timings; namespace "test-v1". */
void test_options(grantid_generator_options *o, test_authority *a);

uint64_t test_authority_get(test_authority *a, const uint64_t *field);

#endif
