/* tests/test_gguf.c — the GGUF reader and writer on valid files: a file
 * encoded by hand in the test (independently of the library) read correctly
 * and written byte for byte by the writer, round trips of every value type
 * and tensor type, fill callbacks, the getters' conversions and range
 * checks, and what the writer refuses. Malformed files:
 * test_gguf_malformed.c (same executable).
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, strdup */

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf_testutil.h"
#include "gguf_walk.h"
#include "testutil.h"

/* ---- the golden file ------------------------------------------------------------------ */

static void check_golden(const tsr_gguf *g, uint32_t version, bool nested)
{
    cr_expect_eq(tsr_gguf_version(g), version);
    cr_expect_eq(tsr_gguf_alignment(g), GOLDEN_ALIGN);
    cr_assert_eq(tsr_gguf_kv_count(g), nested ? 19u : 18u);
    cr_expect_str_eq(tsr_gguf_kv_key(g, 0), "general.architecture");
    cr_expect_eq(tsr_gguf_kv_type(g, 2), TSR_GGUF_TYPE_UINT8);
    cr_expect_eq(tsr_gguf_kv_type(g, 14), TSR_GGUF_TYPE_ARRAY);
    cr_expect_eq(tsr_gguf_find_key(g, "t.bool"), 12);
    cr_expect_eq(tsr_gguf_find_key(g, "t.nope"), -1);

    const char *s;
    size_t len;
    cr_assert_eq(tsr_gguf_get_str(g, "general.architecture", &s, &len), TSR_OK);
    cr_expect_str_eq(s, "golden");
    cr_expect_eq(len, 6u);
    cr_assert_eq(tsr_gguf_get_str(g, "t.str_empty", &s, &len), TSR_OK);
    cr_expect_eq(len, 0u);
    cr_expect_str_eq(s, "");

    uint64_t u;
    int64_t i;
    uint32_t u32;
    int32_t i32;
    float f;
    double d;
    bool b;
    cr_expect(tsr_gguf_get_u32(g, "t.u8", &u32) == TSR_OK && u32 == 200);
    cr_expect(tsr_gguf_get_i32(g, "t.i8", &i32) == TSR_OK && i32 == -100);
    cr_expect(tsr_gguf_get_u64(g, "t.u16", &u) == TSR_OK && u == 60000);
    cr_expect(tsr_gguf_get_i64(g, "t.i16", &i) == TSR_OK && i == -30000);
    cr_expect(tsr_gguf_get_u32(g, "t.u32", &u32) == TSR_OK && u32 == 4000000000u);
    cr_expect(tsr_gguf_get_i32(g, "t.i32", &i32) == TSR_OK && i32 == -2000000000);
    cr_expect(tsr_gguf_get_u64(g, "t.u64", &u) == TSR_OK && u == 0xfedcba9876543210ull);
    cr_expect(tsr_gguf_get_i64(g, "t.i64", &i) == TSR_OK && i == INT64_MIN);
    cr_expect(tsr_gguf_get_f32(g, "t.f32", &f) == TSR_OK && f == 1.5f);
    cr_expect(tsr_gguf_get_f64(g, "t.f64", &d) == TSR_OK && d == -2.25);
    cr_expect(tsr_gguf_get_bool(g, "t.bool", &b) == TSR_OK && b);

    tsr_gguf_array a;
    cr_assert_eq(tsr_gguf_get_array(g, "t.arr_i32", &a), TSR_OK);
    cr_expect(a.type == TSR_GGUF_TYPE_INT32 && a.n == 3 && a.data != NULL);
    cr_expect(tsr_gguf_array_i64(g, "t.arr_i32", 1, &i) == TSR_OK && i == -2);
    cr_expect(tsr_gguf_array_u64(g, "t.arr_i32", 2, &u) == TSR_OK && u == 3);
    cr_expect(tsr_gguf_array_f64(g, "t.arr_f32", 1, &d) == TSR_OK && d == -1.0);
    cr_expect(tsr_gguf_array_bool(g, "t.arr_bool", 0, &b) == TSR_OK && b);
    cr_expect(tsr_gguf_array_bool(g, "t.arr_bool", 1, &b) == TSR_OK && !b);
    cr_assert_eq(tsr_gguf_get_array(g, "t.arr_str", &a), TSR_OK);
    cr_expect(a.type == TSR_GGUF_TYPE_STRING && a.n == 3 && a.data == NULL);
    cr_expect(tsr_gguf_array_str(g, "t.arr_str", 0, &s, &len) == TSR_OK && !strcmp(s, "a"));
    cr_expect(tsr_gguf_array_str(g, "t.arr_str", 1, &s, &len) == TSR_OK && len == 0);
    cr_expect(tsr_gguf_array_str(g, "t.arr_str", 2, &s, NULL) == TSR_OK && !strcmp(s, "bcd"));
    if (nested) {
        cr_assert_eq(tsr_gguf_get_array(g, "t.nested", &a), TSR_OK);
        cr_expect(a.type == TSR_GGUF_TYPE_ARRAY && a.n == 3 && a.data == NULL);
        cr_expect_eq(tsr_gguf_array_i64(g, "t.nested", 0, &i), TSR_ETYPE);
    }

    cr_assert_eq(tsr_gguf_tensor_count(g), 2u);
    const tsr_gguf_tensor *t = tsr_gguf_tensor_at(g, 0);
    cr_assert_not_null(t);
    cr_expect_str_eq(t->name, "a");
    cr_expect(t->type == TSR_TYPE_F32 && t->n_dims == 2);
    cr_expect(t->ne[0] == 3 && t->ne[1] == 2 && t->ne[2] == 1 && t->ne[3] == 1);
    cr_expect_eq(t->size, sizeof(golden_a));
    cr_expect_eq(t->offset % GOLDEN_ALIGN, 0u);
    cr_expect(memcmp(t->data, golden_a, sizeof(golden_a)) == 0);
    const tsr_gguf_tensor *t2 = tsr_gguf_tensor_by_name(g, "blk.0.b");
    cr_assert_not_null(t2);
    cr_expect(t2 == tsr_gguf_tensor_at(g, 1));
    cr_expect(t2->type == TSR_TYPE_Q8_0 && t2->n_dims == 1 && t2->ne[0] == 32);
    cr_expect_eq(t2->size, sizeof(tsr_block_q8_0));
    cr_expect_eq(t2->offset, t->offset + GOLDEN_ALIGN);
    tsr_block_q8_0 want;
    golden_b(&want);
    cr_expect(memcmp(t2->data, &want, sizeof(want)) == 0);
    cr_expect_null(tsr_gguf_tensor_by_name(g, "blk.0"));
    cr_expect_null(tsr_gguf_tensor_at(g, 2));
}

