/* tests/test_gguf_malformed.c — malformed GGUF files: every truncation,
 * thousands of seeded random mutations, absurd counts and lengths, bad
 * alignment, overlapping and out-of-file tensors, unknown types,
 * duplicates, deep nesting — each must give a clean error (or a valid
 * parse), never a crash or a read out of bounds (the ASan pass checks the
 * latter: every parse reads from an exactly-sized heap copy); and file
 * errors of the reader and writer.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp, strdup */

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_testutil.h"
#include "gguf_walk.h"
#include "testutil.h"

/* ---- malformed files ---------------------------------------------------------------------- */

/* A valid file with a bit of everything, from the writer. */
static uint8_t *sample_file(size_t *n)
{
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    write_golden(w);
    const float f[] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int32_t i[] = {-1, 2, -3};
    cr_assert_eq(tsr_gguf_writer_add_tensor(w, "c", TSR_TYPE_F32, 3, (const int64_t[]){2, 2, 2}, f),
                 TSR_OK);
    cr_assert_eq(tsr_gguf_writer_add_tensor(w, "d", TSR_TYPE_I32, 1, (const int64_t[]){3}, i),
                 TSR_OK);
    cr_assert_eq(tsr_gguf_writer_add_tensor(w, "e", TSR_TYPE_BF16, 2, (const int64_t[]){4, 1}, f),
                 TSR_OK);
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/sample.gguf", dir);
    cr_assert_eq(tsr_gguf_writer_write(w, path), TSR_OK, "%s", tsr_last_error());
    uint8_t *p = read_file(path, n);
    tmpdir_free(dir);
    tsr_gguf_writer_free(w);
    return p;
}

Test(malformed, every_truncation_is_a_clean_error)
{
    size_t n;
    uint8_t *file = sample_file(&n);
    /* Where the last tensor's data end: a prefix that keeps them is valid. */
    tsr_gguf *g;
    cr_assert_eq(tsr_gguf_open_memory(file, n, &g), TSR_OK, "%s", tsr_last_error());
    uint64_t end = 0;
    for (size_t k = 0; k < tsr_gguf_tensor_count(g); k++) {
        const tsr_gguf_tensor *t = tsr_gguf_tensor_at(g, k);
        end = MAX(end, t->offset + t->size);
    }
    tsr_gguf_close(g);
    cr_assert_lt(end, n);
    int errors = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *prefix = malloc(len ? len : 1);
        memcpy(prefix, file, len);
        g = NULL;
        const tsr_status st = tsr_gguf_open_memory(prefix, len, &g);
        if (len < end) {
            cr_assert_eq(st, TSR_EFORMAT, "prefix of %zu bytes: %s", len, tsr_status_name(st));
            cr_assert(strncmp(tsr_last_error(), "gguf: <memory>: ", 16) == 0, "%s",
                      tsr_last_error());
            cr_assert(strstr(tsr_last_error(), "byte") != NULL, "%zu: no byte offset in '%s'", len,
                      tsr_last_error());
            errors++;
        } else {
            cr_assert_eq(st, TSR_OK, "prefix of %zu bytes (data end at %llu): %s", len,
                         (unsigned long long)end, tsr_last_error());
            tsr_gguf_close(g);
        }
        free(prefix);
    }
    cr_log_info("%d truncations of a %zu-byte file refused", errors, n);
    free(file);
}

