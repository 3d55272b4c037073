/* model/gguf_get.c — the GGUF reader's answers: keys, typed values, arrays
 * and tensors of a file that model/gguf.c opened and validated.
 *
 * Not the parser: nothing here can meet a malformed file, only questions the
 * file cannot answer (a missing key, a value of another type, a value out of
 * the asked type's range, an index past the end).
 *
 * Key design choice: numbers stay in the file's bytes and are decoded when
 * asked for into one of three kinds (unsigned, signed, float); each getter
 * is a range check on that kind, so a u32 getter takes an i64 that fits and
 * refuses a negative, with the value and both types in the message.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf_impl.h"

#define GGUF_TRY(expr)                 \
    do {                               \
        const tsr_status st_ = (expr); \
        if (st_ != TSR_OK)             \
            return st_;                \
    } while (0)

/* ---- accessors ------------------------------------------------------------------ */

uint32_t tsr_gguf_version(const tsr_gguf *g) { return g ? g->version : 0; }
size_t tsr_gguf_alignment(const tsr_gguf *g) { return g ? g->alignment : 0; }
size_t tsr_gguf_kv_count(const tsr_gguf *g) { return g ? g->n_kv : 0; }
size_t tsr_gguf_tensor_count(const tsr_gguf *g) { return g ? g->n_tensors : 0; }

const char *tsr_gguf_kv_key(const tsr_gguf *g, size_t i)
{
    return g && i < g->n_kv ? g->kvs[i].key : NULL;
}

tsr_gguf_type tsr_gguf_kv_type(const tsr_gguf *g, size_t i)
{
    return g && i < g->n_kv ? (tsr_gguf_type)g->kvs[i].type : TSR_GGUF_TYPE_INVALID;
}

int64_t tsr_gguf_find_key(const tsr_gguf *g, const char *key)
{
    const gguf_kv *kv = tsr__gguf_lookup(g, key);
    return kv ? (int64_t)(kv - g->kvs) : -1;
}

static int gguf_cmp_name_only(const void *name, const void *elem)
{
    return strcmp((const char *)name, (*(tsr_gguf_tensor *const *)elem)->name);
}