Test(golden, hand_encoded_v3_file_reads_correctly)
{
    enc e = {0};
    golden(&e, 3, true);
    tsr_gguf *g;
    uint8_t *copy;
    cr_assert_eq(open_enc(&e, &g, &copy), TSR_OK, "%s", tsr_last_error());
    check_golden(g, 3, true);
    const char *bad;
    gguf_walk(g, &bad);
    cr_expect_null(bad, "walk: %s", bad);
    tsr_gguf_close(g);
    free(copy);
    free(e.p);
}

Test(golden, version_2_reads_like_3_and_version_1_is_refused)
{
    enc e = {0};
    golden(&e, 2, false);
    tsr_gguf *g;
    uint8_t *copy;
    cr_assert_eq(open_enc(&e, &g, &copy), TSR_OK, "%s", tsr_last_error());
    check_golden(g, 2, false);
    tsr_gguf_close(g);
    free(copy);
    e.p[4] = 1;
    expect_error(&e, TSR_EFORMAT, "version 1 is not supported");
    e.p[4] = 4;
    expect_error(&e, TSR_EFORMAT, "version 4 is not supported");
    e.p[4] = 0, e.p[7] = 3;
    expect_error(&e, TSR_EFORMAT, "big-endian");
    free(e.p);
}

Test(golden, writer_output_equals_the_hand_encoding_byte_for_byte)
{
    enc e = {0};
    golden(&e, 3, false);
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    write_golden(w);
    tsr_block_q8_0 b;
    golden_b(&b);
    cr_assert_eq(
        tsr_gguf_writer_add_tensor(w, "blk.0.b", TSR_TYPE_Q8_0, 1, (const int64_t[]){32}, &b),
        TSR_OK);
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/golden.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    size_t n;
    uint8_t *got = read_file(path, &n);
    cr_assert_eq(n, e.n, "file of %zu bytes, the hand encoding has %zu", n, e.n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], e.p[i], "byte %zu: writer %02x, hand %02x", i, got[i], e.p[i]);
    /* The same file through tsr_gguf_open (the mapping). */
    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open(path, &g), TSR_OK, "%s", tsr_last_error());
    check_golden(g, 3, false);
    tsr_gguf_close(g);
    free(got);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
    free(e.p);
}