Test(malformed, random_mutations_never_crash)
{
    const uint64_t seed = 20240611;
    cr_log_info("seed %llu", (unsigned long long)seed);
    tu_rng rng = {seed};
    size_t n;
    uint8_t *file = sample_file(&n);
    static const uint64_t interesting[] = {0,          1,          0x7f,       0xff,
                                           0x8000,     0xffff,     0x7fffffff, 0xffffffff,
                                           1ull << 32, 1ull << 60, INT64_MAX,  UINT64_MAX};
    int ok = 0, refused = 0;
    enum { N = 20000 };
    for (int it = 0; it < N; it++) {
        size_t len = n;
        uint8_t *m = malloc(n);
        memcpy(m, file, n);
        const int edits = 1 + (int)(tu_next(&rng) % 3);
        for (int k = 0; k < edits; k++) {
            const size_t at = (size_t)(tu_next(&rng) % len);
            switch (tu_next(&rng) % 5) {
            case 0: /* flip a bit */
                m[at] ^= (uint8_t)(1u << (tu_next(&rng) % 8));
                break;
            case 1: /* any byte */
                m[at] = (uint8_t)tu_next(&rng);
                break;
            case 2: { /* an interesting 8- or 4-byte value */
                const uint64_t v = interesting[tu_next(&rng) % ARRAY_SIZE(interesting)];
                const size_t w = tu_next(&rng) % 2 ? 8 : 4;
                for (size_t b = 0; b < w && at + b < len; b++)
                    m[at + b] = (uint8_t)(v >> (8 * b));
                break;
            }
            case 3: /* cut the file */
                len = at + 1;
                break;
            default: { /* delete a range */
                const size_t want = 1 + (size_t)(tu_next(&rng) % 16);
                const size_t cut = MIN(len - at, want);
                memmove(m + at, m + at + cut, len - at - cut);
                len -= cut;
                if (len == 0)
                    len = 1;
                break;
            }
            }
        }
        uint8_t *exact = malloc(len);
        memcpy(exact, m, len);
        free(m);
        tsr_gguf *g = NULL;
        const tsr_status st = tsr_gguf_open_memory(exact, len, &g);
        if (st == TSR_OK) {
            const char *bad;
            gguf_walk(g, &bad);
            cr_assert_null(bad, "iteration %d: %s failed on a file that opened", it, bad);
            tsr_gguf_close(g);
            ok++;
        } else {
            cr_assert(st == TSR_EFORMAT || st == TSR_ETYPE, "iteration %d: %s", it,
                      tsr_status_name(st));
            cr_assert(strncmp(tsr_last_error(), "gguf: <memory>: ", 16) == 0, "%s",
                      tsr_last_error());
            cr_assert_null(g);
            refused++;
        }
        free(exact);
    }
    cr_log_info("%d mutated files: %d opened, %d refused", N, ok, refused);
    cr_expect_gt(refused, N / 2);
    free(file);
}

Test(malformed, absurd_counts_and_lengths)
{
    enc e = {0};
    e_header(&e, 3, 1ull << 60, 0);
    e_put(&e, (uint8_t[76]){0}, 76); /* a 100-byte file */
    expect_error(&e, TSR_EFORMAT, "claims 1152921504606846976 tensors");
    e.n = 0;
    e_header(&e, 3, 0, UINT64_MAX);
    expect_error(&e, TSR_EFORMAT, "keys, more than the 0 bytes after it can hold");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_u64(&e, 1ull << 63); /* key length */
    e_u32(&e, 4);
    e_u32(&e, 0);
    expect_error(&e, TSR_EFORMAT, "the key at byte 24 has a length of 9223372036854775808 bytes");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 9), e_u32(&e, 4), e_u64(&e, 1ull << 62), e_u32(&e, 0);
    expect_error(&e, TSR_EFORMAT, "elements of type u32 (at least 4 bytes each) do not fit");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 9), e_u32(&e, 8), e_u64(&e, UINT64_MAX), e_u64(&e, 0);
    expect_error(&e, TSR_EFORMAT, "elements of type string");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 8), e_u64(&e, 100), e_put(&e, "abc", 3);
    expect_error(&e, TSR_EFORMAT, "kv 0 'k': a string at byte 37 has a length of 100 bytes");
    free(e.p);
}

