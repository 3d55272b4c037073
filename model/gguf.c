/* model/gguf.c — the GGUF reader's parser: maps a file (or takes a range of
 * memory), validates all of it up front and builds the records the getters
 * (gguf_get.c) answer from.
 *
 * Not the getters, not the writer (gguf_write.c), and not a model loader:
 * which keys and tensors mean what is the model layer's business. Tensor
 * data are never read here; tsr_gguf_tensor.data points into the mapping.
 *
 * Key design choice: two passes over one parser. The first pass validates
 * everything and counts (keys, tensors, strings, string bytes); the second
 * allocates exactly that and fills it. What is allocated is therefore bounded
 * by what the file really holds — a header claiming 2^60 tensors fails in the
 * first pass after reading at most the bytes that exist — and both passes
 * share every check, so they cannot disagree. Strings are copied
 * NUL-terminated into one pool; numbers stay in the mapping and are decoded,
 * with range checks, when asked for.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf_impl.h"

/* The smallest encodings, to bound counts by the bytes left: a header is
 * magic, version and two u64 counts; a kv a key (u64 length) + a type (u32)
 * + at least one byte; a tensor info a name (u64 length) + n_dims (u32) +
 * type (u32) + offset (u64); an array element at least one byte, a string 8,
 * an array 12. */
#define GGUF_HEADER_BYTES 24u
#define GGUF_MIN_KV 13u
#define GGUF_MIN_TENSOR 24u
#define GGUF_MAX_NAME_READ 64u /* the spec's limit on tensor names */

#define GGUF_TRY(expr)                 \
    do {                               \
        const tsr_status st_ = (expr); \
        if (st_ != TSR_OK)             \
            return st_;                \
    } while (0)

/* One pass over the bytes. In the first pass g is NULL and the pass only
 * counts; in the second it fills g. */
typedef struct gguf_rd {
    const uint8_t *p;
    size_t size;
    size_t pos;
    const char *file;
    char where[160]; /* the item being read, for messages: "kv 3 'general.name'" */
    tsr_gguf *g;
    uint64_t n_kv, n_tensors; /* from the header */
    size_t n_strs, pool_used; /* counted, then filled */
    size_t info_end;          /* the byte after the last tensor info */
} gguf_rd;

/* ---- shared helpers --------------------------------------------------------- */

static const size_t gguf_type_sizes[TSR_GGUF_TYPE_COUNT] = {
    [TSR_GGUF_TYPE_UINT8] = 1,   [TSR_GGUF_TYPE_INT8] = 1,    [TSR_GGUF_TYPE_UINT16] = 2,
    [TSR_GGUF_TYPE_INT16] = 2,   [TSR_GGUF_TYPE_UINT32] = 4,  [TSR_GGUF_TYPE_INT32] = 4,
    [TSR_GGUF_TYPE_FLOAT32] = 4, [TSR_GGUF_TYPE_BOOL] = 1,    [TSR_GGUF_TYPE_UINT64] = 8,
    [TSR_GGUF_TYPE_INT64] = 8,   [TSR_GGUF_TYPE_FLOAT64] = 8,
};

size_t tsr__gguf_type_size(uint32_t type)
{
    return type < TSR_GGUF_TYPE_COUNT ? gguf_type_sizes[type] : 0;
}

uint32_t tsr__gguf_ggml_type(tsr_type type)
{
    switch (type) {
    case TSR_TYPE_F32:
        return TSR__GGML_F32;
    case TSR_TYPE_F16:
        return TSR__GGML_F16;
    case TSR_TYPE_BF16:
        return TSR__GGML_BF16;
    case TSR_TYPE_Q8_0:
        return TSR__GGML_Q8_0;
    case TSR_TYPE_I32:
        return TSR__GGML_I32;
    default:
        return UINT32_MAX;
    }
}

const char *tsr_gguf_type_name(tsr_gguf_type type)
{
    static const char *const names[TSR_GGUF_TYPE_COUNT] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                           "i32", "f32", "bool", "string", "array",
                                                           "u64", "i64", "f64"};
    return type >= 0 && type < TSR_GGUF_TYPE_COUNT ? names[type] : "?";
}