/* ---- round trips ------------------------------------------------------------------------ */

Test(roundtrip, every_value_type_at_its_limits)
{
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u8(w, "u8.max", UINT8_MAX), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i8(w, "i8.min", INT8_MIN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u16(w, "u16.max", UINT16_MAX), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i16(w, "i16.min", INT16_MIN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u32(w, "u32.max", UINT32_MAX), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i32(w, "i32.min", INT32_MIN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u64(w, "u64.max", UINT64_MAX), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i64(w, "i64.max", INT64_MAX), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_f32(w, "f32.inf", -INFINITY), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_f32(w, "f32.nan", NAN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_f64(w, "f64.tiny", 4.9e-324), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_bool(w, "bool.false", false), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str(w, "str.utf8", "h\xc3\xa9llo \xe2\x82\xac"), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str(w, "str.replaced", "first"), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str(w, "str.replaced", "second"), TSR_OK);
    const uint8_t a_u8[] = {0, 255};
    const int8_t a_i8[] = {-128, 127};
    const uint16_t a_u16[] = {0, 65535};
    const int16_t a_i16[] = {-32768, 32767};
    const uint32_t a_u32[] = {0, UINT32_MAX};
    const int32_t a_i32[] = {INT32_MIN, INT32_MAX};
    const uint64_t a_u64[] = {0, UINT64_MAX};
    const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
    const float a_f32[] = {-0.0f, 3.4e38f};
    const double a_f64[] = {-1e308, 1e-300};
    const bool a_bool[] = {false, true};
    const struct {
        const char *key;
        tsr_gguf_type type;
        const void *v;
    } arrays[] = {{"a.u8", TSR_GGUF_TYPE_UINT8, a_u8},     {"a.i8", TSR_GGUF_TYPE_INT8, a_i8},
                  {"a.u16", TSR_GGUF_TYPE_UINT16, a_u16},  {"a.i16", TSR_GGUF_TYPE_INT16, a_i16},
                  {"a.u32", TSR_GGUF_TYPE_UINT32, a_u32},  {"a.i32", TSR_GGUF_TYPE_INT32, a_i32},
                  {"a.u64", TSR_GGUF_TYPE_UINT64, a_u64},  {"a.i64", TSR_GGUF_TYPE_INT64, a_i64},
                  {"a.f32", TSR_GGUF_TYPE_FLOAT32, a_f32}, {"a.f64", TSR_GGUF_TYPE_FLOAT64, a_f64},
                  {"a.bool", TSR_GGUF_TYPE_BOOL, a_bool}};
    for (size_t k = 0; k < ARRAY_SIZE(arrays); k++)
        cr_assert_eq(tsr_gguf_writer_set_array(w, arrays[k].key, arrays[k].type, arrays[k].v, 2),
                     TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_array(w, "a.empty", TSR_GGUF_TYPE_FLOAT32, NULL, 0), TSR_OK);
    /* A vocabulary-sized string array. */
    enum { NV = 5000 };
    char **vocab = malloc(NV * sizeof(*vocab));
    for (int k = 0; k < NV; k++) {
        vocab[k] = malloc(16);
        snprintf(vocab[k], 16, "tok%d", k);
    }
    cr_assert_eq(tsr_gguf_writer_set_str_array(w, "a.vocab", (const char *const *)vocab, NV),
                 TSR_OK);

    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/values.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open(path, &g), TSR_OK, "%s", tsr_last_error());

    cr_expect_eq(tsr_gguf_kv_count(g), 16u + ARRAY_SIZE(arrays));
    cr_expect_str_eq(tsr_gguf_kv_key(g, 13), "str.replaced", "a replaced key keeps its place");
    uint64_t u;
    int64_t i;
    float f;
    double d;
    bool b;
    const char *s;
    size_t len;
    cr_expect(tsr_gguf_get_u64(g, "u8.max", &u) == TSR_OK && u == UINT8_MAX);
    cr_expect(tsr_gguf_get_i64(g, "i8.min", &i) == TSR_OK && i == INT8_MIN);
    cr_expect(tsr_gguf_get_u64(g, "u16.max", &u) == TSR_OK && u == UINT16_MAX);
    cr_expect(tsr_gguf_get_i64(g, "i16.min", &i) == TSR_OK && i == INT16_MIN);
    cr_expect(tsr_gguf_get_u64(g, "u32.max", &u) == TSR_OK && u == UINT32_MAX);
    cr_expect(tsr_gguf_get_i64(g, "i32.min", &i) == TSR_OK && i == INT32_MIN);
    cr_expect(tsr_gguf_get_u64(g, "u64.max", &u) == TSR_OK && u == UINT64_MAX);
    cr_expect(tsr_gguf_get_i64(g, "i64.max", &i) == TSR_OK && i == INT64_MAX);
    cr_expect(tsr_gguf_get_f32(g, "f32.inf", &f) == TSR_OK && isinf(f) && f < 0);
    cr_expect(tsr_gguf_get_f32(g, "f32.nan", &f) == TSR_OK && isnan(f));
    cr_expect(tsr_gguf_get_f64(g, "f64.tiny", &d) == TSR_OK && d == 4.9e-324);
    cr_expect(tsr_gguf_get_bool(g, "bool.false", &b) == TSR_OK && !b);
    cr_expect(tsr_gguf_get_str(g, "str.utf8", &s, &len) == TSR_OK &&
              !strcmp(s, "h\xc3\xa9llo \xe2\x82\xac") && len == 10);
    cr_expect(tsr_gguf_get_str(g, "str.replaced", &s, NULL) == TSR_OK && !strcmp(s, "second"));

    for (size_t k = 0; k < ARRAY_SIZE(arrays); k++) {
        tsr_gguf_array a;
        cr_assert_eq(tsr_gguf_get_array(g, arrays[k].key, &a), TSR_OK);
        cr_expect(a.type == arrays[k].type && a.n == 2, "%s", arrays[k].key);
    }
    cr_expect(tsr_gguf_array_u64(g, "a.u8", 1, &u) == TSR_OK && u == 255);
    cr_expect(tsr_gguf_array_i64(g, "a.i8", 0, &i) == TSR_OK && i == -128);
    cr_expect(tsr_gguf_array_u64(g, "a.u16", 1, &u) == TSR_OK && u == 65535);
    cr_expect(tsr_gguf_array_i64(g, "a.i16", 0, &i) == TSR_OK && i == -32768);
    cr_expect(tsr_gguf_array_u64(g, "a.u32", 1, &u) == TSR_OK && u == UINT32_MAX);
    cr_expect(tsr_gguf_array_i64(g, "a.i32", 0, &i) == TSR_OK && i == INT32_MIN);
    cr_expect(tsr_gguf_array_u64(g, "a.u64", 1, &u) == TSR_OK && u == UINT64_MAX);
    cr_expect(tsr_gguf_array_i64(g, "a.i64", 0, &i) == TSR_OK && i == INT64_MIN);
    cr_expect(tsr_gguf_array_i64(g, "a.i64", 1, &i) == TSR_OK && i == INT64_MAX);
    cr_expect(tsr_gguf_array_f64(g, "a.f32", 0, &d) == TSR_OK && d == 0 && signbit(d));
    cr_expect(tsr_gguf_array_f64(g, "a.f32", 1, &d) == TSR_OK && d == (double)3.4e38f);
    cr_expect(tsr_gguf_array_f64(g, "a.f64", 0, &d) == TSR_OK && d == -1e308);
    cr_expect(tsr_gguf_array_bool(g, "a.bool", 1, &b) == TSR_OK && b);
    tsr_gguf_array a;
    cr_expect(tsr_gguf_get_array(g, "a.empty", &a) == TSR_OK && a.n == 0 &&
              a.type == TSR_GGUF_TYPE_FLOAT32);
    cr_expect_eq(tsr_gguf_array_f64(g, "a.empty", 0, &d), TSR_ERANGE);
    cr_expect(tsr_gguf_get_array(g, "a.vocab", &a) == TSR_OK && a.n == NV);
    for (int k = 0; k < NV; k++) {
        cr_assert_eq(tsr_gguf_array_str(g, "a.vocab", (size_t)k, &s, &len), TSR_OK);
        cr_assert_str_eq(s, vocab[k]);
        cr_assert_eq(len, strlen(vocab[k]));
    }
    tsr_gguf_close(g);
    for (int k = 0; k < NV; k++)
        free(vocab[k]);
    free(vocab);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
}

/* A deterministic byte pattern per tensor and element. */
static uint8_t pattern(uint32_t tensor, size_t byte)
{
    uint64_t z = (tensor + 1) * 0x9e3779b97f4a7c15ull + byte * 0xbf58476d1ce4e5b9ull;
    z ^= z >> 29;
    return (uint8_t)(z * 0x94d049bb133111ebull >> 56);
}

typedef struct fill_log {
    uint32_t tensor;
    tsr_type type;
    int64_t ne0;
    int64_t next; /* the element the next call must start at */
    int calls;
    bool bad;
    char why[160];
} fill_log;

static tsr_status fill_pattern(void *user, const char *name, int64_t first, int64_t n, void *dst)
{
    fill_log *l = user;
    (void)name;
    const int64_t block = tsr_type_block_size(l->type);
    const size_t tsize = tsr_type_size(l->type);
    const size_t row = tsr_row_size(l->type, l->ne0);
    const size_t bytes = (size_t)(n / block) * tsize;
    l->calls++;
    if (first != l->next || n <= 0 || first % block || n % block || bytes > ((size_t)4 << 20) ||
        (row <= ((size_t)4 << 20) ? (first % l->ne0 || n % l->ne0)
                                  : (first / l->ne0 != (first + n - 1) / l->ne0))) {
        l->bad = true;
        snprintf(l->why, sizeof(l->why), "call [%lld, +%lld) after %lld", (long long)first,
                 (long long)n, (long long)l->next);
    }
    l->next = first + n;
    const size_t b0 = (size_t)(first / block) * tsize;
    for (size_t k = 0; k < bytes; k++)
        ((uint8_t *)dst)[k] = pattern(l->tensor, b0 + k);
    return TSR_OK;
}

static void tensor_roundtrip(uint32_t alignment)
{
    typedef struct {
        const char *name;
        tsr_type type;
        int n_dims;
        int64_t ne[4];
        bool fill;
    } spec;
    const spec specs[] = {
        {"f32.1d", TSR_TYPE_F32, 1, {7}, false},
        {"f16.2d", TSR_TYPE_F16, 2, {5, 3}, true},
        {"bf16.3d", TSR_TYPE_BF16, 3, {3, 1, 4}, false},
        {"q8_0.4d", TSR_TYPE_Q8_0, 4, {64, 3, 2, 2}, true},
        {"i32.2d", TSR_TYPE_I32, 2, {1, 9}, false},
        {"f32.4d", TSR_TYPE_F32, 4, {2, 3, 5, 7}, true},
        {"q8_0.1d", TSR_TYPE_Q8_0, 1, {32}, false},
        {"blk.10.ffn_down.weight.with.a.name.of.exactly.sixty.three.bytes",
         TSR_TYPE_F16,
         2,
         {8, 8},
         false},
    };
    enum { NS = sizeof(specs) / sizeof(specs[0]) };
    uint8_t *data[NS] = {0};
    fill_log logs[NS];
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    if (alignment)
        cr_assert_eq(tsr_gguf_writer_set_alignment(w, alignment), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str(w, "general.name", "tensors"), TSR_OK);
    for (uint32_t k = 0; k < NS; k++) {
        const spec *sp = &specs[k];
        int64_t nel = 1;
        for (int d = 0; d < sp->n_dims; d++)
            nel *= sp->ne[d];
        const size_t size = (size_t)(nel / tsr_type_block_size(sp->type)) * tsr_type_size(sp->type);
        logs[k] = (fill_log){.tensor = k, .type = sp->type, .ne0 = sp->ne[0]};
        if (sp->fill) {
            cr_assert_eq(tsr_gguf_writer_add_tensor_fn(w, sp->name, sp->type, sp->n_dims, sp->ne,
                                                       fill_pattern, &logs[k]),
                         TSR_OK, "%s", tsr_last_error());
        } else {
            data[k] = malloc(size);
            for (size_t b = 0; b < size; b++)
                data[k][b] = pattern(k, b);
            cr_assert_eq(
                tsr_gguf_writer_add_tensor(w, sp->name, sp->type, sp->n_dims, sp->ne, data[k]),
                TSR_OK, "%s", tsr_last_error());
        }
    }
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/tensors.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    for (uint32_t k = 0; k < NS; k++)
        cr_expect(!logs[k].bad, "%s: %s", specs[k].name, logs[k].why);

    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open(path, &g), TSR_OK, "%s", tsr_last_error());
    const size_t align = alignment ? alignment : 32;
    cr_expect_eq(tsr_gguf_alignment(g), align);
    cr_assert_eq(tsr_gguf_tensor_count(g), (size_t)NS);
    uint64_t end = 0;
    for (uint32_t k = 0; k < NS; k++) {
        const spec *sp = &specs[k];
        const tsr_gguf_tensor *t = tsr_gguf_tensor_by_name(g, sp->name);
        cr_assert_not_null(t, "%s", sp->name);
        cr_expect(t == tsr_gguf_tensor_at(g, k), "file order is the order added");
        cr_expect_eq(t->type, sp->type, "%s", sp->name);
        cr_expect_eq(t->n_dims, sp->n_dims, "%s", sp->name);
        for (int d = 0; d < 4; d++)
            cr_expect_eq(t->ne[d], d < sp->n_dims ? sp->ne[d] : 1, "%s ne[%d]", sp->name, d);
        cr_expect_eq(t->offset % align, 0u, "%s at %llu", sp->name, (unsigned long long)t->offset);
        cr_expect_geq(t->offset, end, "%s after the previous tensor", sp->name);
        end = t->offset + t->size;
        for (size_t b = 0; b < t->size; b++)
            cr_assert_eq(((const uint8_t *)t->data)[b], pattern(k, b), "%s byte %zu", sp->name, b);
    }
    /* The file ends with the last tensor padded to the alignment. */
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_expect_eq((uint64_t)sb.st_size, (end + align - 1) / align * align);
    tsr_gguf_close(g);
    for (uint32_t k = 0; k < NS; k++)
        free(data[k]);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
}

Test(roundtrip, tensors_of_every_type_default_alignment) { tensor_roundtrip(0); }
Test(roundtrip, tensors_of_every_type_alignment_1) { tensor_roundtrip(1); }
Test(roundtrip, tensors_of_every_type_alignment_4096) { tensor_roundtrip(4096); }

Test(roundtrip, fill_callbacks_get_whole_rows_or_row_pieces_of_at_most_4_MiB)
{
    /* F32 [300000, 5]: 1.2 MB rows, 3 per chunk; F32 [2.5M]: one 10 MB row
     * in pieces; Q8_0 [32·70000, 2]: 2.4 MB rows. */
    const struct {
        const char *name;
        tsr_type type;
        int n_dims;
        int64_t ne[2];
        int min_calls;
    } specs[] = {{"rows", TSR_TYPE_F32, 2, {300000, 5}, 2},
                 {"one_big_row", TSR_TYPE_F32, 1, {2500000}, 3},
                 {"q8", TSR_TYPE_Q8_0, 2, {32 * 70000, 2}, 2}};
    fill_log logs[3];
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    for (uint32_t k = 0; k < 3; k++) {
        logs[k] = (fill_log){.tensor = k, .type = specs[k].type, .ne0 = specs[k].ne[0]};
        cr_assert_eq(tsr_gguf_writer_add_tensor_fn(w, specs[k].name, specs[k].type, specs[k].n_dims,
                                                   specs[k].ne, fill_pattern, &logs[k]),
                     TSR_OK);
    }
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/big.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open(path, &g), TSR_OK, "%s", tsr_last_error());
    for (uint32_t k = 0; k < 3; k++) {
        cr_expect(!logs[k].bad, "%s: %s", specs[k].name, logs[k].why);
        cr_expect_geq(logs[k].calls, specs[k].min_calls, "%s: %d calls", specs[k].name,
                      logs[k].calls);
        const tsr_gguf_tensor *t = tsr_gguf_tensor_at(g, k);
        int64_t nel = specs[k].ne[0] * (specs[k].n_dims > 1 ? specs[k].ne[1] : 1);
        cr_expect_eq(logs[k].next, nel, "%s: every element filled", specs[k].name);
        for (size_t b = 0; b < t->size; b += 4099)
            cr_assert_eq(((const uint8_t *)t->data)[b], pattern(k, b), "%s byte %zu", specs[k].name,
                         b);
    }
    tsr_gguf_close(g);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
}

