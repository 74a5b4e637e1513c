/*
 * The shared conformance vectors (conformance/vectors.json, turned into
 * tables by gen_vectors.py) through the C API.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "vectors.h"

static void run_layout(const vec_layout *v, size_t *count) {
    grantid_layout l;
    grantid_status s = grantid_layout_new(v->timestamp_bits, v->worker_bits, v->sequence_bits,
                                          v->epoch_ms, v->tick_ms, &l);
    if (s != GRANTID_OK) {
        fprintf(stderr, "layout %s refused: %s\n", v->name, grantid_last_error_message());
        check_failures++;
        return;
    }
    CHECK_OK(grantid_layout_set_datacenter_bits(&l, v->datacenter_bits));
    CHECK(l.datacenter_bits == v->datacenter_bits);
    for (size_t i = 0; i < v->n_encode; i++) {
        const vec_encode *e = &v->encode[i];
        uint64_t id = 0;
        CHECK_OK(grantid_layout_encode(&l, e->timestamp, e->worker, e->sequence, &id));
        if (id != e->id) {
            fprintf(stderr, "%s: encode(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") = %" PRIu64
                            ", vector says %" PRIu64 "\n",
                    v->name, e->timestamp, e->worker, e->sequence, id, e->id);
            check_failures++;
        }
        grantid_decoded d;
        CHECK_OK(grantid_layout_decode(&l, e->id, &d));
        CHECK(d.timestamp == e->timestamp && d.worker == e->worker && d.sequence == e->sequence);
        CHECK(!e->has_unix_ms || d.unix_ms == e->unix_ms);
        CHECK(d.datacenter == e->datacenter && d.datacenter_worker == e->datacenter_worker);
        /* A caller built against version 0.1.0's struct gets its four fields only. */
        grantid_decoded old;
        memset(&old, 0xAB, sizeof old);
        CHECK_OK(grantid_layout_decode_sized(&l, e->id, &old, 4 * sizeof(uint64_t)));
        CHECK(old.worker == e->worker && old.unix_ms == d.unix_ms && old.datacenter == UINT64_C(0xABABABABABABABAB));
        ++*count;
    }
    for (size_t i = 0; i < v->n_encode_invalid; i++) {
        const vec_encode_invalid *e = &v->encode_invalid[i];
        uint64_t id = 12345;
        CHECK_STATUS(grantid_layout_encode(&l, e->timestamp, e->worker, e->sequence, &id), e->status);
        CHECK(id == 12345);
        ++*count;
    }
    for (size_t i = 0; i < v->n_decode_invalid; i++) {
        const vec_decode_invalid *e = &v->decode_invalid[i];
        grantid_decoded d = {1, 2, 3, 4, 5, 6};
        CHECK_STATUS(grantid_layout_decode(&l, e->id, &d), e->status);
        CHECK(d.timestamp == 1 && d.worker == 2 && d.sequence == 3 && d.unix_ms == 4);
        ++*count;
    }
}

int main(void) {
    size_t count = 0;
    for (size_t i = 0; i < VEC_N_LAYOUTS; i++) {
        run_layout(&vec_layouts[i], &count);
    }
    for (size_t i = 0; i < VEC_N_INVALID_LAYOUTS; i++) {
        const vec_invalid_layout *e = &vec_invalid_layouts[i];
        grantid_layout l;
        memset(&l, 0xAB, sizeof l);
        grantid_status s = grantid_layout_new(e->timestamp_bits, e->worker_bits, e->sequence_bits,
                                              e->epoch_ms, e->tick_ms, &l);
        if (e->datacenter_bits == 0) {
            CHECK_STATUS(s, e->status);
            CHECK_MESSAGE_HAS(e->field);
            CHECK(l.timestamp_bits == 0xAB);
        } else {
            /* The widths are fine; the split is refused and nothing written. */
            CHECK_OK(s);
            CHECK_STATUS(grantid_layout_set_datacenter_bits(&l, e->datacenter_bits), e->status);
            CHECK_MESSAGE_HAS(e->field);
            CHECK(l.datacenter_bits == 0);
        }
        count++;
    }
    for (size_t i = 0; i < VEC_N_PARSE_INVALID; i++) {
        uint64_t id = 12345;
        CHECK_STATUS(grantid_parse_id(vec_parse_invalid[i], &id), GRANTID_INVALID_ARGUMENT);
        CHECK(id == 12345);
        count++;
    }
    for (size_t i = 0; i < VEC_N_PARSE_VALID; i++) {
        uint64_t id = 0;
        CHECK_OK(grantid_parse_id(vec_parse_valid_rows[i].text, &id));
        CHECK(id == vec_parse_valid_rows[i].id);
        count++;
    }
    CHECK(count > 0);
    printf("test_conformance: %zu vectors\n", count);
    CHECK_DONE("test_conformance");
}
