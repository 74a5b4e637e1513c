/*
 * THREADS threads each take PER_THREAD IDs from one generator with
 * grantid_next_id: every ID is unique and each thread's IDs increase.
 * Usage: test_threads [threads] [ids_per_thread]   (default 4 x 1000000)
 */
#define _DEFAULT_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "authority.h"
#include "check.h"

typedef struct worker_arg {
    grantid_generator *gen;
    uint64_t *ids;
    size_t n;
    size_t failed;
    size_t not_increasing;
} worker_arg;

static void *take_ids(void *p) {
    worker_arg *w = p;
    uint64_t prev = 0;
    for (size_t i = 0; i < w->n; i++) {
        grantid_status s = grantid_next_id(w->gen, &w->ids[i]);
        if (s != GRANTID_OK) {
            if (w->failed++ == 0) {
                fprintf(stderr, "next_id: %s\n", grantid_last_error_message());
            }
            w->ids[i] = 0;
            continue;
        }
        if (w->ids[i] <= prev) {
            w->not_increasing++;
        }
        prev = w->ids[i];
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t threads = argc > 1 ? strtoul(argv[1], NULL, 10) : 4;
    size_t per = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000000;
    if (threads == 0 || threads > 64 || per == 0) {
        fprintf(stderr, "usage: test_threads [1..64 threads] [ids per thread]\n");
        return 2;
    }
    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    /* Waits are allowed (a loaded machine); failures are not. */
    o.max_wait_ms = 2000;
    grantid_generator *gen = NULL;
    CHECK_OK(grantid_generator_new(&o, &gen));
    if (gen == NULL) {
        return 1;
    }
    uint64_t *all = malloc(threads * per * sizeof *all);
    worker_arg args[64];
    pthread_t tids[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t t = 0; t < threads; t++) {
        args[t] = (worker_arg){gen, all + t * per, per, 0, 0};
        CHECK(pthread_create(&tids[t], NULL, take_ids, &args[t]) == 0);
    }
    for (size_t t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        CHECK(args[t].failed == 0);
        CHECK(args[t].not_increasing == 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

    size_t total = threads * per, dups = 0;
    qsort(all, total, sizeof *all, cmp_u64);
    for (size_t i = 1; i < total; i++) {
        if (all[i] == all[i - 1] && all[i] != 0) {
            dups++;
        }
    }
    CHECK(all[0] != 0);
    CHECK(dups == 0);
    grantid_generator_stats st;
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.ids_issued == total);
    printf("test_threads: %zu threads x %zu IDs in %.3f s (%.1f M IDs/s), %zu duplicates, %" PRIu64
           " waits\n",
           threads, per, secs, (double)total / secs / 1e6, dups, st.waits);
    free(all);
    grantid_generator_free(gen);
    test_authority_destroy(a);
    CHECK_DONE("test_threads");
}