static bool gguf_from_ggml(uint32_t ggml, tsr_type *out)
{
    switch (ggml) {
    case TSR__GGML_F32:
        *out = TSR_TYPE_F32;
        return true;
    case TSR__GGML_F16:
        *out = TSR_TYPE_F16;
        return true;
    case TSR__GGML_BF16:
        *out = TSR_TYPE_BF16;
        return true;
    case TSR__GGML_Q8_0:
        *out = TSR_TYPE_Q8_0;
        return true;
    case TSR__GGML_I32:
        *out = TSR_TYPE_I32;
        return true;
    default:
        return false;
    }
}

/* ggml's names of its types, for messages about the ones tessera lacks. */
static const char *gguf_ggml_name(uint32_t ggml)
{
    static const char *const names[] = {
        [0] = "f32",     [1] = "f16",      [2] = "q4_0",   [3] = "q4_1",    [6] = "q5_0",
        [7] = "q5_1",    [8] = "q8_0",     [9] = "q8_1",   [10] = "q2_K",   [11] = "q3_K",
        [12] = "q4_K",   [13] = "q5_K",    [14] = "q6_K",  [15] = "q8_K",   [16] = "iq2_xxs",
        [17] = "iq2_xs", [18] = "iq3_xxs", [19] = "iq1_s", [20] = "iq4_nl", [21] = "iq3_s",
        [22] = "iq2_s",  [23] = "iq4_xs",  [24] = "i8",    [25] = "i16",    [26] = "i32",
        [27] = "i64",    [28] = "f64",     [29] = "iq1_m", [30] = "bf16",   [34] = "tq1_0",
        [35] = "tq2_0",  [39] = "mxfp4"};
    const char *n = ggml < TSR_ARRAY_SIZE(names) ? names[ggml] : NULL;
    return n ? n : "unknown";
}

