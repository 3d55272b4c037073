/* model/gguf_write.c — the GGUF writer: keys and tensor infos kept in memory,
 * tensor data streamed from the caller's pointers or fill callbacks into a
 * temporary file that is renamed into place once complete.
 *
 * Not the reader (gguf.c) and not an editor: keys can be set and replaced,
 * tensors only added. Nested arrays are not written (llama.cpp cannot read
 * them).
 *
 * Key design choice: every value is encoded into its file bytes when it is
 * set, so a write is a sequence of copies whose offsets are all known before
 * the first byte goes out; tensor data pass through at most one 4 MiB buffer,
 * so writing a 100 GB model takes no more memory than writing a small one.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf_impl.h"

#define GGUF_CHUNK ((size_t)4 << 20)   /* bytes per fill callback, at most */
#define GGUF_OUT_BUF ((size_t)1 << 18) /* buffered metadata writes */
#define GGUF_MAX_KEY 65535u

#define GGUF_TRY(expr)                 \
    do {                               \
        const tsr_status st_ = (expr); \
        if (st_ != TSR_OK)             \
            return st_;                \
    } while (0)

/* A growing byte string; oom sticks until the owner checks it. */
typedef struct gguf_bytes {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} gguf_bytes;

typedef struct gguf_wkv {
    char *key;
    uint32_t type;
    gguf_bytes val; /* the value's bytes as in the file, after the type */
} gguf_wkv;

typedef struct gguf_wtensor {
    char *name;
    tsr_type type;
    int n_dims;
    int64_t ne[TSR_MAX_DIMS];
    int64_t nel;
    size_t size;
    const void *data;
    tsr_gguf_fill_fn fill;
    void *user;
} gguf_wtensor;

struct tsr_gguf_writer {
    gguf_wkv *kvs;
    size_t n_kv, cap_kv;
    gguf_wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t *slots; /* tensor names, open addressing: index + 1, 0 when empty */
    size_t n_slots;
    uint32_t alignment;
};

/* ---- encoding -------------------------------------------------------------------- */

static void gb_reserve(gguf_bytes *b, size_t extra)
{
    if (b->oom || extra <= b->cap - b->n)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->n < extra) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return;
        }
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void gb_put(gguf_bytes *b, const void *src, size_t n)
{
    gb_reserve(b, n);
    if (b->oom || n == 0)
        return;
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* The low `size` bytes of v, little-endian. */
static void gb_le(gguf_bytes *b, uint64_t v, size_t size)
{
    uint8_t le[8];
    for (size_t i = 0; i < size; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    gb_put(b, le, size);
}

static void gb_str(gguf_bytes *b, const char *s, size_t len)
{
    gb_le(b, len, 8);
    gb_put(b, s, len);
}

static uint64_t gguf_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint64_t gguf_f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* Element i of a C array of `type` values, as the bits the file stores. */
static uint64_t gguf_c_value(uint32_t type, const void *values, size_t i)
{
    switch (type) {
    case TSR_GGUF_TYPE_UINT8:
        return ((const uint8_t *)values)[i];
    case TSR_GGUF_TYPE_INT8:
        return (uint64_t)(int64_t)((const int8_t *)values)[i];
    case TSR_GGUF_TYPE_UINT16:
        return ((const uint16_t *)values)[i];
    case TSR_GGUF_TYPE_INT16:
        return (uint64_t)(int64_t)((const int16_t *)values)[i];
    case TSR_GGUF_TYPE_UINT32:
        return ((const uint32_t *)values)[i];
    case TSR_GGUF_TYPE_INT32:
        return (uint64_t)(int64_t)((const int32_t *)values)[i];
    case TSR_GGUF_TYPE_UINT64:
        return ((const uint64_t *)values)[i];
    case TSR_GGUF_TYPE_INT64:
        return (uint64_t)((const int64_t *)values)[i];
    case TSR_GGUF_TYPE_FLOAT32:
        return gguf_f32_bits(((const float *)values)[i]);
    case TSR_GGUF_TYPE_FLOAT64:
        return gguf_f64_bits(((const double *)values)[i]);
    case TSR_GGUF_TYPE_BOOL:
        return ((const bool *)values)[i] ? 1 : 0;
    default:
        return 0;
    }
}

/* ---- the writer's state --------------------------------------------------------------- */

tsr_status tsr_gguf_writer_new(tsr_gguf_writer **out)
{
    if (!out)
        return tsr__error(TSR_EINVAL, "gguf writer: out is NULL");
    *out = calloc(1, sizeof(**out));
    if (!*out)
        return tsr__error(TSR_ENOMEM, "gguf writer: out of memory");
    (*out)->alignment = TSR_GGUF_DEFAULT_ALIGNMENT;
    return TSR_OK;
}

void tsr_gguf_writer_free(tsr_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val.p);
    }
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w->slots);
    free(w);
}