/* ---- getters ------------------------------------------------------------------------------- */

Test(getters, conversions_and_range_checks)
{
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    tsr_gguf_writer_set_i64(w, "small", 5);
    tsr_gguf_writer_set_i64(w, "neg", -1);
    tsr_gguf_writer_set_i64(w, "big", (int64_t)1 << 40);
    tsr_gguf_writer_set_u64(w, "huge", UINT64_MAX);
    tsr_gguf_writer_set_u32(w, "u32", 300);
    tsr_gguf_writer_set_f64(w, "f64.big", 1e300);
    tsr_gguf_writer_set_f64(w, "f64.inf", INFINITY);
    tsr_gguf_writer_set_f32(w, "f32", 0.25f);
    tsr_gguf_writer_set_u8(w, "u8", 1);
    tsr_gguf_writer_set_str(w, "str", "x");
    const int16_t arr[] = {-7, 9};
    tsr_gguf_writer_set_array(w, "arr", TSR_GGUF_TYPE_INT16, arr, 2);
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/get.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open(path, &g), TSR_OK, "%s", tsr_last_error());

    uint32_t u32 = 77;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    double d;
    bool b;
    const char *s;
    cr_expect(tsr_gguf_get_u32(g, "small", &u32) == TSR_OK && u32 == 5, "an i64 that fits a u32");
    u32 = 77;
    cr_expect_eq(tsr_gguf_get_u32(g, "neg", &u32), TSR_ERANGE);
    cr_expect_eq(u32, 77u, "unchanged on error");
    cr_expect(strstr(tsr_last_error(), "key 'neg' = -1 (i64) does not fit u32"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_gguf_get_u64(g, "neg", &u64), TSR_ERANGE);
    cr_expect(tsr_gguf_get_i32(g, "neg", &i32) == TSR_OK && i32 == -1);
    cr_expect_eq(tsr_gguf_get_i32(g, "big", &i32), TSR_ERANGE);
    cr_expect_eq(tsr_gguf_get_u32(g, "big", &u32), TSR_ERANGE);
    cr_expect(tsr_gguf_get_i64(g, "big", &i64) == TSR_OK && i64 == (int64_t)1 << 40);
    cr_expect_eq(tsr_gguf_get_i64(g, "huge", &i64), TSR_ERANGE);
    cr_expect(strstr(tsr_last_error(), "18446744073709551615 (u64) does not fit i64"), "%s",
              tsr_last_error());
    cr_expect(tsr_gguf_get_i32(g, "u32", &i32) == TSR_OK && i32 == 300);
    cr_expect(tsr_gguf_get_f32(g, "u32", &f) == TSR_OK && f == 300.0f, "integers read as floats");
    cr_expect_eq(tsr_gguf_get_f32(g, "f64.big", &f), TSR_ERANGE);
    cr_expect(tsr_gguf_get_f64(g, "f64.big", &d) == TSR_OK && d == 1e300);
    cr_expect(tsr_gguf_get_f32(g, "f64.inf", &f) == TSR_OK && isinf(f));
    cr_expect_eq(tsr_gguf_get_u32(g, "f32", &u32), TSR_ETYPE, "floats are not integers");
    cr_expect(strstr(tsr_last_error(), "key 'f32' is a f32, not an integer"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_gguf_get_bool(g, "u8", &b), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_get_str(g, "u8", &s, NULL), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_get_u32(g, "str", &u32), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_get_u32(g, "missing", &u32), TSR_ENOTFOUND);
    cr_expect(strstr(tsr_last_error(), "no key 'missing'"), "%s", tsr_last_error());
    cr_expect_eq(tsr_gguf_get_u32(g, "arr", &u32), TSR_ETYPE);
    cr_expect(strstr(tsr_last_error(), "is an array of i16, not a single value"), "%s",
              tsr_last_error());
    tsr_gguf_array a;
    cr_expect_eq(tsr_gguf_get_array(g, "u32", &a), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_get_array(g, "missing", &a), TSR_ENOTFOUND);
    cr_expect(tsr_gguf_array_i64(g, "arr", 0, &i64) == TSR_OK && i64 == -7);
    cr_expect_eq(tsr_gguf_array_u64(g, "arr", 0, &u64), TSR_ERANGE);
    cr_expect(strstr(tsr_last_error(), "key 'arr' element 0 = -7 (i16) does not fit u64"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_gguf_array_i64(g, "arr", 2, &i64), TSR_ERANGE);
    cr_expect_eq(tsr_gguf_array_str(g, "arr", 0, &s, NULL), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_get_u32(g, NULL, &u32), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_get_u32(g, "u32", NULL), TSR_EINVAL);
    tsr_gguf_close(g);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
}

/* ---- the writer ------------------------------------------------------------------------ */

Test(writer, refuses_what_llama_cpp_could_not_read)
{
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    const float x[64] = {0};
    const int64_t ne[] = {4, 4};
    char name64[65];
    memset(name64, 'n', 64);
    name64[64] = '\0';
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, name64, TSR_TYPE_F32, 2, ne, x), TSR_EINVAL);
    name64[63] = '\0';
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, name64, TSR_TYPE_F32, 2, ne, x), TSR_OK);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, name64, TSR_TYPE_F32, 2, ne, x), TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "added twice"), "%s", tsr_last_error());
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "", TSR_TYPE_F32, 2, ne, x), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", TSR_TYPE_F32, 0, ne, x), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", TSR_TYPE_F32, 5, ne, x), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", TSR_TYPE_F32, 2, (const int64_t[]){4, 0}, x),
                 TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", TSR_TYPE_Q8_0, 1, (const int64_t[]){31}, x),
                 TSR_EINVAL);
    cr_expect(strstr(tsr_last_error(), "not a multiple of the q8_0 block (32)"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", (tsr_type)99, 1, ne, x), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_writer_add_tensor(w, "t", TSR_TYPE_F32, 1, ne, NULL), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_alignment(w, 3), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_alignment(w, 1u << 21), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_i32(w, "general.alignment", 64), TSR_ETYPE);
    cr_expect_eq(tsr_gguf_writer_set_u32(w, "", 1), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_str(w, "k", NULL), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_array(w, "k", TSR_GGUF_TYPE_STRING, x, 1), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_array(w, "k", TSR_GGUF_TYPE_ARRAY, x, 1), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_array(w, "k", TSR_GGUF_TYPE_UINT8, NULL, 1), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_writer_set_str_array(w, "k", (const char *const[]){"a", NULL}, 2),
                 TSR_EINVAL);
    /* Many tensors: duplicate detection stays exact past table growth. */
    char name[32];
    for (int k = 0; k < 3000; k++) {
        snprintf(name, sizeof(name), "blk.%d.w", k);
        cr_assert_eq(tsr_gguf_writer_add_tensor(w, name, TSR_TYPE_F32, 1, ne, x), TSR_OK);
    }
    for (int k = 0; k < 3000; k += 97) {
        snprintf(name, sizeof(name), "blk.%d.w", k);
        cr_assert_eq(tsr_gguf_writer_add_tensor(w, name, TSR_TYPE_F32, 1, ne, x), TSR_EINVAL);
    }
    tsr_gguf_writer_free(w);
    tsr_gguf_writer_free(NULL);
}