const tsr_gguf_tensor *tsr_gguf_tensor_at(const tsr_gguf *g, size_t i)
{
    return g && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const tsr_gguf_tensor *tsr_gguf_tensor_by_name(const tsr_gguf *g, const char *name)
{
    if (!g || !name || g->n_tensors == 0)
        return NULL;
    tsr_gguf_tensor *const *hit =
        bsearch(name, g->t_sorted, g->n_tensors, sizeof(*g->t_sorted), gguf_cmp_name_only);
    return hit ? *hit : NULL;
}

/* ---- typed values ------------------------------------------------------------------ */

/* "key 'k'" or "key 'k' element 3", for messages. */
typedef struct gguf_label {
    char s[112];
} gguf_label;

static gguf_label gguf_label_of(const char *key, bool array, size_t i)
{
    gguf_label l;
    char q[72];
    tsr__gguf_quote(q, sizeof(q), key, strlen(key));
    if (array)
        snprintf(l.s, sizeof(l.s), "key '%s' element %zu", q, i);
    else
        snprintf(l.s, sizeof(l.s), "key '%s'", q);
    return l;
}

/* The bytes of scalar `key` (array = false) or of its element i. */
static tsr_status gguf_elem(const tsr_gguf *g, const char *key, bool array, size_t i,
                            const gguf_kv **kv_out, const uint8_t **p)
{
    if (!g || !key)
        return tsr__error(TSR_EINVAL, "gguf: get: NULL %s", g ? "key" : "handle");
    const gguf_kv *kv = tsr__gguf_lookup(g, key);
    char q[72];
    if (!kv)
        return tsr__error(TSR_ENOTFOUND, "gguf: %s: no key '%s'", g->file,
                          tsr__gguf_quote(q, sizeof(q), key, strlen(key)));
    const bool is_array = kv->type == TSR_GGUF_TYPE_ARRAY;
    if (is_array != array) {
        if (is_array)
            return tsr__error(TSR_ETYPE, "gguf: %s: key '%s' is an array of %s, not a single value",
                              g->file, tsr__gguf_quote(q, sizeof(q), key, strlen(key)),
                              tsr_gguf_type_name((tsr_gguf_type)kv->elem));
        return tsr__error(TSR_ETYPE, "gguf: %s: key '%s' is a %s, not an array", g->file,
                          tsr__gguf_quote(q, sizeof(q), key, strlen(key)),
                          tsr_gguf_type_name((tsr_gguf_type)kv->type));
    }
    if (array && i >= kv->n)
        return tsr__error(TSR_ERANGE, "gguf: %s: key '%s': element %zu of an array of %zu", g->file,
                          tsr__gguf_quote(q, sizeof(q), key, strlen(key)), i, kv->n);
    *kv_out = kv;
    const size_t size = tsr__gguf_type_size(kv->elem);
    *p = kv->raw ? kv->raw + (array ? i * size : 0) : NULL;
    return TSR_OK;
}

typedef enum { GGUF_NUM_U, GGUF_NUM_I, GGUF_NUM_F, GGUF_NUM_NONE } gguf_num_kind;

typedef struct gguf_num {
    gguf_num_kind kind;
    uint64_t u;
    int64_t i;
    double f;
} gguf_num;

static int64_t gguf_signed(uint64_t u, unsigned bits)
{
    const uint64_t sign = 1ull << (bits - 1);
    const uint64_t mask = bits == 64 ? UINT64_MAX : (sign << 1) - 1;
    u &= mask;
    return u & sign ? -(int64_t)((~u & mask)) - 1 : (int64_t)u;
}

static gguf_num gguf_decode(uint32_t type, const uint8_t *p)
{
    gguf_num n = {.kind = GGUF_NUM_NONE};
    switch (type) {
    case TSR_GGUF_TYPE_UINT8:
        n = (gguf_num){GGUF_NUM_U, p[0], 0, 0};
        break;
    case TSR_GGUF_TYPE_UINT16:
        n = (gguf_num){GGUF_NUM_U, gguf_le16(p), 0, 0};
        break;
    case TSR_GGUF_TYPE_UINT32:
        n = (gguf_num){GGUF_NUM_U, gguf_le32(p), 0, 0};
        break;
    case TSR_GGUF_TYPE_UINT64:
        n = (gguf_num){GGUF_NUM_U, gguf_le64(p), 0, 0};
        break;
    case TSR_GGUF_TYPE_INT8:
        n = (gguf_num){GGUF_NUM_I, 0, gguf_signed(p[0], 8), 0};
        break;
    case TSR_GGUF_TYPE_INT16:
        n = (gguf_num){GGUF_NUM_I, 0, gguf_signed(gguf_le16(p), 16), 0};
        break;
    case TSR_GGUF_TYPE_INT32:
        n = (gguf_num){GGUF_NUM_I, 0, gguf_signed(gguf_le32(p), 32), 0};
        break;
    case TSR_GGUF_TYPE_INT64:
        n = (gguf_num){GGUF_NUM_I, 0, gguf_signed(gguf_le64(p), 64), 0};
        break;
    case TSR_GGUF_TYPE_FLOAT32: {
        const uint32_t b = gguf_le32(p);
        float f;
        memcpy(&f, &b, sizeof(f));
        n = (gguf_num){GGUF_NUM_F, 0, 0, f};
        break;
    }
    case TSR_GGUF_TYPE_FLOAT64: {
        const uint64_t b = gguf_le64(p);
        memcpy(&n.f, &b, sizeof(n.f));
        n.kind = GGUF_NUM_F;
        break;
    }
    default:
        break;
    }
    return n;
}

static tsr_status gguf_not(const tsr_gguf *g, const gguf_kv *kv, bool array, size_t i,
                           const char *want)
{
    return tsr__error(TSR_ETYPE, "gguf: %s: %s is a %s, not %s", g->file,
                      gguf_label_of(kv->key, array, i).s,
                      tsr_gguf_type_name((tsr_gguf_type)kv->elem), want);
}

/* An integer value in [lo, hi] (signed targets) as int64. */
static tsr_status gguf_get_signed(const tsr_gguf *g, const char *key, bool array, size_t i,
                                  int64_t lo, int64_t hi, const char *want, int64_t *out)
{
    const gguf_kv *kv;
    const uint8_t *p;
    GGUF_TRY(gguf_elem(g, key, array, i, &kv, &p));
    const gguf_num n = p ? gguf_decode(kv->elem, p) : (gguf_num){.kind = GGUF_NUM_NONE};
    if (n.kind != GGUF_NUM_U && n.kind != GGUF_NUM_I)
        return gguf_not(g, kv, array, i, "an integer");
    if (n.kind == GGUF_NUM_U ? n.u > (uint64_t)hi : (n.i < lo || n.i > hi)) {
        char v[32];
        if (n.kind == GGUF_NUM_U)
            snprintf(v, sizeof(v), "%" PRIu64, n.u);
        else
            snprintf(v, sizeof(v), "%" PRId64, n.i);
        return tsr__error(TSR_ERANGE, "gguf: %s: %s = %s (%s) does not fit %s", g->file,
                          gguf_label_of(kv->key, array, i).s, v,
                          tsr_gguf_type_name((tsr_gguf_type)kv->elem), want);
    }
    *out = n.kind == GGUF_NUM_U ? (int64_t)n.u : n.i;
    return TSR_OK;
}

static tsr_status gguf_get_unsigned(const tsr_gguf *g, const char *key, bool array, size_t i,
                                    uint64_t hi, const char *want, uint64_t *out)
{
    const gguf_kv *kv;
    const uint8_t *p;
    GGUF_TRY(gguf_elem(g, key, array, i, &kv, &p));
    const gguf_num n = p ? gguf_decode(kv->elem, p) : (gguf_num){.kind = GGUF_NUM_NONE};
    if (n.kind != GGUF_NUM_U && n.kind != GGUF_NUM_I)
        return gguf_not(g, kv, array, i, "an integer");
    if (n.kind == GGUF_NUM_I ? (n.i < 0 || (uint64_t)n.i > hi) : n.u > hi) {
        char v[32];
        if (n.kind == GGUF_NUM_U)
            snprintf(v, sizeof(v), "%" PRIu64, n.u);
        else
            snprintf(v, sizeof(v), "%" PRId64, n.i);
        return tsr__error(TSR_ERANGE, "gguf: %s: %s = %s (%s) does not fit %s", g->file,
                          gguf_label_of(kv->key, array, i).s, v,
                          tsr_gguf_type_name((tsr_gguf_type)kv->elem), want);
    }
    *out = n.kind == GGUF_NUM_U ? n.u : (uint64_t)n.i;
    return TSR_OK;
}

static tsr_status gguf_get_float(const tsr_gguf *g, const char *key, bool array, size_t i, bool f32,
                                 double *out)
{
    const gguf_kv *kv;
    const uint8_t *p;
    GGUF_TRY(gguf_elem(g, key, array, i, &kv, &p));
    const gguf_num n = p ? gguf_decode(kv->elem, p) : (gguf_num){.kind = GGUF_NUM_NONE};
    double v = 0;
    switch (n.kind) {
    case GGUF_NUM_U:
        v = (double)n.u;
        break;
    case GGUF_NUM_I:
        v = (double)n.i;
        break;
    case GGUF_NUM_F:
        v = n.f;
        break;
    default:
        return gguf_not(g, kv, array, i, "a number");
    }
    if (f32 && isfinite(v) && fabs(v) > FLT_MAX)
        return tsr__error(TSR_ERANGE, "gguf: %s: %s = %g (%s) does not fit f32", g->file,
                          gguf_label_of(kv->key, array, i).s, v,
                          tsr_gguf_type_name((tsr_gguf_type)kv->elem));
    *out = v;
    return TSR_OK;
}

static tsr_status gguf_get_bool(const tsr_gguf *g, const char *key, bool array, size_t i, bool *out)
{
    const gguf_kv *kv;
    const uint8_t *p;
    GGUF_TRY(gguf_elem(g, key, array, i, &kv, &p));
    if (kv->elem != TSR_GGUF_TYPE_BOOL)
        return gguf_not(g, kv, array, i, "a bool");
    *out = p[0] != 0;
    return TSR_OK;
}

static tsr_status gguf_get_str(const tsr_gguf *g, const char *key, bool array, size_t i,
                               const char **out, size_t *len)
{
    const gguf_kv *kv;
    const uint8_t *p;
    GGUF_TRY(gguf_elem(g, key, array, i, &kv, &p));
    if (kv->elem != TSR_GGUF_TYPE_STRING)
        return gguf_not(g, kv, array, i, "a string");
    const gguf_str *s = &g->strs[kv->str0 + (array ? i : 0)];
    *out = s->s;
    if (len)
        *len = s->len;
    return TSR_OK;
}

#define GGUF_CHECK_OUT(out)                                                      \
    do {                                                                         \
        if (!(out))                                                              \
            return tsr__error(TSR_EINVAL, "gguf: %s: output is NULL", __func__); \
    } while (0)

tsr_status tsr_gguf_get_bool(const tsr_gguf *g, const char *key, bool *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_bool(g, key, false, 0, out);
}

tsr_status tsr_gguf_get_i32(const tsr_gguf *g, const char *key, int32_t *out)
{
    GGUF_CHECK_OUT(out);
    int64_t v = 0;
    GGUF_TRY(gguf_get_signed(g, key, false, 0, INT32_MIN, INT32_MAX, "i32", &v));
    *out = (int32_t)v;
    return TSR_OK;
}

tsr_status tsr_gguf_get_u32(const tsr_gguf *g, const char *key, uint32_t *out)
{
    GGUF_CHECK_OUT(out);
    uint64_t v = 0;
    GGUF_TRY(gguf_get_unsigned(g, key, false, 0, UINT32_MAX, "u32", &v));
    *out = (uint32_t)v;
    return TSR_OK;
}

tsr_status tsr_gguf_get_i64(const tsr_gguf *g, const char *key, int64_t *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_signed(g, key, false, 0, INT64_MIN, INT64_MAX, "i64", out);
}

tsr_status tsr_gguf_get_u64(const tsr_gguf *g, const char *key, uint64_t *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_unsigned(g, key, false, 0, UINT64_MAX, "u64", out);
}

tsr_status tsr_gguf_get_f32(const tsr_gguf *g, const char *key, float *out)
{
    GGUF_CHECK_OUT(out);
    double v = 0;
    GGUF_TRY(gguf_get_float(g, key, false, 0, true, &v));
    *out = (float)v;
    return TSR_OK;
}

tsr_status tsr_gguf_get_f64(const tsr_gguf *g, const char *key, double *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_float(g, key, false, 0, false, out);
}

tsr_status tsr_gguf_get_str(const tsr_gguf *g, const char *key, const char **out, size_t *len)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_str(g, key, false, 0, out, len);
}