/* Grows an array of `size`-byte items to hold one more. */
static bool gguf_grow(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    const size_t new_cap = *cap ? *cap * 2 : 16;
    void *p = realloc(*items, new_cap * size);
    if (!p)
        return false;
    *items = p;
    *cap = new_cap;
    return true;
}

/* Sets `key` to an encoded value; takes ownership of val's bytes. */
static tsr_status gguf_w_set(tsr_gguf_writer *w, const char *key, uint32_t type, gguf_bytes *val)
{
    tsr_status st = TSR_OK;
    size_t len = key ? strlen(key) : 0;
    uint32_t align = 0;
    if (!w || !key || len == 0 || len > GGUF_MAX_KEY) {
        st = tsr__error(TSR_EINVAL, "gguf writer: %s key%s", !w ? "NULL writer for" : "bad",
                        !key       ? " (NULL)"
                        : len == 0 ? " (empty)"
                                   : " (longer than 65535 bytes)");
    } else if (val->oom) {
        st = tsr__error(TSR_ENOMEM, "gguf writer: out of memory for the value of key '%s'", key);
    } else if (strcmp(key, TSR__GGUF_KEY_ALIGNMENT) == 0) {
        if (type != TSR_GGUF_TYPE_UINT32) {
            st = tsr__error(TSR_ETYPE, "gguf writer: %s must be a u32, not %s",
                            TSR__GGUF_KEY_ALIGNMENT, tsr_gguf_type_name((tsr_gguf_type)type));
        } else {
            align = (uint32_t)val->p[0] | (uint32_t)val->p[1] << 8 | (uint32_t)val->p[2] << 16 |
                    (uint32_t)val->p[3] << 24;
            if (align == 0 || (align & (align - 1)) != 0 || align > TSR_GGUF_MAX_ALIGNMENT)
                st = tsr__error(TSR_EINVAL,
                                "gguf writer: %s %" PRIu32 " is not a power of two in [1, %u]",
                                TSR__GGUF_KEY_ALIGNMENT, align, TSR_GGUF_MAX_ALIGNMENT);
        }
    }
    if (st != TSR_OK) {
        free(val->p);
        return st;
    }
    gguf_wkv *kv = NULL;
    for (size_t i = 0; i < w->n_kv && !kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            kv = &w->kvs[i];
    if (kv) {
        free(kv->val.p);
    } else {
        char *copy = malloc(len + 1);
        if (!copy || !gguf_grow((void **)&w->kvs, &w->cap_kv, w->n_kv, sizeof(*w->kvs))) {
            free(copy);
            free(val->p);
            return tsr__error(TSR_ENOMEM, "gguf writer: out of memory for key '%s'", key);
        }
        memcpy(copy, key, len + 1);
        kv = &w->kvs[w->n_kv++];
        kv->key = copy;
    }
    kv->type = type;
    kv->val = *val;
    if (align)
        w->alignment = align;
    return TSR_OK;
}

static tsr_status gguf_w_scalar(tsr_gguf_writer *w, const char *key, uint32_t type, uint64_t bits)
{
    gguf_bytes b = {0};
    gb_le(&b, bits, tsr__gguf_type_size(type));
    return gguf_w_set(w, key, type, &b);
}

tsr_status tsr_gguf_writer_set_u8(tsr_gguf_writer *w, const char *key, uint8_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_UINT8, v);
}
tsr_status tsr_gguf_writer_set_i8(tsr_gguf_writer *w, const char *key, int8_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_INT8, (uint64_t)(int64_t)v);
}
tsr_status tsr_gguf_writer_set_u16(tsr_gguf_writer *w, const char *key, uint16_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_UINT16, v);
}
tsr_status tsr_gguf_writer_set_i16(tsr_gguf_writer *w, const char *key, int16_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_INT16, (uint64_t)(int64_t)v);
}
tsr_status tsr_gguf_writer_set_u32(tsr_gguf_writer *w, const char *key, uint32_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_UINT32, v);
}
tsr_status tsr_gguf_writer_set_i32(tsr_gguf_writer *w, const char *key, int32_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_INT32, (uint64_t)(int64_t)v);
}
tsr_status tsr_gguf_writer_set_u64(tsr_gguf_writer *w, const char *key, uint64_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_UINT64, v);
}
tsr_status tsr_gguf_writer_set_i64(tsr_gguf_writer *w, const char *key, int64_t v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_INT64, (uint64_t)v);
}
tsr_status tsr_gguf_writer_set_f32(tsr_gguf_writer *w, const char *key, float v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_FLOAT32, gguf_f32_bits(v));
}
tsr_status tsr_gguf_writer_set_f64(tsr_gguf_writer *w, const char *key, double v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_FLOAT64, gguf_f64_bits(v));
}
tsr_status tsr_gguf_writer_set_bool(tsr_gguf_writer *w, const char *key, bool v)
{
    return gguf_w_scalar(w, key, TSR_GGUF_TYPE_BOOL, v ? 1 : 0);
}
tsr_status tsr_gguf_writer_set_alignment(tsr_gguf_writer *w, uint32_t alignment)
{
    return tsr_gguf_writer_set_u32(w, TSR__GGUF_KEY_ALIGNMENT, alignment);
}

