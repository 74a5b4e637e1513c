/*
 * A fork() child of a process with a running generator never repeats the
 * parent's IDs: on its first call it re-activates (fresh incarnation, new
 * grant from the same, process-shared, authority) before issuing.
 */
#define _DEFAULT_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "authority.h"
#include "check.h"

#define BEFORE 20000
#define CHILD 20000
#define AFTER 20000

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int take(grantid_generator *gen, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (grantid_next_id(gen, &out[i]) != GRANTID_OK) {
            fprintf(stderr, "[%d] next_id: %s\n", (int)getpid(), grantid_last_error_message());
            return -1;
        }
    }
    return 0;
}

int main(void) {
    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    grantid_generator *gen = NULL;
    CHECK_OK(grantid_generator_new(&o, &gen));
    if (gen == NULL) {
        return 1;
    }
    uint64_t *ids = calloc(BEFORE + CHILD + AFTER, sizeof *ids);
    CHECK(take(gen, ids, BEFORE) == 0);
    grantid_generator_stats parent_stats;
    CHECK_OK(grantid_stats(gen, &parent_stats));

    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        uint64_t *mine = ids + BEFORE;
        int rc = take(gen, mine, CHILD);
        grantid_generator_stats st;
        if (rc == 0 && grantid_stats(gen, &st) == GRANTID_OK) {
            /* The child runs under a new incarnation after one re-activation. */
            if (st.incarnation == parent_stats.incarnation || st.fork_reactivations != 1) {
                fprintf(stderr, "child: incarnation %" PRIx64 " (parent %" PRIx64 "), %" PRIu64
                                " re-activations\n",
                        st.incarnation, parent_stats.incarnation, st.fork_reactivations);
                rc = -1;
            }
        } else {
            rc = -1;
        }
        size_t len = CHILD * sizeof *mine;
        const char *p = (const char *)mine;
        while (rc == 0 && len > 0) {
            ssize_t w = write(fds[1], p, len);
            if (w <= 0) {
                rc = -1;
                break;
            }
            p += w;
            len -= (size_t)w;
        }
        close(fds[1]);
        grantid_generator_free(gen);
        _exit(rc == 0 ? 0 : 1);
    }
    CHECK(pid > 0);
    close(fds[1]);
    /* The parent keeps issuing while the child runs. */
    CHECK(take(gen, ids + BEFORE + CHILD, AFTER) == 0);
    size_t got = 0;
    char *p = (char *)(ids + BEFORE);
    while (got < CHILD * sizeof *ids) {
        ssize_t r = read(fds[0], p + got, CHILD * sizeof *ids - got);
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(got == CHILD * sizeof *ids);

    grantid_generator_stats st;
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.fork_reactivations == 0);
    CHECK(st.incarnation == parent_stats.incarnation);

    size_t total = BEFORE + CHILD + AFTER, dups = 0;
    qsort(ids, total, sizeof *ids, cmp_u64);
    for (size_t i = 1; i < total; i++) {
        dups += ids[i] == ids[i - 1];
    }
    CHECK(ids[0] != 0);
    CHECK(dups == 0);
    printf("test_fork: parent %d + child %d + parent %d IDs, %zu duplicates\n", BEFORE, CHILD,
           AFTER, dups);
    free(ids);
    grantid_generator_free(gen);
    test_authority_destroy(a);
    CHECK_DONE("test_fork");
}