Test(malformed, bad_types_and_shapes)
{
    enc e = {0};
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 13), e_u32(&e, 0);
    expect_error(&e, TSR_EFORMAT, "value type 13 at byte 33 is not a GGUF type");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 9), e_u32(&e, 99), e_u64(&e, 0);
    expect_error(&e, TSR_EFORMAT, "element type 99 is not a GGUF type");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 7), e_le(&e, 2, 1);
    expect_error(&e, TSR_EFORMAT, "bool at byte 37 is 2, neither 0 nor 1");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_str(&e, "k"), e_u32(&e, 9), e_u32(&e, 7), e_u64(&e, 2), e_le(&e, 1, 1), e_le(&e, 9, 1);
    expect_error(&e, TSR_EFORMAT, "bool element 1 is 9");

    const struct {
        uint32_t n_dims;
        uint64_t ne[5];
        uint32_t ggml;
        tsr_status want;
        const char *msg;
    } cases[] = {
        {5, {1, 1, 1, 1, 1}, 0, TSR_EFORMAT, "tensor 0 'w': 5 dimensions (at most 4)"},
        {2, {4, 0}, 0, TSR_EFORMAT, "dimension 1 is 0"},
        {1, {1ull << 63}, 0, TSR_EFORMAT, "dimension 0 is 9223372036854775808"},
        {2, {1ull << 32, 1ull << 32}, 0, TSR_EFORMAT, "more elements than fit in 64 bits"},
        {2, {1ull << 40, 1ull << 22}, 0, TSR_EFORMAT, "do not fit in memory"},
        {1, {33}, 8, TSR_EFORMAT, "q8_0 rows of 33 elements are not a multiple of the block (32)"},
        {1, {32}, 12, TSR_ETYPE, "tensor 0 'w': ggml type 12 (q4_K) is not one of tessera's"},
        {1, {32}, 1000, TSR_ETYPE, "ggml type 1000 (unknown)"},
    };
    for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
        e.n = 0;
        e_header(&e, 3, 1, 0);
        e_tinfo(&e, "w", cases[k].n_dims, cases[k].ne, cases[k].ggml, 0);
        e_pad(&e, 32);
        e_put(&e, (uint8_t[256]){0}, 256);
        expect_error(&e, cases[k].want, cases[k].msg);
    }
    /* Names: too long, holding a NUL; keys holding a NUL. */
    e.n = 0;
    e_header(&e, 3, 1, 0);
    e_tinfo(&e, "a-name-of-sixty-five-bytes-is-one-byte-longer-than-the-spec-allows", 1,
            (const uint64_t[]){1}, 0, 0);
    expect_error(&e, TSR_EFORMAT, "is 66 bytes long (at most 64)");
    e.n = 0;
    e_header(&e, 3, 1, 0);
    e_u64(&e, 3), e_put(&e, "a\0b", 3), e_u32(&e, 1), e_u64(&e, 1), e_u32(&e, 0), e_u64(&e, 0);
    expect_error(&e, TSR_EFORMAT, "tensor 0 'a?b': the name holds a NUL byte");
    e.n = 0;
    e_header(&e, 3, 0, 1);
    e_u64(&e, 2), e_put(&e, "k\0", 2), e_u32(&e, 0), e_le(&e, 0, 1);
    expect_error(&e, TSR_EFORMAT, "the key holds a NUL byte");
    free(e.p);
}

Test(malformed, magic_and_short_files)
{
    enc e = {0};
    expect_error(&e, TSR_EFORMAT, "a file of 0 bytes is too short");
    e_put(&e, "GGML\x03\0\0\0", 8);
    e_put(&e, (uint8_t[16]){0}, 16);
    expect_error(&e, TSR_EFORMAT, "not a GGUF file: it starts with 47 47 4d 4c ('GGML')");
    e.n = 0;
    e_put(&e, "GGUF\x03\0\0\0", 8);
    expect_error(&e, TSR_EFORMAT, "truncated header: 8 bytes");
    free(e.p);
}

/* A file with general.alignment of `type` (u32 unless told) = align, and
 * tensors "t0", "t1" (F32 [8]: 32 bytes) at the given offsets. */
static void two_tensors(enc *e, uint32_t align_type, uint64_t align, uint64_t off0, uint64_t off1,
                        const char *name1, size_t data_bytes)
{
    e->n = 0;
    e_header(e, 3, 2, 1);
    e_str(e, "general.alignment");
    e_u32(e, align_type);
    e_le(e, align, (int)(align_type == 4 ? 4 : 8));
    e_tinfo(e, "t0", 1, (const uint64_t[]){8}, 0, off0);
    e_tinfo(e, name1, 1, (const uint64_t[]){8}, 0, off1);
    e_pad(e, 32);
    for (size_t k = 0; k < data_bytes; k++)
        e_le(e, k, 1);
}