tsr_status tsr_gguf_writer_set_str(tsr_gguf_writer *w, const char *key, const char *v)
{
    if (!v)
        return tsr__error(TSR_EINVAL, "gguf writer: NULL string for key '%s'", key ? key : "?");
    gguf_bytes b = {0};
    gb_str(&b, v, strlen(v));
    return gguf_w_set(w, key, TSR_GGUF_TYPE_STRING, &b);
}

tsr_status tsr_gguf_writer_set_array(tsr_gguf_writer *w, const char *key, tsr_gguf_type type,
                                     const void *values, size_t n)
{
    const size_t size = type >= 0 ? tsr__gguf_type_size((uint32_t)type) : 0;
    size_t bytes;
    if (size == 0)
        return tsr__error(TSR_EINVAL, "gguf writer: key '%s': arrays of %s are not written (%s)",
                          key ? key : "?", tsr_gguf_type_name(type),
                          type == TSR_GGUF_TYPE_STRING  ? "use set_str_array"
                          : type == TSR_GGUF_TYPE_ARRAY ? "llama.cpp cannot read nested arrays"
                                                        : "not a GGUF type");
    if (!values && n > 0)
        return tsr__error(TSR_EINVAL, "gguf writer: key '%s': NULL values", key ? key : "?");
    if (!tsr__mul_ok(n, size, &bytes) || bytes > SIZE_MAX - 12)
        return tsr__error(TSR_ENOMEM, "gguf writer: key '%s': %zu elements are too many",
                          key ? key : "?", n);
    gguf_bytes b = {0};
    gb_reserve(&b, 12 + bytes);
    gb_le(&b, (uint64_t)type, 4);
    gb_le(&b, n, 8);
    for (size_t i = 0; i < n && !b.oom; i++)
        gb_le(&b, gguf_c_value((uint32_t)type, values, i), size);
    return gguf_w_set(w, key, TSR_GGUF_TYPE_ARRAY, &b);
}

tsr_status tsr_gguf_writer_set_str_array(tsr_gguf_writer *w, const char *key,
                                         const char *const *values, size_t n)
{
    if (!values && n > 0)
        return tsr__error(TSR_EINVAL, "gguf writer: key '%s': NULL values", key ? key : "?");
    gguf_bytes b = {0};
    gb_le(&b, TSR_GGUF_TYPE_STRING, 4);
    gb_le(&b, n, 8);
    for (size_t i = 0; i < n && !b.oom; i++) {
        if (!values[i]) {
            free(b.p);
            return tsr__error(TSR_EINVAL, "gguf writer: key '%s': string %zu is NULL",
                              key ? key : "?", i);
        }
        gb_str(&b, values[i], strlen(values[i]));
    }
    return gguf_w_set(w, key, TSR_GGUF_TYPE_ARRAY, &b);
}

/* ---- tensors ------------------------------------------------------------------------ */

