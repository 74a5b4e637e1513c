/*
 * The C API's contract: statuses and messages, layouts, parse, NULL for
 * every pointer argument, callback answers (lost / unavailable / garbage),
 * close and free safety, user_data ownership.
 */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "authority.h"
#include "check.h"

static void test_statuses(void) {
    CHECK(GRANTID_OK == 0);
    CHECK(GRANTID_NOT_YET_VALID == 1);
    CHECK(GRANTID_GRANT_EXHAUSTED == 2);
    CHECK(GRANTID_UNAVAILABLE == 3);
    CHECK(GRANTID_CAPACITY_EXHAUSTED == 4);
    CHECK(GRANTID_CLOCK_ROLLBACK == 5);
    CHECK(GRANTID_LEASE_LOST == 6);
    CHECK(GRANTID_INVALID_ARGUMENT == 7);
    CHECK(GRANTID_CLOSED == 8);
    CHECK(GRANTID_NULL_ARGUMENT == 9);
    CHECK(GRANTID_PANIC == 10);
    for (uint32_t s = 0; s <= GRANTID_PANIC; s++) {
        const char *m = grantid_status_message(s);
        CHECK(m != NULL && m[0] != '\0');
        CHECK(strcmp(m, "unknown status") != 0);
    }
    CHECK(strcmp(grantid_status_message(GRANTID_OK), "success") == 0);
    CHECK(strcmp(grantid_status_message(11), "unknown status") == 0);
    CHECK(strcmp(grantid_status_message(UINT32_MAX), "unknown status") == 0);
    CHECK(grantid_version() != NULL && grantid_version()[0] != '\0');
}

