/*
 * Public IDs through the C ABI: the shared vectors (conformance/public_ids.json,
 * turned into public_vectors.h by gen_public_vectors.py), strict refusals,
 * NULL handling, and one handle used from several threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "public_vectors.h"

static int hex_to_key(const char *hex, uint8_t key[GRANTID_PUBLIC_ID_KEY_LEN]) {
    for (int i = 0; i < GRANTID_PUBLIC_ID_KEY_LEN; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) {
            return 0;
        }
        key[i] = (uint8_t)byte;
    }
    return 1;
}

static grantid_public_ids *keyed(const char *hex) {
    grantid_public_ids *ids = NULL;
    CHECK_OK(grantid_public_ids_new_hex(hex, &ids));
    return ids;
}

static void cipher_vectors(void) {
    CHECK(PV_N_CIPHERS >= 5);
    CHECK(strcmp(pv_ciphers[0].key, "1b1a1918131211100b0a090803020100") == 0);
    for (size_t i = 0; i < PV_N_CIPHERS; i++) {
        const pv_cipher *v = &pv_ciphers[i];
        /* The raw-byte constructor, from the same key. */
        uint8_t key[GRANTID_PUBLIC_ID_KEY_LEN];
        CHECK(hex_to_key(v->key, key));
        grantid_public_ids *ids = NULL;
        CHECK_OK(grantid_public_ids_new(key, sizeof key, &ids));
        uint64_t out = 0;
        CHECK_OK(grantid_public_ids_cipher_encrypt(ids, v->plaintext, &out));
        CHECK(out == v->ciphertext);
        CHECK_OK(grantid_public_ids_cipher_decrypt(ids, v->ciphertext, &out));
        CHECK(out == v->plaintext);
        grantid_public_ids_free(ids);
    }
}

static void permutation_vectors(void) {
    unsigned max_walks = 0;
    int ends = 0;
    for (size_t n = 0; n < PV_N_NAMESPACES; n++) {
        const pv_namespace *ns = &pv_namespaces[n];
        grantid_public_ids *ids = keyed(ns->key);
        for (size_t i = 0; i < ns->n; i++) {
            const pv_vector *v = &ns->vectors[i];
            uint64_t out = 0;
            char text[GRANTID_PUBLIC_ID_TEXT_LEN + 1];
            CHECK_OK(grantid_public_ids_encode(ids, v->id, &out));
            CHECK(out == v->public_id);
            CHECK_OK(grantid_public_ids_decode(ids, v->public_id, &out));
            CHECK(out == v->id);
            CHECK_OK(grantid_public_ids_encode_str(ids, v->id, text, sizeof text));
            CHECK(strcmp(text, v->text) == 0);
            CHECK_OK(grantid_public_ids_decode_str(ids, v->text, &out));
            CHECK(out == v->id);
            max_walks = v->walks > max_walks ? v->walks : max_walks;
            ends += v->id == 1 || v->id == (UINT64_C(1) << 63) - 1;
        }
        grantid_public_ids_free(ids);
    }
    CHECK(max_walks >= 7);
    CHECK(ends >= 2);
}