static uint64_t gguf_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot of `name`: where it is, or the empty slot where it would go. */
static size_t gguf_slot(const tsr_gguf_writer *w, const char *name)
{
    size_t i = (size_t)gguf_hash(name) & (w->n_slots - 1);
    while (w->slots[i] && strcmp(w->tensors[w->slots[i] - 1].name, name) != 0)
        i = (i + 1) & (w->n_slots - 1);
    return i;
}

/* Keeps the table at most half full. */
static bool gguf_slots_grow(tsr_gguf_writer *w)
{
    if (w->n_slots && (w->n_tensors + 1) * 2 <= w->n_slots)
        return true;
    const size_t n = w->n_slots ? w->n_slots * 2 : 64;
    uint32_t *old = w->slots;
    w->slots = calloc(n, sizeof(*w->slots));
    if (!w->slots) {
        w->slots = old;
        return false;
    }
    w->n_slots = n;
    for (size_t i = 0; i < w->n_tensors; i++)
        w->slots[gguf_slot(w, w->tensors[i].name)] = (uint32_t)(i + 1);
    free(old);
    return true;
}

static tsr_status gguf_w_add(tsr_gguf_writer *w, const char *name, tsr_type type, int n_dims,
                             const int64_t *ne, const void *data, tsr_gguf_fill_fn fill, void *user)
{
    if (!w || !name)
        return tsr__error(TSR_EINVAL, "gguf writer: add_tensor: NULL %s", w ? "name" : "writer");
    const size_t len = strlen(name);
    if (len == 0 || len > TSR_GGUF_MAX_NAME)
        return tsr__error(TSR_EINVAL,
                          "gguf writer: tensor name '%.70s' is %zu bytes long (1..%d allowed)",
                          name, len, TSR_GGUF_MAX_NAME);
    if (!tsr_type_valid((int)type))
        return tsr__error(TSR_ETYPE, "gguf writer: tensor '%s': invalid type %d", name, (int)type);
    if (n_dims < 1 || n_dims > TSR_MAX_DIMS || !ne)
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': %d dimensions%s (1..%d allowed)",
                          name, n_dims, ne ? "" : " and NULL ne", TSR_MAX_DIMS);
    if (!data && !fill)
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': NULL data", name);
    gguf_wtensor t = {.type = type,
                      .n_dims = n_dims,
                      .ne = {1, 1, 1, 1},
                      .nel = 1,
                      .data = data,
                      .fill = fill,
                      .user = user};
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return tsr__error(TSR_EINVAL,
                              "gguf writer: tensor '%s': ne[%d] = %" PRId64 " (must be > 0)", name,
                              d, ne[d]);
        t.ne[d] = ne[d];
        if (__builtin_mul_overflow(t.nel, ne[d], &t.nel))
            return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': too many elements", name);
    }
    const int64_t block = tsr_type_block_size(type);
    if (t.ne[0] % block != 0)
        return tsr__error(TSR_EINVAL,
                          "gguf writer: tensor '%s': ne[0] = %" PRId64
                          " is not a multiple of the %s block (%" PRId64 ")",
                          name, t.ne[0], tsr_type_name(type), block);
    if (!tsr__mul_ok((size_t)(t.nel / block), tsr_type_size(type), &t.size) ||
        t.size > SIZE_MAX - TSR_GGUF_MAX_ALIGNMENT)
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': too many bytes", name);
    if (w->n_tensors >= UINT32_MAX - 1)
        return tsr__error(TSR_EINVAL, "gguf writer: too many tensors");
    if (!gguf_slots_grow(w))
        return tsr__error(TSR_ENOMEM, "gguf writer: out of memory for tensor '%s'", name);
    const size_t slot = gguf_slot(w, name);
    if (w->slots[slot])
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s' added twice", name);
    t.name = malloc(len + 1);
    if (!t.name ||
        !gguf_grow((void **)&w->tensors, &w->cap_tensors, w->n_tensors, sizeof(*w->tensors))) {
        free(t.name);
        return tsr__error(TSR_ENOMEM, "gguf writer: out of memory for tensor '%s'", name);
    }
    memcpy(t.name, name, len + 1);
    w->tensors[w->n_tensors++] = t;
    w->slots[slot] = (uint32_t)w->n_tensors;
    return TSR_OK;
}

