/* Minimal assertion helpers for the C tests of grantid. */
#ifndef GRANTID_TEST_CHECK_H
#define GRANTID_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grantid.h"

static int check_failures = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

/* Checks that `call` returns `want`; prints both statuses and the last error. */
#define CHECK_STATUS(call, want)                                                 \
    do {                                                                         \
        grantid_status got_ = (call);                                            \
        if (got_ != (grantid_status)(want)) {                                    \
            fprintf(stderr, "%s:%d: %s returned %u (%s), wanted %u (%s); last error: %s\n", \
                    __FILE__, __LINE__, #call, (unsigned)got_,                   \
                    grantid_status_message(got_), (unsigned)(want),              \
                    grantid_status_message(want), grantid_last_error_message()); \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, GRANTID_OK)

/* Checks that the calling thread's last error message contains `needle`. */
#define CHECK_MESSAGE_HAS(needle)                                                \
    do {                                                                         \
        const char *msg_ = grantid_last_error_message();                         \
        if (strstr(msg_, (needle)) == NULL) {                                    \
            fprintf(stderr, "%s:%d: last error \"%s\" lacks \"%s\"\n", __FILE__, \
                    __LINE__, msg_, (needle));                                   \
            check_failures++;                                                    \
        }                                                                        \
    } while (0)

#define CHECK_DONE(name)                                                         \
    do {                                                                         \
        if (check_failures) {                                                    \
            fprintf(stderr, "%s: %d check(s) failed\n", (name), check_failures); \
            return 1;                                                            \
        }                                                                        \
        printf("%s: ok\n", (name));                                              \
        return 0;                                                                \
    } while (0)

#endif
