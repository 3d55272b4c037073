/* tests/gguf_testutil.h — what the GGUF suites (test_gguf.c,
 * test_gguf_malformed.c) share: an encoder independent of the library, the
 * golden file built with it (and the same content through the writer),
 * opening from exactly-sized heap copies, expected errors, temporary
 * directories.
 */
#ifndef TESSERA_TESTS_GGUF_TESTUTIL_H
#define TESSERA_TESTS_GGUF_TESTUTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tessera/gguf.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- an independent encoder ----------------------------------------------------------- */

typedef struct enc {
    uint8_t *p;
    size_t n, cap;
} enc;

static inline void e_put(enc *e, const void *s, size_t n)
{
    if (e->n + n > e->cap) {
        e->cap = (e->n + n) * 2 + 64;
        e->p = realloc(e->p, e->cap);
        cr_assert_not_null(e->p);
    }
    if (n)
        memcpy(e->p + e->n, s, n);
    e->n += n;
}

static inline void e_le(enc *e, uint64_t v, int size)
{
    for (int i = 0; i < size; i++) {
        const uint8_t b = (uint8_t)(v >> (8 * i));
        e_put(e, &b, 1);
    }
}

static inline void e_u32(enc *e, uint64_t v) { e_le(e, v, 4); }
static inline void e_u64(enc *e, uint64_t v) { e_le(e, v, 8); }

static inline void e_str(enc *e, const char *s)
{
    e_u64(e, strlen(s));
    e_put(e, s, strlen(s));
}

static inline void e_pad(enc *e, size_t align)
{
    while (e->n % align)
        e_le(e, 0, 1);
}

static inline void e_header(enc *e, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    e_put(e, "GGUF", 4);
    e_u32(e, version);
    e_u64(e, n_tensors);
    e_u64(e, n_kv);
}

static inline void e_kv_u32(enc *e, const char *key, uint32_t v)
{
    e_str(e, key);
    e_u32(e, 4);
    e_u32(e, v);
}

static inline void e_kv_str(enc *e, const char *key, const char *v)
{
    e_str(e, key);
    e_u32(e, 8);
    e_str(e, v);
}