static void text_and_refusals(void) {
    grantid_public_ids *ids = keyed(pv_namespaces[0].key);
    for (size_t i = 0; i < PV_N_TEXTS; i++) {
        uint64_t from_text = 0, from_value = 0;
        CHECK_OK(grantid_public_ids_decode_str(ids, pv_texts[i].text, &from_text));
        CHECK_OK(grantid_public_ids_decode(ids, pv_texts[i].public_id, &from_value));
        CHECK(from_text == from_value);
    }
    for (size_t i = 0; i < PV_N_TEXT_INVALID; i++) {
        uint64_t out = 12345;
        CHECK_STATUS(grantid_public_ids_decode_str(ids, pv_text_invalid[i], &out),
                     GRANTID_INVALID_ARGUMENT);
        CHECK(out == 12345); /* nothing written on failure */
    }
    for (size_t i = 0; i < PV_N_ID_INVALID; i++) {
        uint64_t out = 7;
        char text[32] = "untouched";
        CHECK_STATUS(grantid_public_ids_encode(ids, pv_id_invalid[i], &out), GRANTID_INVALID_ARGUMENT);
        CHECK_STATUS(grantid_public_ids_decode(ids, pv_id_invalid[i], &out), GRANTID_INVALID_ARGUMENT);
        CHECK_STATUS(grantid_public_ids_encode_str(ids, pv_id_invalid[i], text, sizeof text),
                     GRANTID_INVALID_ARGUMENT);
        CHECK(out == 7 && strcmp(text, "untouched") == 0);
    }
    /* A buffer without room for the NUL is refused, and left untouched. */
    char small[GRANTID_PUBLIC_ID_TEXT_LEN] = {0};
    CHECK_STATUS(grantid_public_ids_encode_str(ids, 1, small, sizeof small), GRANTID_INVALID_ARGUMENT);
    CHECK_MESSAGE_HAS("buf_len");
    CHECK(small[0] == 0);

    for (size_t i = 0; i < PV_N_KEY_INVALID_HEX; i++) {
        grantid_public_ids *bad = NULL;
        CHECK_STATUS(grantid_public_ids_new_hex(pv_key_invalid_hex[i], &bad), GRANTID_INVALID_ARGUMENT);
        CHECK(bad == NULL);
        /* The message never repeats the key. */
        if (strlen(pv_key_invalid_hex[i]) >= 12) {
            char head[13];
            memcpy(head, pv_key_invalid_hex[i], 12);
            head[12] = 0;
            CHECK(strstr(grantid_last_error_message(), head) == NULL);
        }
    }
    uint8_t raw[64] = {1};
    for (size_t i = 0; i < PV_N_KEY_INVALID_LENGTHS; i++) {
        grantid_public_ids *bad = NULL;
        CHECK_STATUS(grantid_public_ids_new(raw, pv_key_invalid_lengths[i], &bad), GRANTID_INVALID_ARGUMENT);
        CHECK(bad == NULL);
    }
    for (size_t i = 0; i < PV_N_KEY_VALID; i++) {
        grantid_public_ids *a = keyed(pv_key_valid_rows[i].hex), *b = keyed(pv_key_valid_rows[i].same_as);
        uint64_t pa = 0, pb = 1;
        CHECK_OK(grantid_public_ids_encode(a, 99, &pa));
        CHECK_OK(grantid_public_ids_encode(b, 99, &pb));
        CHECK(pa == pb);
        grantid_public_ids_free(a);
        grantid_public_ids_free(b);
    }

    /* NULL everywhere. */
    uint64_t out = 0;
    char text[GRANTID_PUBLIC_ID_TEXT_LEN + 1];
    grantid_public_ids *none = NULL;
    CHECK_STATUS(grantid_public_ids_new(NULL, 16, &none), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_new(raw, 16, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_new_hex(NULL, &none), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_encode(NULL, 1, &out), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_encode(ids, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_decode(ids, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_encode_str(ids, 1, NULL, 14), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_decode_str(ids, NULL, &out), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_decode_str(NULL, "0000000000001", &out), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_cipher_encrypt(ids, 1, NULL), GRANTID_NULL_ARGUMENT);
    CHECK_STATUS(grantid_public_ids_generate_key(NULL), GRANTID_NULL_ARGUMENT);
    CHECK(none == NULL);
    grantid_public_ids_free(NULL);
    (void)text;

    /* A generated key works and differs from the next one. */
    uint8_t k1[GRANTID_PUBLIC_ID_KEY_LEN], k2[GRANTID_PUBLIC_ID_KEY_LEN];
    CHECK_OK(grantid_public_ids_generate_key(k1));
    CHECK_OK(grantid_public_ids_generate_key(k2));
    CHECK(memcmp(k1, k2, sizeof k1) != 0);
    grantid_public_ids *fresh = NULL;
    CHECK_OK(grantid_public_ids_new(k1, sizeof k1, &fresh));
    CHECK_OK(grantid_public_ids_encode_str(fresh, 424242, text, sizeof text));
    CHECK_OK(grantid_public_ids_decode_str(fresh, text, &out));
    CHECK(out == 424242);
    grantid_public_ids_free(fresh);
    grantid_public_ids_free(ids);
}

enum { THREADS = 4, PER_THREAD = 20000 };
static grantid_public_ids *shared_ids;
static int thread_errors[THREADS];

static void *round_trips(void *arg) {
    int t = (int)(intptr_t)arg;
    for (uint64_t i = 1; i <= PER_THREAD; i++) {
        uint64_t id = (uint64_t)t * PER_THREAD + i, p = 0, back = 0;
        char text[GRANTID_PUBLIC_ID_TEXT_LEN + 1];
        if (grantid_public_ids_encode(shared_ids, id, &p) != GRANTID_OK ||
            grantid_public_ids_decode(shared_ids, p, &back) != GRANTID_OK || back != id ||
            grantid_public_ids_encode_str(shared_ids, id, text, sizeof text) != GRANTID_OK ||
            grantid_public_ids_decode_str(shared_ids, text, &back) != GRANTID_OK || back != id) {
            thread_errors[t]++;
        }
    }
    return NULL;
}

static void threads(void) {
    shared_ids = keyed(pv_namespaces[1].key);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&th[t], NULL, round_trips, (void *)(intptr_t)t) == 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(thread_errors[t] == 0);
    }
    grantid_public_ids_free(shared_ids);
}

int main(void) {
    cipher_vectors();
    permutation_vectors();
    text_and_refusals();
    threads();
    CHECK_DONE("test_public");
}