const char *tsr__gguf_quote(char *buf, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    const size_t max = cap - 4; /* room for "..." and the NUL */
    for (size_t i = 0; i < len && n < max; i++) {
        const unsigned char c = (unsigned char)s[i];
        buf[n++] = c >= 0x20 && c < 0x7f && c != '\'' ? (char)c : '?';
    }
    if (n < len) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* ---- the parser --------------------------------------------------------------- */

static tsr_status gguf_fail(const gguf_rd *r, tsr_status status, const char *fmt, ...)
    TSR__PRINTF(3, 4);

static tsr_status gguf_fail(const gguf_rd *r, tsr_status status, const char *fmt, ...)
{
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return tsr__error(status, "gguf: %s: %s%s%s", r->file, r->where, r->where[0] ? ": " : "", msg);
}

static tsr_status gguf_need(const gguf_rd *r, size_t n, const char *what)
{
    if (r->size - r->pos >= n)
        return TSR_OK;
    return gguf_fail(r, TSR_EFORMAT,
                     "truncated: %s at byte %zu needs %zu bytes, the file ends at byte %zu", what,
                     r->pos, n, r->size);
}

static tsr_status gguf_u32(gguf_rd *r, const char *what, uint32_t *v)
{
    GGUF_TRY(gguf_need(r, 4, what));
    *v = gguf_le32(r->p + r->pos);
    r->pos += 4;
    return TSR_OK;
}

static tsr_status gguf_u64(gguf_rd *r, const char *what, uint64_t *v)
{
    GGUF_TRY(gguf_need(r, 8, what));
    *v = gguf_le64(r->p + r->pos);
    r->pos += 8;
    return TSR_OK;
}

/* A u64 length and that many bytes (not NUL-terminated in the file). */
static tsr_status gguf_string(gguf_rd *r, const char *what, const uint8_t **s, size_t *len)
{
    const size_t at = r->pos;
    uint64_t n;
    GGUF_TRY(gguf_u64(r, what, &n));
    if (n > r->size - r->pos)
        return gguf_fail(r, TSR_EFORMAT,
                         "%s at byte %zu has a length of %" PRIu64
                         " bytes, past the end of the file (%zu bytes left)",
                         what, at, n, r->size - r->pos);
    *s = r->p + r->pos;
    *len = (size_t)n;
    r->pos += (size_t)n;
    return TSR_OK;
}

/* Copies a string into the pool (second pass) or counts it (first). The
 * bounds are checked again in the second pass: a file changed between the
 * passes must not write past what the first pass counted. */
static tsr_status gguf_keep(gguf_rd *r, const uint8_t *s, size_t len, const char **out)
{
    if (r->g) {
        if (len >= r->g->pool_size - r->pool_used)
            return gguf_fail(r, TSR_EFORMAT, "the file changed while being read");
        char *d = r->g->pool + r->pool_used;
        memcpy(d, s, len);
        d[len] = '\0';
        *out = d;
    }
    r->pool_used += len + 1;
    return TSR_OK;
}

/* A string value to keep (a scalar or an element of a top-level array). */
static tsr_status gguf_keep_value(gguf_rd *r, const uint8_t *s, size_t len)
{
    const char *copy = NULL;
    if (r->g && r->n_strs >= r->g->n_strs)
        return gguf_fail(r, TSR_EFORMAT, "the file changed while being read");
    GGUF_TRY(gguf_keep(r, s, len, &copy));
    if (r->g)
        r->g->strs[r->n_strs] = (gguf_str){copy, len};
    r->n_strs++;
    return TSR_OK;
}

static tsr_status gguf_array(gguf_rd *r, int depth, bool keep, gguf_kv *kv);

/* A value of `type` at r->pos. keep: strings are kept (top level and the
 * elements of a top-level array; deeper ones are only checked). kv: the
 * record to fill (second pass, top level). */
static tsr_status gguf_value(gguf_rd *r, uint32_t type, int depth, bool keep, gguf_kv *kv)
{
    if (type == TSR_GGUF_TYPE_STRING) {
        const uint8_t *s;
        size_t len;
        GGUF_TRY(gguf_string(r, "a string", &s, &len));
        return keep ? gguf_keep_value(r, s, len) : TSR_OK;
    }
    if (type == TSR_GGUF_TYPE_ARRAY)
        return gguf_array(r, depth + 1, keep, kv);
    const size_t size = tsr__gguf_type_size(type);
    if (size == 0)
        return gguf_fail(r, TSR_EFORMAT,
                         "value type %" PRIu32 " at byte %zu is not a GGUF type (0..12)", type,
                         r->pos - 4);
    GGUF_TRY(gguf_need(r, size, "the value"));
    if (type == TSR_GGUF_TYPE_BOOL && r->p[r->pos] > 1)
        return gguf_fail(r, TSR_EFORMAT, "bool at byte %zu is %u, neither 0 nor 1", r->pos,
                         r->p[r->pos]);
    if (kv)
        kv->raw = r->p + r->pos;
    r->pos += size;
    return TSR_OK;
}

static tsr_status gguf_array(gguf_rd *r, int depth, bool keep, gguf_kv *kv)
{
    const size_t at = r->pos;
    if (depth > TSR_GGUF_MAX_DEPTH)
        return gguf_fail(r, TSR_EFORMAT, "array at byte %zu nested deeper than %d levels", at,
                         TSR_GGUF_MAX_DEPTH);
    uint32_t elem;
    uint64_t n;
    GGUF_TRY(gguf_u32(r, "the array's element type", &elem));
    GGUF_TRY(gguf_u64(r, "the array's length", &n));
    if (elem >= TSR_GGUF_TYPE_COUNT)
        return gguf_fail(r, TSR_EFORMAT,
                         "array at byte %zu: element type %" PRIu32 " is not a GGUF type (0..12)",
                         at, elem);
    const size_t left = r->size - r->pos;
    const size_t fixed = tsr__gguf_type_size(elem);
    const size_t min = fixed ? fixed : elem == TSR_GGUF_TYPE_STRING ? 8 : 12;
    if (n > left / min)
        return gguf_fail(r, TSR_EFORMAT,
                         "array at byte %zu: %" PRIu64
                         " elements of type %s (at least %zu bytes each) do not fit in the %zu "
                         "bytes left",
                         at, n, tsr_gguf_type_name((tsr_gguf_type)elem), min, left);
    if (kv) {
        kv->elem = elem;
        kv->n = (size_t)n;
        kv->str0 = r->n_strs;
    }
    if (fixed) {
        if (elem == TSR_GGUF_TYPE_BOOL)
            for (size_t i = 0; i < (size_t)n; i++)
                if (r->p[r->pos + i] > 1)
                    return gguf_fail(r, TSR_EFORMAT,
                                     "array at byte %zu: bool element %zu is %u, neither 0 nor 1",
                                     at, i, r->p[r->pos + i]);
        if (kv)
            kv->raw = r->p + r->pos;
        r->pos += (size_t)n * fixed;
        return TSR_OK;
    }
    for (size_t i = 0; i < (size_t)n; i++)
        GGUF_TRY(gguf_value(r, elem, depth, keep && depth == 1, NULL));
    return TSR_OK;
}

/* r->where = "<what> <i> '<name>'". */
static void gguf_set_where(gguf_rd *r, const char *what, size_t i, const uint8_t *name, size_t len)
{
    char q[72];
    if (name)
        snprintf(r->where, sizeof(r->where), "%s %zu '%s'", what, i,
                 tsr__gguf_quote(q, sizeof(q), (const char *)name, len));
    else
        snprintf(r->where, sizeof(r->where), "%s %zu", what, i);
}

static tsr_status gguf_header(gguf_rd *r)
{
    if (r->size < 4)
        return gguf_fail(r, TSR_EFORMAT,
                         "a file of %zu bytes is too short for a GGUF header (%u bytes)", r->size,
                         GGUF_HEADER_BYTES);
    if (memcmp(r->p, TSR__GGUF_MAGIC, 4) != 0) {
        char q[8];
        return gguf_fail(r, TSR_EFORMAT,
                         "not a GGUF file: it starts with %02x %02x %02x %02x ('%s'), not 'GGUF'",
                         r->p[0], r->p[1], r->p[2], r->p[3],
                         tsr__gguf_quote(q, sizeof(q), (const char *)r->p, 4));
    }
    if (r->size < GGUF_HEADER_BYTES)
        return gguf_fail(r, TSR_EFORMAT, "truncated header: %zu bytes, a GGUF header takes %u",
                         r->size, GGUF_HEADER_BYTES);
    const uint32_t version = gguf_le32(r->p + 4);
    if (version == 1)
        return gguf_fail(r, TSR_EFORMAT, "GGUF version 1 is not supported (versions 2 and 3 are)");
    if (version != 2 && version != 3) {
        if ((version & 0xffffu) == 0)
            return gguf_fail(r, TSR_EFORMAT,
                             "GGUF version 0x%08" PRIx32
                             ": a big-endian file? Only little-endian files are read",
                             version);
        return gguf_fail(r, TSR_EFORMAT,
                         "GGUF version %" PRIu32 " is not supported (versions 2 and 3 are)",
                         version);
    }
    r->n_tensors = gguf_le64(r->p + 8);
    r->n_kv = gguf_le64(r->p + 16);
    r->pos = GGUF_HEADER_BYTES;
    const size_t left = r->size - r->pos;
    if (r->n_kv > left / GGUF_MIN_KV || r->n_tensors > left / GGUF_MIN_TENSOR ||
        r->n_kv * GGUF_MIN_KV + r->n_tensors * GGUF_MIN_TENSOR > left)
        return gguf_fail(r, TSR_EFORMAT,
                         "the header claims %" PRIu64 " tensors and %" PRIu64
                         " keys, more than the %zu bytes after it can hold (a tensor info takes "
                         "at least %u bytes, a key %u)",
                         r->n_tensors, r->n_kv, left, GGUF_MIN_TENSOR, GGUF_MIN_KV);
    if (r->g) {
        if (r->n_kv != r->g->n_kv || r->n_tensors != r->g->n_tensors)
            return gguf_fail(r, TSR_EFORMAT, "the file changed while being read");
        r->g->version = version;
    }
    return TSR_OK;
}

static tsr_status gguf_kvs(gguf_rd *r)
{
    for (size_t i = 0; i < (size_t)r->n_kv; i++) {
        const size_t at = r->pos;
        gguf_set_where(r, "kv", i, NULL, 0);
        const uint8_t *key;
        size_t len;
        GGUF_TRY(gguf_string(r, "the key", &key, &len));
        gguf_set_where(r, "kv", i, key, len);
        if (memchr(key, 0, len))
            return gguf_fail(r, TSR_EFORMAT, "the key holds a NUL byte");
        gguf_kv *kv = r->g ? &r->g->kvs[i] : NULL;
        const char *copy = NULL;
        GGUF_TRY(gguf_keep(r, key, len, &copy));
        uint32_t type;
        GGUF_TRY(gguf_u32(r, "the value type", &type));
        if (kv)
            *kv = (gguf_kv){
                .key = copy, .type = type, .elem = type, .n = 1, .str0 = r->n_strs, .at = at};
        GGUF_TRY(gguf_value(r, type, 0, true, kv));
    }
    r->where[0] = '\0';
    return TSR_OK;
}

static tsr_status gguf_tensor_infos(gguf_rd *r)
{
    for (size_t i = 0; i < (size_t)r->n_tensors; i++) {
        gguf_set_where(r, "tensor info", i, NULL, 0);
        const size_t at = r->pos;
        const uint8_t *name;
        size_t len;
        GGUF_TRY(gguf_string(r, "the name", &name, &len));
        if (len > GGUF_MAX_NAME_READ)
            return gguf_fail(r, TSR_EFORMAT, "name at byte %zu is %zu bytes long (at most %u)", at,
                             len, GGUF_MAX_NAME_READ);
        gguf_set_where(r, "tensor", i, name, len);
        if (memchr(name, 0, len))
            return gguf_fail(r, TSR_EFORMAT, "the name holds a NUL byte");
        const char *copy = NULL;
        GGUF_TRY(gguf_keep(r, name, len, &copy));

        uint32_t n_dims;
        GGUF_TRY(gguf_u32(r, "n_dims", &n_dims));
        if (n_dims > TSR_MAX_DIMS)
            return gguf_fail(r, TSR_EFORMAT, "%" PRIu32 " dimensions (at most %d)", n_dims,
                             TSR_MAX_DIMS);
        int64_t ne[TSR_MAX_DIMS] = {1, 1, 1, 1};
        int64_t nel = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t v;
            GGUF_TRY(gguf_u64(r, "a dimension", &v));
            if (v == 0 || v > (uint64_t)INT64_MAX)
                return gguf_fail(r, TSR_EFORMAT,
                                 "dimension %" PRIu32 " is %" PRIu64 " (must be 1..2^63-1)", d, v);
            ne[d] = (int64_t)v;
            if (__builtin_mul_overflow(nel, ne[d], &nel))
                return gguf_fail(r, TSR_EFORMAT,
                                 "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                                 "] has more elements than fit in 64 bits",
                                 ne[0], ne[1], ne[2], ne[3]);
        }
        uint32_t ggml;
        GGUF_TRY(gguf_u32(r, "the type", &ggml));
        tsr_type type;
        if (!gguf_from_ggml(ggml, &type))
            return gguf_fail(r, TSR_ETYPE,
                             "ggml type %" PRIu32
                             " (%s) is not one of tessera's (f32, f16, bf16, q8_0, i32)",
                             ggml, gguf_ggml_name(ggml));
        const int64_t block = tsr_type_block_size(type);
        if (ne[0] % block != 0)
            return gguf_fail(r, TSR_EFORMAT,
                             "%s rows of %" PRId64
                             " elements are not a multiple of the block (%" PRId64 ")",
                             tsr_type_name(type), ne[0], block);
        size_t bytes;
        if (!tsr__mul_ok((size_t)(nel / block), tsr_type_size(type), &bytes))
            return gguf_fail(r, TSR_EFORMAT, "%" PRId64 " elements of %s do not fit in memory", nel,
                             tsr_type_name(type));
        uint64_t offset;
        GGUF_TRY(gguf_u64(r, "the offset", &offset));
        if (r->g) {
            tsr_gguf_tensor *t = &r->g->tensors[i];
            r->g->t_at[i] = at;
            *t = (tsr_gguf_tensor){
                .name = copy, .type = type, .n_dims = (int)n_dims, .offset = offset, .size = bytes};
            memcpy(t->ne, ne, sizeof(ne));
        }
    }
    r->where[0] = '\0';
    r->info_end = r->pos;
    return TSR_OK;
}