tsr_status tsr_gguf_writer_add_tensor(tsr_gguf_writer *w, const char *name, tsr_type type,
                                      int n_dims, const int64_t *ne, const void *data)
{
    if (!data)
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': NULL data", name ? name : "?");
    return gguf_w_add(w, name, type, n_dims, ne, data, NULL, NULL);
}

tsr_status tsr_gguf_writer_add_tensor_fn(tsr_gguf_writer *w, const char *name, tsr_type type,
                                         int n_dims, const int64_t *ne, tsr_gguf_fill_fn fill,
                                         void *user)
{
    if (!fill)
        return tsr__error(TSR_EINVAL, "gguf writer: tensor '%s': NULL fill", name ? name : "?");
    return gguf_w_add(w, name, type, n_dims, ne, NULL, fill, user);
}

/* ---- writing --------------------------------------------------------------------------- */

typedef struct gguf_out {
    int fd;
    const char *path; /* the final path, for messages */
    uint8_t *buf;
    size_t n, cap;
    uint64_t written;
} gguf_out;

static tsr_status gguf_io_error(const char *path, const char *what, int err)
{
    char buf[128] = "unknown error";
    strerror_r(err, buf, sizeof(buf));
    return tsr__error(err == ENOMEM ? TSR_ENOMEM : TSR_EIO, "gguf: writing %s: %s: %s", path, what,
                      buf);
}

static tsr_status gguf_out_raw(gguf_out *o, const uint8_t *p, size_t n)
{
    while (n > 0) {
        const ssize_t k = write(o->fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return gguf_io_error(o->path, "write", errno);
        }
        p += k;
        n -= (size_t)k;
    }
    return TSR_OK;
}

static tsr_status gguf_out_flush(gguf_out *o)
{
    const size_t n = o->n;
    o->n = 0;
    return gguf_out_raw(o, o->buf, n);
}

static tsr_status gguf_out_put(gguf_out *o, const void *p, size_t n)
{
    o->written += n;
    if (n <= o->cap - o->n) {
        memcpy(o->buf + o->n, p, n);
        o->n += n;
        return TSR_OK;
    }
    GGUF_TRY(gguf_out_flush(o));
    if (n < o->cap) {
        memcpy(o->buf, p, n);
        o->n = n;
        return TSR_OK;
    }
    return gguf_out_raw(o, p, n);
}