static inline void e_tinfo(enc *e, const char *name, uint32_t n_dims, const uint64_t *ne,
                           uint32_t ggml, uint64_t offset)
{
    e_str(e, name);
    e_u32(e, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        e_u64(e, ne[d]);
    e_u32(e, ggml);
    e_u64(e, offset);
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline uint64_t f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

/* ---- helpers -------------------------------------------------------------------------- */

/* Opens e from an exactly-sized heap copy; *copy must outlive the handle. */
static inline tsr_status open_enc(const enc *e, tsr_gguf **g, uint8_t **copy)
{
    *copy = malloc(e->n ? e->n : 1);
    cr_assert_not_null(*copy);
    if (e->n)
        memcpy(*copy, e->p, e->n);
    return tsr_gguf_open_memory(*copy, e->n, g);
}

/* The file must be refused with `want` and a message holding `substr`. */
static inline void expect_error(const enc *e, tsr_status want, const char *substr)
{
    tsr_gguf *g = NULL;
    uint8_t *copy;
    const tsr_status st = open_enc(e, &g, &copy);
    cr_expect_eq(st, want, "expected %s, got %s: %s", tsr_status_name(want), tsr_status_name(st),
                 tsr_last_error());
    if (want == TSR_OK || st == TSR_OK) {
        tsr_gguf_close(g);
        free(copy);
        return;
    }
    cr_expect_null(g, "no handle on error");
    cr_expect(strstr(tsr_last_error(), substr) != NULL, "message '%s' lacks '%s'", tsr_last_error(),
              substr);
    cr_expect(strncmp(tsr_last_error(), "gguf: <memory>: ", 16) == 0, "message '%s'",
              tsr_last_error());
    tsr_gguf_close(g);
    free(copy);
}

static inline char *tmpdir_new(void)
{
    char *dir = strdup("/tmp/tsr_gguf_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return dir;
}

static inline int dir_count(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static inline void tmpdir_free(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        char path[512];
        for (struct dirent *de; (de = readdir(d));) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static inline uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    cr_assert_eq(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

/* ---- the golden file ------------------------------------------------------------------ */

#define GOLDEN_ALIGN 64

static const float golden_a[6] = {0.0f, 1.0f, -2.5f, 3.25f, 1e-3f, -1e9f};

static inline void golden_b(tsr_block_q8_0 *b)
{
    memset(b, 0, sizeof(*b));
    b->d = tsr_f32_to_fp16(0.5f);
    for (int i = 0; i < TSR_QK8_0; i++)
        b->qs[i] = (int8_t)(i * 7 - 100);
}

/* Encodes the golden file by hand: every scalar type, number, bool and
 * string arrays, (nested) an array of arrays, and two tensors at alignment
 * 64: "a" F32 [3, 2] and "blk.0.b" Q8_0 [32]. */
static inline void golden(enc *e, uint32_t version, bool nested)
{
    e_header(e, version, 2, nested ? 19 : 18);
    e_kv_str(e, "general.architecture", "golden");
    e_kv_u32(e, "general.alignment", GOLDEN_ALIGN);
    e_str(e, "t.u8"), e_u32(e, 0), e_le(e, 200, 1);
    e_str(e, "t.i8"), e_u32(e, 1), e_le(e, (uint64_t)-100, 1);
    e_str(e, "t.u16"), e_u32(e, 2), e_le(e, 60000, 2);
    e_str(e, "t.i16"), e_u32(e, 3), e_le(e, (uint64_t)-30000, 2);
    e_str(e, "t.u32"), e_u32(e, 4), e_le(e, 4000000000u, 4);
    e_str(e, "t.i32"), e_u32(e, 5), e_le(e, (uint64_t)-2000000000, 4);
    e_str(e, "t.u64"), e_u32(e, 10), e_le(e, 0xfedcba9876543210ull, 8);
    e_str(e, "t.i64"), e_u32(e, 11), e_le(e, (uint64_t)INT64_MIN, 8);
    e_str(e, "t.f32"), e_u32(e, 6), e_le(e, f32_bits(1.5f), 4);
    e_str(e, "t.f64"), e_u32(e, 12), e_le(e, f64_bits(-2.25), 8);
    e_str(e, "t.bool"), e_u32(e, 7), e_le(e, 1, 1);
    e_kv_str(e, "t.str_empty", "");
    e_str(e, "t.arr_i32"), e_u32(e, 9), e_u32(e, 5), e_u64(e, 3);
    e_u32(e, 1), e_u32(e, (uint64_t)-2), e_u32(e, 3);
    e_str(e, "t.arr_f32"), e_u32(e, 9), e_u32(e, 6), e_u64(e, 2);
    e_u32(e, f32_bits(0.5f)), e_u32(e, f32_bits(-1.0f));
    e_str(e, "t.arr_bool"), e_u32(e, 9), e_u32(e, 7), e_u64(e, 3);
    e_le(e, 1, 1), e_le(e, 0, 1), e_le(e, 1, 1);
    e_str(e, "t.arr_str"), e_u32(e, 9), e_u32(e, 8), e_u64(e, 3);
    e_str(e, "a"), e_str(e, ""), e_str(e, "bcd");
    if (nested) { /* [[1, 2], [], [7]] of u16 */
        e_str(e, "t.nested"), e_u32(e, 9), e_u32(e, 9), e_u64(e, 3);
        e_u32(e, 2), e_u64(e, 2), e_le(e, 1, 2), e_le(e, 2, 2);
        e_u32(e, 2), e_u64(e, 0);
        e_u32(e, 2), e_u64(e, 1), e_le(e, 7, 2);
    }
    e_tinfo(e, "a", 2, (const uint64_t[]){3, 2}, 0, 0);
    e_tinfo(e, "blk.0.b", 1, (const uint64_t[]){32}, 8, 64);
    e_pad(e, GOLDEN_ALIGN);
    e_put(e, golden_a, sizeof(golden_a));
    e_pad(e, GOLDEN_ALIGN);
    tsr_block_q8_0 b;
    golden_b(&b);
    e_put(e, &b, sizeof(b));
    e_pad(e, GOLDEN_ALIGN);
}

static inline void write_golden(tsr_gguf_writer *w)
{
    static const int32_t ai[] = {1, -2, 3};
    static const float af[] = {0.5f, -1.0f};
    static const bool ab[] = {true, false, true};
    static const char *const as[] = {"a", "", "bcd"};
    cr_assert_eq(tsr_gguf_writer_set_str(w, "general.architecture", "golden"), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_alignment(w, GOLDEN_ALIGN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u8(w, "t.u8", 200), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i8(w, "t.i8", -100), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u16(w, "t.u16", 60000), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i16(w, "t.i16", -30000), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u32(w, "t.u32", 4000000000u), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i32(w, "t.i32", -2000000000), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_u64(w, "t.u64", 0xfedcba9876543210ull), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_i64(w, "t.i64", INT64_MIN), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_f32(w, "t.f32", 1.5f), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_f64(w, "t.f64", -2.25), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_bool(w, "t.bool", true), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str(w, "t.str_empty", ""), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_array(w, "t.arr_i32", TSR_GGUF_TYPE_INT32, ai, 3), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_array(w, "t.arr_f32", TSR_GGUF_TYPE_FLOAT32, af, 2), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_array(w, "t.arr_bool", TSR_GGUF_TYPE_BOOL, ab, 3), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_set_str_array(w, "t.arr_str", as, 3), TSR_OK);
    cr_assert_eq(
        tsr_gguf_writer_add_tensor(w, "a", TSR_TYPE_F32, 2, (const int64_t[]){3, 2}, golden_a),
        TSR_OK);
}

#endif /* TESSERA_TESTS_GGUF_TESTUTIL_H */