Test(malformed, alignment_offsets_overlaps_and_duplicates)
{
    enc e = {0};
    two_tensors(&e, 4, 32, 0, 32, "t1", 64);
    tsr_gguf *g;
    uint8_t *copy;
    cr_assert_eq(open_enc(&e, &g, &copy), TSR_OK, "the base case is valid: %s", tsr_last_error());
    tsr_gguf_close(g);
    free(copy);
    two_tensors(&e, 4, 0, 0, 32, "t1", 64);
    expect_error(&e, TSR_EFORMAT, "general.alignment (kv 0 at byte 24) is 0, not a power of two");
    two_tensors(&e, 4, 48, 0, 48, "t1", 96);
    expect_error(&e, TSR_EFORMAT, "general.alignment (kv 0 at byte 24) is 48, not a power of two");
    two_tensors(&e, 10, 32, 0, 32, "t1", 64);
    expect_error(&e, TSR_EFORMAT, "general.alignment (kv 0 at byte 24) is of type u64, not u32");
    two_tensors(&e, 4, 32, 0, 40, "t1", 96);
    expect_error(&e, TSR_EFORMAT,
                 "tensor 't1' (info at byte 91): offset 40 (from the data section) is not a "
                 "multiple of the alignment (32)");
    two_tensors(&e, 4, 16, 0, 16, "t1", 64);
    expect_error(&e, TSR_EFORMAT, "tensors 't0' [");
    cr_expect(strstr(tsr_last_error(), "+32) and 't1' [") && strstr(tsr_last_error(), "overlap"),
              "%s", tsr_last_error());
    two_tensors(&e, 4, 32, 32, 0, "t1", 64);
    expect_error(&e, TSR_OK, ""); /* out of order but disjoint: fine */
    two_tensors(&e, 4, 32, 0, 0, "t1", 64);
    expect_error(&e, TSR_EFORMAT, "overlap");
    two_tensors(&e, 4, 32, 0, 32, "t0", 64);
    expect_error(&e, TSR_EFORMAT,
                 "tensor name 't0' appears twice (tensors 0 and 1, infos at bytes 57 and 91)");
    two_tensors(&e, 4, 32, 0, 32, "t1", 63);
    expect_error(&e, TSR_EFORMAT, "tensor 't1' data [");
    cr_expect(strstr(tsr_last_error(), ", +32) runs past the end of the file ("), "%s",
              tsr_last_error());
    two_tensors(&e, 4, 32, 0, UINT64_MAX - 31, "t1", 64);
    expect_error(&e, TSR_EFORMAT, "runs past the end of the file");
    two_tensors(&e, 4, 1u << 31, 0, 1u << 31, "t1", 0);
    expect_error(&e, TSR_EFORMAT,
                 "the data section starts at byte 2147483648 (after padding to "
                 "2147483648), past the end of the file");
    /* Duplicate keys. */
    e.n = 0;
    e_header(&e, 3, 0, 3);
    e_kv_u32(&e, "a", 1);
    e_kv_u32(&e, "b", 2);
    e_kv_u32(&e, "a", 3);
    expect_error(&e, TSR_EFORMAT, "key 'a' appears twice (kvs 0 and 2, at bytes 24 and 58)");
    free(e.p);
}

/* A key holding `depth` arrays nested in one another around one u8. */
static void nested(enc *e, int depth)
{
    e->n = 0;
    e_header(e, 3, 0, 1);
    e_str(e, "deep");
    e_u32(e, 9);
    for (int d = 1; d < depth; d++)
        e_u32(e, 9), e_u64(e, 1);
    e_u32(e, 0), e_u64(e, 1), e_le(e, 42, 1);
}

Test(malformed, nesting_deeper_than_the_limit_is_refused)
{
    enc e = {0};
    nested(&e, TSR_GGUF_MAX_DEPTH);
    tsr_gguf *g;
    uint8_t *copy;
    cr_assert_eq(open_enc(&e, &g, &copy), TSR_OK, "%d levels: %s", TSR_GGUF_MAX_DEPTH,
                 tsr_last_error());
    tsr_gguf_array a;
    cr_expect(tsr_gguf_get_array(g, "deep", &a) == TSR_OK && a.type == TSR_GGUF_TYPE_ARRAY &&
              a.n == 1);
    tsr_gguf_close(g);
    free(copy);
    nested(&e, TSR_GGUF_MAX_DEPTH + 1);
    expect_error(&e, TSR_EFORMAT, "nested deeper than 8 levels");
    nested(&e, 100000); /* no recursion past the limit */
    expect_error(&e, TSR_EFORMAT, "nested deeper than 8 levels");
    free(e.p);
}