static tsr_status gguf_out_le(gguf_out *o, uint64_t v, size_t size)
{
    uint8_t le[8];
    for (size_t i = 0; i < size; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    return gguf_out_put(o, le, size);
}

static tsr_status gguf_out_pad(gguf_out *o, size_t align)
{
    static const uint8_t zeros[4096];
    size_t pad = (size_t)((align - o->written % align) % align);
    while (pad > 0) {
        const size_t k = TSR_MIN(pad, sizeof(zeros));
        GGUF_TRY(gguf_out_put(o, zeros, k));
        pad -= k;
    }
    return TSR_OK;
}

static tsr_status gguf_out_fill(gguf_out *o, const gguf_wtensor *t, uint8_t *scratch)
{
    const int64_t block = tsr_type_block_size(t->type);
    const size_t tsize = tsr_type_size(t->type);
    const size_t row = tsr_row_size(t->type, t->ne[0]);
    /* Whole rows per chunk, or pieces of one row when a row is larger. */
    const bool whole_rows = row <= GGUF_CHUNK;
    const int64_t per =
        whole_rows ? (int64_t)(GGUF_CHUNK / row) * t->ne[0] : (int64_t)(GGUF_CHUNK / tsize) * block;
    for (int64_t first = 0; first < t->nel;) {
        int64_t n = TSR_MIN(per, t->nel - first);
        if (!whole_rows)
            n = TSR_MIN(n, t->ne[0] - first % t->ne[0]);
        const tsr_status st = t->fill(t->user, t->name, first, n, scratch);
        if (st != TSR_OK)
            return tsr__error(st,
                              "gguf: writing %s: the fill of tensor '%s' elements [%" PRId64
                              ", +%" PRId64 ") failed: %s",
                              o->path, t->name, first, n, tsr_status_str(st));
        GGUF_TRY(gguf_out_put(o, scratch, (size_t)(n / block) * tsize));
        first += n;
    }
    return TSR_OK;
}

static tsr_status gguf_out_all(const tsr_gguf_writer *w, gguf_out *o, uint8_t *scratch)
{
    GGUF_TRY(gguf_out_put(o, TSR__GGUF_MAGIC, 4));
    GGUF_TRY(gguf_out_le(o, TSR__GGUF_VERSION, 4));
    GGUF_TRY(gguf_out_le(o, w->n_tensors, 8));
    GGUF_TRY(gguf_out_le(o, w->n_kv, 8));
    for (size_t i = 0; i < w->n_kv; i++) {
        const gguf_wkv *kv = &w->kvs[i];
        const size_t len = strlen(kv->key);
        GGUF_TRY(gguf_out_le(o, len, 8));
        GGUF_TRY(gguf_out_put(o, kv->key, len));
        GGUF_TRY(gguf_out_le(o, kv->type, 4));
        GGUF_TRY(gguf_out_put(o, kv->val.p, kv->val.n));
    }
    const size_t align = w->alignment;
    size_t offset = 0; /* from the data section */
    for (size_t i = 0; i < w->n_tensors; i++) {
        const gguf_wtensor *t = &w->tensors[i];
        const size_t len = strlen(t->name);
        GGUF_TRY(gguf_out_le(o, len, 8));
        GGUF_TRY(gguf_out_put(o, t->name, len));
        GGUF_TRY(gguf_out_le(o, (uint64_t)t->n_dims, 4));
        for (int d = 0; d < t->n_dims; d++)
            GGUF_TRY(gguf_out_le(o, (uint64_t)t->ne[d], 8));
        GGUF_TRY(gguf_out_le(o, tsr__gguf_ggml_type(t->type), 4));
        GGUF_TRY(gguf_out_le(o, offset, 8));
        const size_t padded = tsr__align_up(t->size, align);
        if (!tsr__add_ok(offset, padded, &offset))
            return tsr__error(TSR_EINVAL, "gguf: writing %s: the tensor data exceed 2^64 bytes",
                              o->path);
    }
    GGUF_TRY(gguf_out_pad(o, align));
    const uint64_t data_start = o->written;
    offset = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const gguf_wtensor *t = &w->tensors[i];
        TSR_ASSERT(o->written == data_start + offset);
        if (t->fill)
            GGUF_TRY(gguf_out_fill(o, t, scratch));
        else
            GGUF_TRY(gguf_out_put(o, t->data, t->size));
        GGUF_TRY(gguf_out_pad(o, align));
        offset += tsr__align_up(t->size, align);
    }
    return gguf_out_flush(o);
}

tsr_status tsr_gguf_writer_write(const tsr_gguf_writer *w, const char *path)
{
    static atomic_uint counter;
    if (!w || !path || !*path)
        return tsr__error(TSR_EINVAL, "gguf writer: write: %s", !w ? "NULL writer" : "no path");
    size_t scratch_size = 0;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].fill)
            scratch_size = TSR_MAX(scratch_size, TSR_MIN(w->tensors[i].size, GGUF_CHUNK));
    const size_t tmp_cap = strlen(path) + 64;
    char *tmp = malloc(tmp_cap);
    uint8_t *buf = malloc(GGUF_OUT_BUF);
    uint8_t *scratch = scratch_size ? malloc(scratch_size) : NULL;
    if (!tmp || !buf || (scratch_size && !scratch)) {
        free(tmp);
        free(buf);
        free(scratch);
        return tsr__error(TSR_ENOMEM, "gguf: writing %s: out of memory", path);
    }
    gguf_out o = {.fd = -1, .path = path, .buf = buf, .cap = GGUF_OUT_BUF};
    for (int tries = 0; tries < 100 && o.fd < 0; tries++) {
        snprintf(tmp, tmp_cap, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        o.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (o.fd < 0 && errno != EEXIST)
            break;
    }
    tsr_status st = TSR_OK;
    if (o.fd < 0) {
        st = gguf_io_error(path, "cannot create a temporary file beside it", errno);
    } else {
        st = gguf_out_all(w, &o, scratch);
        if (st == TSR_OK && fdatasync(o.fd) != 0)
            st = gguf_io_error(path, "fdatasync", errno);
        if (close(o.fd) != 0 && st == TSR_OK)
            st = gguf_io_error(path, "close", errno);
        if (st == TSR_OK && rename(tmp, path) != 0)
            st = gguf_io_error(path, "rename", errno);
        if (st != TSR_OK)
            unlink(tmp);
    }
    free(tmp);
    free(buf);
    free(scratch);
    return st;
}
