/* model/gguf_impl.h — what the GGUF parser (gguf.c), getters (gguf_get.c)
 * and writer (gguf_write.c) share: the open file's records, value type sizes,
 * the ggml type numbers of tessera's types, and the key with a meaning of
 * its own. Not installed.
 */
#ifndef TESSERA_MODEL_GGUF_IMPL_H
#define TESSERA_MODEL_GGUF_IMPL_H

#include "core/internal.h"
#include "tessera/gguf.h"

#define TSR__GGUF_MAGIC "GGUF"
#define TSR__GGUF_VERSION 3u
#define TSR__GGUF_KEY_ALIGNMENT "general.alignment"

/* ggml type numbers of tessera's tensor types. */
#define TSR__GGML_F32 0u
#define TSR__GGML_F16 1u
#define TSR__GGML_Q8_0 8u
#define TSR__GGML_I32 26u
#define TSR__GGML_BF16 30u

/* An open file: the parser (gguf.c) fills it, the getters (gguf_get.c) read
 * it. Every count and pointer here was validated by the parser. */
typedef struct gguf_str {
    const char *s; /* NUL-terminated, in the pool */
    size_t len;
} gguf_str;

typedef struct gguf_kv {
    const char *key;    /* in the pool */
    uint32_t type;      /* value type; ARRAY for arrays */
    uint32_t elem;      /* element type of an array; the type itself for a scalar */
    size_t n;           /* elements; 1 for a scalar */
    const uint8_t *raw; /* numbers and bools: the first element, in the file */
    size_t str0;        /* strings: index of the first in strs */
    size_t at;          /* byte offset of the kv in the file, for messages */
} gguf_kv;

struct tsr_gguf {
    const uint8_t *base;
    size_t size;
    void *map;  /* the mapping of tsr_gguf_open; NULL for memory */
    char *file; /* the name used in messages */
    uint32_t version;
    size_t alignment;
    gguf_kv *kvs;
    size_t n_kv;
    gguf_kv **kv_sorted; /* by key, for lookups */
    tsr_gguf_tensor *tensors;
    size_t n_tensors;
    tsr_gguf_tensor **t_sorted; /* by name, for lookups */
    size_t *t_at;               /* byte offset of each tensor info, for messages */
    gguf_str *strs;
    size_t n_strs;
    char *pool;
    size_t pool_size;
};

/* Little-endian reads (the file's byte order, whatever the host's). */
static inline uint16_t gguf_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}

static inline uint32_t gguf_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gguf_le64(const uint8_t *p)
{
    return (uint64_t)gguf_le32(p) | (uint64_t)gguf_le32(p + 4) << 32;
}

/* The kv of `key`, or NULL (binary search over kv_sorted). */
const gguf_kv *tsr__gguf_lookup(const tsr_gguf *g, const char *key);

/* A name from a file, made safe to print: printable ASCII kept, anything
 * else '?', cut to fit `cap` with "...". Returns buf. */
const char *tsr__gguf_quote(char *buf, size_t cap, const char *s, size_t len);

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY, invalid. */
size_t tsr__gguf_type_size(uint32_t type);

/* The ggml type number of a tessera type (UINT32_MAX if invalid). */
uint32_t tsr__gguf_ggml_type(tsr_type type);

#endif /* TESSERA_MODEL_GGUF_IMPL_H */
