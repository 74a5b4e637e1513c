/*
 * grantid_generator_new_url with the file authority: two generators on one
 * state file get disjoint IDs; bad URLs and misuse give clear statuses.
 */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static unsigned frees = 0;
static int never_called(void *user_data, const grantid_grant_request *req, grantid_grant *out) {
    (void)user_data;
    (void)req;
    (void)out;
    return GRANTID_GRANT_UNAVAILABLE;
}
static void count_free(void *user_data) {
    (void)user_data;
    frees++;
}

int main(void) {
    char dir[] = "/tmp/grantid-ffi-url-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    char url[320], state[256];
    snprintf(state, sizeof state, "%s/state.json", dir);
    snprintf(url, sizeof url, "file:%s", state);

    grantid_generator_options o;
    grantid_generator_options_default(&o);
    o.namespace_ = "url-test-v1";
    o.startup_timeout_ms = 5000;
    o.free_user_data = count_free;
    o.user_data = &frees;

    grantid_generator *g1 = NULL, *g2 = NULL;
    CHECK_OK(grantid_generator_new_url(&o, url, &g1));
    CHECK_OK(grantid_generator_new_url(&o, url, &g2));
    if (g1 == NULL || g2 == NULL) {
        CHECK_DONE("test_url");
    }
    enum { N = 5000 };
    static uint64_t ids[2 * N];
    CHECK_OK(grantid_next_ids(g1, ids, N));
    CHECK_OK(grantid_next_ids(g2, ids + N, N));
    grantid_generator_stats s1, s2;
    CHECK_OK(grantid_stats(g1, &s1));
    CHECK_OK(grantid_stats(g2, &s2));
    CHECK(s1.has_worker && s2.has_worker && s1.worker != s2.worker);
    qsort(ids, 2 * N, sizeof *ids, cmp_u64);
    size_t dups = 0;
    for (size_t i = 1; i < 2 * N; i++) {
        dups += ids[i] == ids[i - 1];
    }
    CHECK(dups == 0);
    grantid_generator_free(g1);
    grantid_generator_free(g2);
    CHECK(frees == 2);

    grantid_generator *g = NULL;
    CHECK_STATUS(grantid_generator_new_url(&o, "nope://x", &g), GRANTID_INVALID_ARGUMENT);
    CHECK_STATUS(grantid_generator_new_url(&o, NULL, &g), GRANTID_NULL_ARGUMENT);
    CHECK_MESSAGE_HAS("url");
    CHECK_STATUS(grantid_generator_new_url(NULL, url, &g), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_generator_new_url(&o, url, NULL), GRANTID_NULL_ARGUMENT);
    grantid_generator_options with_cb = o;
    with_cb.grant = never_called; /* refused before any call */
    CHECK_STATUS(grantid_generator_new_url(&with_cb, url, &g), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("options.grant");
    CHECK(g == NULL);
    CHECK(frees == 6);

    /* Regions: datacenter=2 in the URL, the generator's own datacenter. */
    char dc_url[340];
    snprintf(dc_url, sizeof dc_url, "%s?datacenter=2", url);
    grantid_generator_options dc = o;
    dc.namespace_ = "url-test-regions-v1";
    dc.free_user_data = NULL;
    CHECK_OK(grantid_layout_set_datacenter_bits(&dc.layout, 5));
    dc.has_datacenter = true;
    dc.datacenter = 2;
    CHECK_OK(grantid_generator_new_url(&dc, dc_url, &g));
    if (g != NULL) {
        uint64_t id = 0;
        grantid_decoded d;
        CHECK_OK(grantid_next_id(g, &id));
        CHECK_OK(grantid_decode(g, id, &d));
        CHECK(d.datacenter == 2 && d.datacenter_worker < 32 && d.worker == 2 * 32 + d.datacenter_worker);
        grantid_generator_free(g);
        g = NULL;
    }
    dc.datacenter = 1;
    CHECK_STATUS(grantid_generator_new_url(&dc, dc_url, &g), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("authority grants the workers of datacenter 2");
    CHECK(g == NULL);

    unlink(state);
    char lock[300];
    snprintf(lock, sizeof lock, "%s.lock", state);
    unlink(lock);
    rmdir(dir);
    CHECK_DONE("test_url");
}