static void test_layouts(void) {
    grantid_layout l;
    CHECK_OK(grantid_layout_default(&l));
    CHECK(l.timestamp_bits == 41 && l.worker_bits == 10 && l.sequence_bits == 12);
    CHECK(l.epoch_ms == UINT64_C(1767225600000) && l.tick_ms == 1);

    grantid_layout before = l;
    CHECK_STATUS(grantid_layout_new(41, 11, 12, 0, 1, &l), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("more than 63");
    CHECK_MESSAGE_HAS("INVALID_ARGUMENT");
    CHECK(memcmp(&before, &l, sizeof l) == 0); /* nothing written on failure */
    CHECK_STATUS(grantid_layout_new(300, 0, 1, 0, 1, &l), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("timestamp_bits");

    CHECK_OK(grantid_layout_new(12, 3, 4, UINT64_C(1767225600000), 1, &l));
    uint64_t id = 0;
    CHECK_OK(grantid_layout_encode(&l, 160, 1, 1, &id));
    CHECK(id == 20497);
    grantid_decoded d;
    CHECK_OK(grantid_layout_decode(&l, 20624, &d));
    CHECK(d.timestamp == 161 && d.worker == 1 && d.sequence == 0);

    /* A struct filled by hand is validated too. */
    grantid_layout bad = {.timestamp_bits = 0, .worker_bits = 10, .sequence_bits = 12, .epoch_ms = 0, .tick_ms = 1};
    id = 7;
    CHECK_STATUS(grantid_layout_encode(&bad, 1, 0, 0, &id), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("timestamp_bits");
    CHECK(id == 7);

    CHECK_OK(grantid_parse_id("0x5011", &id));
    CHECK(id == 20497);
    id = 7;
    CHECK_STATUS(grantid_parse_id("-1", &id), GRANTID_INVALID_ARGUMENT);
    CHECK(id == 7);
    CHECK_STATUS(grantid_parse_id("\xff\xfe", &id), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("UTF-8");
}

static void test_null_arguments(void) {
    grantid_layout l;
    grantid_decoded d;
    uint64_t id;
    grantid_layout_default(&l);

    CHECK_STATUS(grantid_layout_default(NULL), GRANTID_NULL_ARGUMENT);
    CHECK_MESSAGE_HAS("out must not be NULL");
    CHECK_STATUS(grantid_layout_new(41, 10, 12, 0, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_layout_encode(NULL, 1, 0, 0, &id), GRANTID_NULL_ARGUMENT);
    CHECK_MESSAGE_HAS("layout");
    CHECK_STATUS(grantid_layout_encode(&l, 1, 0, 0, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_layout_decode(NULL, 1, &d), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_layout_decode(&l, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_parse_id(NULL, &id), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_parse_id("1", NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_generator_options_init(NULL, sizeof(grantid_generator_options)), GRANTID_NULL_ARGUMENT);

    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    grantid_generator *gen = NULL;
    CHECK_STATUS(grantid_generator_new(NULL, &gen), GRANTID_NULL_ARGUMENT);
    CHECK(test_authority_get(a, &a->frees) == 0); /* options unseen: not ours */

    CHECK_STATUS(grantid_generator_new(&o, NULL), GRANTID_NULL_ARGUMENT);
    CHECK(test_authority_get(a, &a->frees) == 1);

    grantid_generator_options no_ns = o;
    no_ns.namespace_ = NULL;
    CHECK_STATUS(grantid_generator_new(&no_ns, &gen), GRANTID_NULL_ARGUMENT);
    CHECK_MESSAGE_HAS("options.namespace_");
    CHECK(gen == NULL);
    CHECK(test_authority_get(a, &a->frees) == 2);

    grantid_generator_options no_grant = o;
    no_grant.grant = NULL;
    CHECK_STATUS(grantid_generator_new(&no_grant, &gen), GRANTID_NULL_ARGUMENT);
    CHECK_MESSAGE_HAS("options.grant");
    CHECK(test_authority_get(a, &a->frees) == 3);
    CHECK(test_authority_get(a, &a->calls) == 0);

    CHECK_OK(grantid_generator_new(&o, &gen));
    CHECK(gen != NULL);
    grantid_generator_stats st;
    uint64_t ids[4];
    CHECK_STATUS(grantid_next_id(NULL, &id), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_next_id(gen, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_next_ids(NULL, ids, 4), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_next_ids(gen, NULL, 4), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_decode(NULL, 1, &d), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_decode(gen, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_generator_layout(NULL, &l), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_generator_layout(gen, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_stats(NULL, &st), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_stats_sized(gen, NULL, sizeof st), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_generator_close(NULL), GRANTID_NULL_ARGUMENT);
    grantid_generator_free(NULL); /* a no-op */

    /* A NULL out pointer consumed no ID. */
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.ids_issued == 0);
    grantid_generator_free(gen);
    CHECK(test_authority_get(a, &a->frees) == 4);
    test_authority_destroy(a);
}

static void test_generator(void) {
    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    o.max_batch = 1000;
    grantid_generator *gen = NULL;
    CHECK_OK(grantid_generator_new(&o, &gen));

    uint64_t id = 0, prev = 0;
    for (int i = 0; i < 10000; i++) {
        CHECK_OK(grantid_next_id(gen, &id));
        CHECK(id > prev);
        prev = id;
    }
    uint64_t batch[1000];
    CHECK_OK(grantid_next_ids(gen, batch, 1000));
    CHECK(batch[0] > prev);
    for (int i = 1; i < 1000; i++) {
        CHECK(batch[i] > batch[i - 1]);
    }
    uint64_t big[1001];
    big[0] = 7;
    CHECK_STATUS(grantid_next_ids(gen, big, 1001), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("max_batch");
    CHECK(big[0] == 7);
    CHECK_OK(grantid_next_ids(gen, big, 0));

    grantid_decoded d;
    CHECK_OK(grantid_decode(gen, id, &d));
    grantid_generator_stats st;
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.has_worker && d.worker == st.worker);
    CHECK(st.has_grant_end && d.timestamp < st.grant_end);
    CHECK(st.ids_issued == 11000);
    CHECK(st.grants_acquired >= 1);
    CHECK(st.incarnation != 0);
    CHECK(d.unix_ms >= UINT64_C(1767225600000));
    CHECK_STATUS(grantid_decode(gen, 0, &d), GRANTID_INVALID_ARGUMENT);
    grantid_layout l;
    CHECK_OK(grantid_generator_layout(gen, &l));
    CHECK(l.timestamp_bits == 41 && l.worker_bits == 10 && l.sequence_bits == 12);

    /* close, double close, use after close, free after close. */
    CHECK_OK(grantid_generator_close(gen));
    CHECK(test_authority_get(a, &a->releases) == 1);
    CHECK_OK(grantid_generator_close(gen));
    CHECK(test_authority_get(a, &a->releases) == 1);
    id = 7;
    CHECK_STATUS(grantid_next_id(gen, &id), GRANTID_CLOSED);
    CHECK(id == 7);
    CHECK_STATUS(grantid_next_ids(gen, batch, 10), GRANTID_CLOSED);
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(test_authority_get(a, &a->frees) == 0);
    grantid_generator_free(gen);
    CHECK(test_authority_get(a, &a->frees) == 1);
    test_authority_destroy(a);
}

/* A generator whose authority misbehaves in `mode` fails to start with
 * `want`, names `needle`, and frees user_data exactly once. */
static void expect_start_failure(int mode, grantid_status want, const char *needle) {
    test_authority *a = test_authority_new(mode);
    grantid_generator_options o;
    test_options(&o, a);
    o.startup_timeout_ms = 150;
    o.backoff_min_ms = 10;
    o.backoff_max_ms = 20;
    grantid_generator *gen = (grantid_generator *)&o; /* must stay untouched */
    CHECK_STATUS(grantid_generator_new(&o, &gen), want);
    CHECK_MESSAGE_HAS(needle);
    CHECK(gen == (grantid_generator *)&o);
    CHECK(test_authority_get(a, &a->calls) >= 1);
    /* The free function runs once the renewal thread has let go. */
    for (int i = 0; i < 200 && test_authority_get(a, &a->frees) == 0; i++) {
        usleep(5000);
    }
    CHECK(test_authority_get(a, &a->frees) == 1);
    test_authority_destroy(a);
}

static void test_callback_answers(void) {
    expect_start_failure(AUTH_LOST, GRANTID_LEASE_LOST, "worker owned by test-peer");
    expect_start_failure(AUTH_UNAVAILABLE, GRANTID_UNAVAILABLE, "test authority is down");
    expect_start_failure(AUTH_GARBAGE_RC, GRANTID_UNAVAILABLE, "returned 42");
    expect_start_failure(AUTH_BAD_NAMESPACE, GRANTID_UNAVAILABLE, "namespace");
    expect_start_failure(AUTH_BAD_INCARNATION, GRANTID_UNAVAILABLE, "incarnation");
    expect_start_failure(AUTH_BAD_WORKER, GRANTID_UNAVAILABLE, "worker");
    expect_start_failure(AUTH_EMPTY_INTERVAL, GRANTID_UNAVAILABLE, "invalid grant");
    expect_start_failure(AUTH_NULL_NAMESPACE, GRANTID_UNAVAILABLE, "grant.namespace_ NULL");
}

/* First grant fine, then the authority refuses: on_lease_lost is told, and
 * once the committed grant is gone, next_id says GRANTID_LEASE_LOST. */
static void test_lease_lost(void) {
    test_authority *a = test_authority_new(AUTH_LOSE_RENEWAL);
    grantid_generator_options o;
    test_options(&o, a);
    o.grant_duration_ms = 200; /* the first renewal comes after the first ID */
    o.horizon_ms = 200;
    o.backoff_min_ms = 5;
    o.backoff_max_ms = 10;
    grantid_generator *gen = NULL;
    CHECK_OK(grantid_generator_new(&o, &gen));
    uint64_t id;
    CHECK_OK(grantid_next_id(gen, &id));
    for (int i = 0; i < 400 && test_authority_get(a, &a->lost_calls) == 0; i++) {
        usleep(5000);
    }
    CHECK(test_authority_get(a, &a->lost_calls) >= 1);
    pthread_mutex_lock(&a->lock);
    CHECK(strstr(a->lost_reason, "taken over by test-peer") != NULL);
    CHECK(a->lost_worker == 0); /* the first free worker was granted */
    pthread_mutex_unlock(&a->lock);
    grantid_status s = GRANTID_OK;
    for (int i = 0; i < 400; i++) {
        s = grantid_next_id(gen, &id);
        if (s != GRANTID_OK) {
            break;
        }
        usleep(1000);
    }
    CHECK_STATUS(s, GRANTID_LEASE_LOST);
    grantid_generator_stats st;
    CHECK_OK(grantid_stats(gen, &st));
    CHECK(st.lease_losses >= 1);
    grantid_generator_free(gen);
    CHECK(test_authority_get(a, &a->frees) == 1);
    test_authority_destroy(a);
}

static void test_bad_options(void) {
    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    grantid_generator *gen = NULL;

    grantid_generator_options bad = o;
    bad.fork_policy = 7;
    CHECK_STATUS(grantid_generator_new(&bad, &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("fork_policy");
    bad = o;
    bad.namespace_ = "";
    CHECK_STATUS(grantid_generator_new(&bad, &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("namespace");
    bad = o;
    bad.layout.sequence_bits = 0;
    CHECK_STATUS(grantid_generator_new(&bad, &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("sequence_bits");
    bad = o;
    bad.horizon_ms = 10;
    bad.grant_duration_ms = 100;
    CHECK_STATUS(grantid_generator_new(&bad, &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("horizon_ms");
    bad = o;
    bad.namespace_ = "\xc3\x28";
    CHECK_STATUS(grantid_generator_new(&bad, &gen), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("UTF-8");
    CHECK(gen == NULL);
    CHECK(test_authority_get(a, &a->frees) == 5);
    CHECK(test_authority_get(a, &a->calls) == 0);
    test_authority_destroy(a);
}

/* The process-wide log callback: the core's events at their levels. */
typedef struct {
    pthread_mutex_t lock;
    int by_level[6];
    int grants, uncertain, lost, closed, other_target;
    int nested; /* the status of the nested call */
} log_sink;

static void on_log(int32_t level, const char *target, const char *message, void *user_data) {
    log_sink *s = (log_sink *)user_data;
    pthread_mutex_lock(&s->lock);
    if (level >= 1 && level <= 5) {
        s->by_level[level]++;
    }
    if (strcmp(target, "grantid") != 0) {
        s->other_target++;
    } else if (strncmp(message, "event=grant ", 12) == 0 && level == GRANTID_LOG_DEBUG) {
        s->grants++;
    } else if (strncmp(message, "event=grant_uncertain ", 22) == 0 && level == GRANTID_LOG_WARN) {
        s->uncertain++;
    } else if (strncmp(message, "event=lease_lost ", 17) == 0 && level == GRANTID_LOG_ERROR) {
        s->lost++;
    } else if (strncmp(message, "event=closed ", 13) == 0 && level == GRANTID_LOG_INFO) {
        s->closed++;
    }
    pthread_mutex_unlock(&s->lock);
    /* Replacing the callback from inside it is refused (it would wait for itself). */
    grantid_status n = grantid_set_log_callback(NULL, 0, NULL);
    pthread_mutex_lock(&s->lock);
    s->nested = (int)n;
    pthread_mutex_unlock(&s->lock);
}

static int sink_get(log_sink *s, int *field) {
    pthread_mutex_lock(&s->lock);
    int v = *field;
    pthread_mutex_unlock(&s->lock);
    return v;
}

static void start_and_close(void) {
    test_authority *a = test_authority_new(AUTH_NORMAL);
    grantid_generator_options o;
    test_options(&o, a);
    grantid_generator *gen = NULL;
    CHECK_OK(grantid_generator_new(&o, &gen));
    uint64_t id;
    CHECK_OK(grantid_next_id(gen, &id));
    grantid_generator_free(gen);
    test_authority_destroy(a);
}

static void test_log_callback(void) {
    CHECK(GRANTID_LOG_ERROR == 1 && GRANTID_LOG_WARN == 2 && GRANTID_LOG_INFO == 3);
    CHECK(GRANTID_LOG_DEBUG == 4 && GRANTID_LOG_TRACE == 5);
    log_sink s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.lock, NULL);
    s.nested = (int)GRANTID_OK;
    CHECK_STATUS(grantid_set_log_callback(on_log, 0, &s), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("min_level");
    CHECK_STATUS(grantid_set_log_callback(on_log, 6, &s), GRANTID_INVALID_ARGUMENT);

    CHECK_OK(grantid_set_log_callback(on_log, GRANTID_LOG_DEBUG, &s));
    start_and_close();
    CHECK(sink_get(&s, &s.grants) >= 1);
    CHECK(sink_get(&s, &s.closed) == 1);
    CHECK(sink_get(&s, &s.nested) == (int)GRANTID_INVALID_ARGUMENT);
    expect_start_failure(AUTH_UNAVAILABLE, GRANTID_UNAVAILABLE, "test authority is down");
    CHECK(sink_get(&s, &s.uncertain) >= 1);
    test_lease_lost();
    CHECK(sink_get(&s, &s.lost) >= 1);
    CHECK(sink_get(&s, &s.by_level[GRANTID_LOG_TRACE]) == 0);

    /* Warnings and errors only. */
    memset(s.by_level, 0, sizeof s.by_level);
    s.grants = s.closed = 0;
    CHECK_OK(grantid_set_log_callback(on_log, GRANTID_LOG_WARN, &s));
    start_and_close();
    CHECK(sink_get(&s, &s.grants) == 0 && sink_get(&s, &s.closed) == 0);
    CHECK(sink_get(&s, &s.by_level[GRANTID_LOG_DEBUG]) == 0);
    expect_start_failure(AUTH_UNAVAILABLE, GRANTID_UNAVAILABLE, "test authority is down");
    CHECK(sink_get(&s, &s.by_level[GRANTID_LOG_WARN]) >= 1);

    /* NULL stops delivery; once it returned, the sink is never touched. */
    CHECK_OK(grantid_set_log_callback(NULL, 0, NULL));
    memset(s.by_level, 0, sizeof s.by_level);
    start_and_close();
    expect_start_failure(AUTH_UNAVAILABLE, GRANTID_UNAVAILABLE, "test authority is down");
    int total = 0;
    for (int l = 1; l <= 5; l++) {
        total += sink_get(&s, &s.by_level[l]);
    }
    CHECK(total == 0);
    pthread_mutex_destroy(&s.lock);
}

int main(void) {
    test_statuses();
    test_layouts();
    test_null_arguments();
    test_generator();
    test_callback_answers();
    test_lease_lost();
    test_bad_options();
    test_log_callback();
    CHECK_DONE("test_api");
}