static tsr_status gguf_pass(gguf_rd *r)
{
    r->pos = 0;
    r->n_strs = 0;
    r->pool_used = 0;
    r->where[0] = '\0';
    GGUF_TRY(gguf_header(r));
    GGUF_TRY(gguf_kvs(r));
    return gguf_tensor_infos(r);
}

/* ---- lookups ----------------------------------------------------------------------- */

static int gguf_cmp_key_only(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(gguf_kv *const *)elem)->key);
}

const gguf_kv *tsr__gguf_lookup(const tsr_gguf *g, const char *key)
{
    if (!g || !key || g->n_kv == 0)
        return NULL;
    gguf_kv *const *hit =
        bsearch(key, g->kv_sorted, g->n_kv, sizeof(*g->kv_sorted), gguf_cmp_key_only);
    return hit ? *hit : NULL;
}

/* ---- checks across items (second pass) ---------------------------------------- */

static int gguf_cmp_kv(const void *a, const void *b)
{
    const gguf_kv *x = *(gguf_kv *const *)a, *y = *(gguf_kv *const *)b;
    const int c = strcmp(x->key, y->key);
    return c ? c : (x > y) - (x < y);
}

static int gguf_cmp_name(const void *a, const void *b)
{
    const tsr_gguf_tensor *x = *(tsr_gguf_tensor *const *)a, *y = *(tsr_gguf_tensor *const *)b;
    const int c = strcmp(x->name, y->name);
    return c ? c : (x > y) - (x < y);
}

