/*
 * ABI growth: grantid_generator_options and grantid_generator_stats carry
 * struct_size, so a caller compiled against an older header (a smaller
 * struct) or a newer one (a larger struct) works with this library; and the
 * header's version macros agree with the library's.
 */
#include <stdint.h>
#include <string.h>

#include "authority.h"
#include "check.h"

/* What a caller built against a newer header sees: this version's struct
 * followed by fields this library does not know. */
typedef struct newer_options {
    grantid_generator_options v1;
    uint64_t future_field;
} newer_options;

typedef struct newer_stats {
    grantid_generator_stats v1;
    uint64_t future_counter;
} newer_stats;

int main(void) {
    /* Version macros: the header's and the linked library's agree. */
    CHECK(strcmp(GRANTID_VERSION, grantid_version()) == 0);
    CHECK(GRANTID_VERSION_NUMBER == grantid_version_number());
    CHECK(GRANTID_VERSION_NUMBER ==
          GRANTID_VERSION_MAJOR * 1000000 + GRANTID_VERSION_MINOR * 1000 + GRANTID_VERSION_PATCH);
#if GRANTID_VERSION_NUMBER < 1000
#error "GRANTID_VERSION_NUMBER is usable in #if"
#endif

    /* The default macro records the caller's size. */
    grantid_generator_options o;
    memset(&o, 0xAB, sizeof o);
    CHECK_OK(grantid_generator_options_default(&o));
    CHECK(o.struct_size == sizeof o);
    CHECK(o.max_drift_ms == 100 && o.grant == NULL && o.user_data == NULL);

    /* A zeroed or too-small struct is refused, and nothing is written. */
    grantid_generator_options zero;
    memset(&zero, 0, sizeof zero);
    grantid_generator *gen = NULL;
    zero.namespace_ = "abi-v1";
    CHECK_STATUS(grantid_generator_new_url(&zero, "static:1", &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("struct_size");
    CHECK(gen == NULL);
    unsigned char small[16];
    memset(small, 0x5A, sizeof small);
    CHECK_STATUS(grantid_generator_options_init((grantid_generator_options *)small, sizeof small),
                 GRANTID_INVALID_ARGUMENT);
    CHECK(small[0] == 0x5A && small[15] == 0x5A);

    /* A newer caller: the unknown tail is zeroed by init and accepted
     * while zero; a value in it is refused (never silently ignored). */
    newer_options n;
    memset(&n, 0xAB, sizeof n);
    CHECK_OK(grantid_generator_options_init(&n.v1, sizeof n));
    CHECK(n.v1.struct_size == sizeof n && n.future_field == 0);
    n.v1.namespace_ = "abi-v1";
    n.future_field = 7;
    CHECK_STATUS(grantid_generator_new_url(&n.v1, "static:2", &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("newer header");
    CHECK(gen == NULL);
    n.future_field = 0;
    CHECK_OK(grantid_generator_new_url(&n.v1, "static:2", &gen));
    if (gen == NULL) {
        CHECK_DONE("test_abi");
    }
    uint64_t id;
    CHECK_OK(grantid_next_id(gen, &id));

    /* Stats: this version's size, a newer caller's (tail zeroed), and a
     * too-small one (refused, nothing written). */
    grantid_generator_stats st;
    memset(&st, 0xAB, sizeof st);
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.struct_size == sizeof st && st.ids_issued == 1 && st.has_worker && st.worker == 2);
    newer_stats ns;
    memset(&ns, 0xAB, sizeof ns);
    CHECK_OK(grantid_stats_sized(gen, &ns.v1, sizeof ns));
    CHECK(ns.v1.struct_size == sizeof ns.v1 && ns.future_counter == 0 && ns.v1.ids_issued == 1);
    memset(small, 0x5A, sizeof small);
    CHECK_STATUS(grantid_stats_sized(gen, (grantid_generator_stats *)small, sizeof small),
                 GRANTID_INVALID_ARGUMENT);
    CHECK(small[0] == 0x5A && small[15] == 0x5A);

    grantid_generator_free(gen);
    CHECK_DONE("test_abi");
}