/* ---- files ------------------------------------------------------------------------------- */

Test(files, open_errors_name_the_file)
{
    tsr_gguf *g = (tsr_gguf *)1;
    cr_expect_eq(tsr_gguf_open("/nonexistent/x.gguf", &g), TSR_ENOTFOUND);
    cr_expect_null(g);
    cr_expect(strstr(tsr_last_error(), "gguf: /nonexistent/x.gguf: cannot open"), "%s",
              tsr_last_error());
    char *dir = tmpdir_new();
    cr_expect_eq(tsr_gguf_open(dir, &g), TSR_EIO);
    cr_expect(strstr(tsr_last_error(), "not a regular file"), "%s", tsr_last_error());
    char path[256];
    snprintf(path, sizeof(path), "%s/empty.gguf", dir);
    fclose(fopen(path, "wb"));
    cr_expect_eq(tsr_gguf_open(path, &g), TSR_EFORMAT);
    cr_expect(strstr(tsr_last_error(), "empty.gguf: a file of 0 bytes is too short"), "%s",
              tsr_last_error());
    cr_expect_eq(tsr_gguf_open(NULL, &g), TSR_EINVAL);
    cr_expect_eq(tsr_gguf_open_memory(NULL, 5, &g), TSR_EINVAL);
    tsr_gguf_close(NULL);
    tmpdir_free(dir);
}

static tsr_status fill_fails_late(void *user, const char *name, int64_t first, int64_t n, void *dst)
{
    (void)user, (void)name;
    memset(dst, 0, (size_t)n * 4);
    return first + n >= 3 * 1000000 ? TSR_EDEVICE : TSR_OK;
}

Test(files, a_failed_write_leaves_no_file_and_keeps_the_old_one)
{
    char *dir = tmpdir_new();
    char path[256];
    snprintf(path, sizeof(path), "%s/model.gguf", dir);
    FILE *f = fopen(path, "wb");
    fputs("old", f);
    fclose(f);
    tsr_gguf_writer *w;
    cr_assert_eq(tsr_gguf_writer_new(&w), TSR_OK);
    cr_assert_eq(tsr_gguf_writer_add_tensor_fn(w, "big", TSR_TYPE_F32, 2,
                                               (const int64_t[]){1000000, 4}, fill_fails_late,
                                               NULL),
                 TSR_OK);
    cr_expect_eq(tsr_gguf_writer_write(w, path), TSR_EDEVICE);
    cr_expect(strstr(tsr_last_error(), "the fill of tensor 'big' elements [2000000, +1000000) "
                                       "failed"),
              "%s", tsr_last_error());
    cr_expect_eq(dir_count(dir), 1, "no temporary left behind");
    size_t n;
    uint8_t *old = read_file(path, &n);
    cr_expect(n == 3 && !memcmp(old, "old", 3), "the old file is untouched");
    free(old);
    /* A directory that does not exist. */
    cr_expect_eq(tsr_gguf_writer_write(w, "/nonexistent/dir/x.gguf"), TSR_EIO);
    cr_expect(strstr(tsr_last_error(), "gguf: writing /nonexistent/dir/x.gguf: cannot create"),
              "%s", tsr_last_error());
    /* A path that is a directory: written, then refused at the rename. */
    tsr_gguf_writer *w2;
    cr_assert_eq(tsr_gguf_writer_new(&w2), TSR_OK);
    cr_expect_eq(tsr_gguf_writer_write(w2, dir), TSR_EIO);
    cr_expect(strstr(tsr_last_error(), "rename"), "%s", tsr_last_error());
    /* Success replaces the old file; writing again gives the same bytes. */
    cr_assert_eq(tsr_gguf_writer_write(w2, path), TSR_OK, "%s", tsr_last_error());
    uint8_t *a = read_file(path, &n);
    cr_assert_eq(tsr_gguf_writer_write(w2, path), TSR_OK);
    size_t n2;
    uint8_t *b = read_file(path, &n2);
    cr_expect(n == 32 && n2 == n && !memcmp(a, b, n),
              "an empty file is a 24-byte header + padding");
    cr_expect_eq(dir_count(dir), 1);
    free(a);
    free(b);
    tsr_gguf_writer_free(w);
    tsr_gguf_writer_free(w2);
    tmpdir_free(dir);
}