static int gguf_cmp_offset(const void *a, const void *b)
{
    const tsr_gguf_tensor *x = *(tsr_gguf_tensor *const *)a, *y = *(tsr_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

static tsr_status gguf_check_alignment(gguf_rd *r)
{
    tsr_gguf *g = r->g;
    g->alignment = TSR_GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = tsr__gguf_lookup(g, TSR__GGUF_KEY_ALIGNMENT);
    if (!kv)
        return TSR_OK;
    if (kv->type != TSR_GGUF_TYPE_UINT32)
        return gguf_fail(r, TSR_EFORMAT, "%s (kv %zu at byte %zu) is of type %s, not u32",
                         TSR__GGUF_KEY_ALIGNMENT, (size_t)(kv - g->kvs), kv->at,
                         tsr_gguf_type_name((tsr_gguf_type)kv->type));
    const uint32_t a = gguf_le32(kv->raw);
    if (a == 0 || (a & (a - 1)) != 0)
        return gguf_fail(r, TSR_EFORMAT,
                         "%s (kv %zu at byte %zu) is %" PRIu32 ", not a power of two",
                         TSR__GGUF_KEY_ALIGNMENT, (size_t)(kv - g->kvs), kv->at, a);
    g->alignment = a;
    return TSR_OK;
}

static tsr_status gguf_check_tensors(gguf_rd *r)
{
    tsr_gguf *g = r->g;
    char q1[72], q2[72];
    uint64_t data = (uint64_t)r->info_end;
    if (__builtin_add_overflow(data, (uint64_t)g->alignment - 1, &data))
        data = UINT64_MAX; /* only reached for absurd sizes: fails below */
    data = data / g->alignment * g->alignment;
    if (g->n_tensors > 0 && data > g->size)
        return gguf_fail(r, TSR_EFORMAT,
                         "the data section starts at byte %" PRIu64
                         " (after padding to %zu), past the end of the file (%zu bytes)",
                         data, g->alignment, g->size);
    for (size_t i = 0; i < g->n_tensors; i++) {
        tsr_gguf_tensor *t = &g->tensors[i];
        const char *name = tsr__gguf_quote(q1, sizeof(q1), t->name, strlen(t->name));
        if (t->offset % g->alignment != 0)
            return gguf_fail(r, TSR_EFORMAT,
                             "tensor '%s' (info at byte %zu): offset %" PRIu64
                             " (from the data section) is not a multiple of the alignment (%zu)",
                             name, g->t_at[i], t->offset, g->alignment);
        const uint64_t rel = t->offset;
        if (rel > g->size - data || t->size > g->size - data - rel)
            return gguf_fail(r, TSR_EFORMAT,
                             "tensor '%s' data [%" PRIu64 ", +%zu) runs past the end of the file "
                             "(%zu bytes)",
                             name, rel > UINT64_MAX - data ? UINT64_MAX : data + rel, t->size,
                             g->size);
        t->offset = data + rel;
        t->data = g->base + t->offset;
    }
    /* Overlaps: sorted by offset, each must end before the next starts. */
    for (size_t i = 0; i < g->n_tensors; i++)
        g->t_sorted[i] = &g->tensors[i];
    qsort(g->t_sorted, g->n_tensors, sizeof(*g->t_sorted), gguf_cmp_offset);
    for (size_t i = 1; i < g->n_tensors; i++) {
        const tsr_gguf_tensor *a = g->t_sorted[i - 1], *b = g->t_sorted[i];
        if (a->offset + a->size > b->offset)
            return gguf_fail(
                r, TSR_EFORMAT,
                "tensors '%s' [%" PRIu64 ", +%zu) and '%s' [%" PRIu64 ", +%zu) overlap",
                tsr__gguf_quote(q1, sizeof(q1), a->name, strlen(a->name)), a->offset, a->size,
                tsr__gguf_quote(q2, sizeof(q2), b->name, strlen(b->name)), b->offset, b->size);
    }
    /* Names: sorted for lookups, and no two alike. */
    qsort(g->t_sorted, g->n_tensors, sizeof(*g->t_sorted), gguf_cmp_name);
    for (size_t i = 1; i < g->n_tensors; i++) {
        const tsr_gguf_tensor *a = g->t_sorted[i - 1], *b = g->t_sorted[i];
        if (strcmp(a->name, b->name) == 0)
            return gguf_fail(r, TSR_EFORMAT,
                             "tensor name '%s' appears twice (tensors %zu and %zu, infos at bytes "
                             "%zu and %zu)",
                             tsr__gguf_quote(q1, sizeof(q1), a->name, strlen(a->name)),
                             (size_t)(a - g->tensors), (size_t)(b - g->tensors),
                             g->t_at[a - g->tensors], g->t_at[b - g->tensors]);
    }
    return TSR_OK;
}

static tsr_status gguf_finish(gguf_rd *r)
{
    tsr_gguf *g = r->g;
    char q[72];
    for (size_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = &g->kvs[i];
    qsort(g->kv_sorted, g->n_kv, sizeof(*g->kv_sorted), gguf_cmp_kv);
    for (size_t i = 1; i < g->n_kv; i++) {
        const gguf_kv *a = g->kv_sorted[i - 1], *b = g->kv_sorted[i];
        if (strcmp(a->key, b->key) == 0)
            return gguf_fail(r, TSR_EFORMAT,
                             "key '%s' appears twice (kvs %zu and %zu, at bytes %zu and %zu)",
                             tsr__gguf_quote(q, sizeof(q), a->key, strlen(a->key)),
                             (size_t)(a - g->kvs), (size_t)(b - g->kvs), a->at, b->at);
    }
    GGUF_TRY(gguf_check_alignment(r));
    return gguf_check_tensors(r);
}

/* ---- open and close ------------------------------------------------------------ */

static void gguf_free(tsr_gguf *g)
{
    if (!g)
        return;
    free(g->kvs);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    free(g->t_at);
    free(g->strs);
    free(g->pool);
    free(g->file);
    free(g);
}

static tsr_status gguf_open_bytes(const uint8_t *p, size_t size, const char *file, void *map,
                                  tsr_gguf **out)
{
    gguf_rd r = {.p = p, .size = size, .file = file};
    GGUF_TRY(gguf_pass(&r));

    tsr_gguf *g = calloc(1, sizeof(*g));
    if (!g)
        return tsr__error(TSR_ENOMEM, "gguf: %s: out of memory", file);
    g->base = p;
    g->size = size;
    g->n_kv = (size_t)r.n_kv;
    g->n_tensors = (size_t)r.n_tensors;
    g->n_strs = r.n_strs;
    g->pool_size = r.pool_used + 1;
    g->file = strdup(file);
    g->kvs = calloc(g->n_kv + 1, sizeof(*g->kvs));
    g->kv_sorted = calloc(g->n_kv + 1, sizeof(*g->kv_sorted));
    g->tensors = calloc(g->n_tensors + 1, sizeof(*g->tensors));
    g->t_sorted = calloc(g->n_tensors + 1, sizeof(*g->t_sorted));
    g->t_at = calloc(g->n_tensors + 1, sizeof(*g->t_at));
    g->strs = calloc(g->n_strs + 1, sizeof(*g->strs));
    g->pool = malloc(g->pool_size);
    if (!g->file || !g->kvs || !g->kv_sorted || !g->tensors || !g->t_sorted || !g->t_at ||
        !g->strs || !g->pool) {
        gguf_free(g);
        return tsr__error(TSR_ENOMEM,
                          "gguf: %s: out of memory for %zu keys, %zu tensors and %zu bytes of "
                          "strings",
                          file, (size_t)r.n_kv, (size_t)r.n_tensors, r.pool_used);
    }
    r.g = g;
    tsr_status st = gguf_pass(&r);
    if (st == TSR_OK && (r.n_strs != g->n_strs || r.pool_used + 1 != g->pool_size))
        st = gguf_fail(&r, TSR_EFORMAT, "the file changed while being read");
    if (st == TSR_OK)
        st = gguf_finish(&r);
    if (st != TSR_OK) {
        gguf_free(g);
        return st;
    }
    g->map = map;
    *out = g;
    return TSR_OK;
}

tsr_status tsr_gguf_open_memory(const void *data, size_t size, tsr_gguf **out)
{
    if (!out)
        return tsr__error(TSR_EINVAL, "gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size > 0)
        return tsr__error(TSR_EINVAL, "gguf_open_memory: data is NULL");
    return gguf_open_bytes(data ? data : (const void *)"", size, "<memory>", NULL, out);
}

static tsr_status gguf_sys_error(const char *path, const char *what, int err)
{
    char buf[128] = "unknown error";
    strerror_r(err, buf, sizeof(buf));
    const tsr_status st = err == ENOENT ? TSR_ENOTFOUND : err == ENOMEM ? TSR_ENOMEM : TSR_EIO;
    return tsr__error(st, "gguf: %s: %s: %s", path, what, buf);
}

tsr_status tsr_gguf_open(const char *path, tsr_gguf **out)
{
    if (!out)
        return tsr__error(TSR_EINVAL, "gguf_open: out is NULL");
    *out = NULL;
    if (!path)
        return tsr__error(TSR_EINVAL, "gguf_open: path is NULL");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gguf_sys_error(path, "cannot open", errno);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int err = errno;
        close(fd);
        return gguf_sys_error(path, "cannot stat", err);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return tsr__error(TSR_EIO, "gguf: %s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return tsr__error(TSR_EIO, "gguf: %s: %jd bytes do not fit in memory", path,
                          (intmax_t)sb.st_size);
    }
    const size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            const int err = errno;
            close(fd);
            return gguf_sys_error(path, "cannot map", err);
        }
    }
    close(fd);
    const tsr_status st = gguf_open_bytes(map ? map : (void *)"", size, path, map, out);
    if (st != TSR_OK && map)
        munmap(map, size);
    return st;
}

void tsr_gguf_close(tsr_gguf *g)
{
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->size);
    gguf_free(g);
}