tsr_status tsr_gguf_get_array(const tsr_gguf *g, const char *key, tsr_gguf_array *out)
{
    GGUF_CHECK_OUT(out);
    const gguf_kv *kv;
    const uint8_t *p;
    /* Element 0 of an empty array is out of range: look the key up as a
     * scalar-or-array first. */
    if (!g || !key)
        return tsr__error(TSR_EINVAL, "gguf: get_array: NULL %s", g ? "key" : "handle");
    kv = tsr__gguf_lookup(g, key);
    if (kv && kv->type == TSR_GGUF_TYPE_ARRAY) {
        out->type = (tsr_gguf_type)kv->elem;
        out->n = kv->n;
        out->data = tsr__gguf_type_size(kv->elem) ? kv->raw : NULL;
        return TSR_OK;
    }
    return gguf_elem(g, key, true, 0, &kv, &p); /* the not-found / not-an-array error */
}

tsr_status tsr_gguf_array_bool(const tsr_gguf *g, const char *key, size_t i, bool *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_bool(g, key, true, i, out);
}

tsr_status tsr_gguf_array_i64(const tsr_gguf *g, const char *key, size_t i, int64_t *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_signed(g, key, true, i, INT64_MIN, INT64_MAX, "i64", out);
}

tsr_status tsr_gguf_array_u64(const tsr_gguf *g, const char *key, size_t i, uint64_t *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_unsigned(g, key, true, i, UINT64_MAX, "u64", out);
}

tsr_status tsr_gguf_array_f64(const tsr_gguf *g, const char *key, size_t i, double *out)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_float(g, key, true, i, false, out);
}

tsr_status tsr_gguf_array_str(const tsr_gguf *g, const char *key, size_t i, const char **out,
                              size_t *len)
{
    GGUF_CHECK_OUT(out);
    return gguf_get_str(g, key, true, i, out, len);
}
