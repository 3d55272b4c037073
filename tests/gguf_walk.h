/* tests/gguf_walk.h — touches everything an open GGUF file offers through the
 * public accessors (every key, value, array element, tensor and data byte),
 * for the malformed-file tests and the fuzzer: after a successful open none
 * of it may fail on the file's account or read out of bounds.
 */
#ifndef TESSERA_TESTS_GGUF_WALK_H
#define TESSERA_TESTS_GGUF_WALK_H

#include <stdint.h>
#include <string.h>

#include "tessera/gguf.h"

/* Returns a checksum of what it read (so no read can be optimized away), or
 * sets *bad to a description of the first accessor that failed where it
 * should not have. */
static inline uint64_t gguf_walk(const tsr_gguf *g, const char **bad)
{
    uint64_t sum = 0;
    *bad = NULL;
    for (size_t i = 0; i < tsr_gguf_kv_count(g); i++) {
        const char *key = tsr_gguf_kv_key(g, i);
        const tsr_gguf_type type = tsr_gguf_kv_type(g, i);
        if (!key || type == TSR_GGUF_TYPE_INVALID || tsr_gguf_find_key(g, key) != (int64_t)i) {
            *bad = "kv_key / kv_type / find_key";
            return sum;
        }
        sum += strlen(key) + (uint64_t)type;
        size_t len;
        const char *s;
        double f;
        int64_t v;
        bool b;
        switch (type) {
        case TSR_GGUF_TYPE_STRING:
            if (tsr_gguf_get_str(g, key, &s, &len) != TSR_OK || s[len] != '\0') {
                *bad = "get_str";
                return sum;
            }
            for (size_t k = 0; k < len; k++)
                sum += (unsigned char)s[k];
            break;
        case TSR_GGUF_TYPE_BOOL:
            if (tsr_gguf_get_bool(g, key, &b) != TSR_OK) {
                *bad = "get_bool";
                return sum;
            }
            sum += b;
            break;
        case TSR_GGUF_TYPE_FLOAT32:
        case TSR_GGUF_TYPE_FLOAT64:
            if (tsr_gguf_get_f64(g, key, &f) != TSR_OK) {
                *bad = "get_f64";
                return sum;
            }
            sum += f == f;
            break;
        case TSR_GGUF_TYPE_ARRAY: {
            tsr_gguf_array a;
            if (tsr_gguf_get_array(g, key, &a) != TSR_OK) {
                *bad = "get_array";
                return sum;
            }
            for (size_t k = 0; k < a.n; k++) {
                tsr_status st = TSR_OK;
                if (a.type == TSR_GGUF_TYPE_STRING) {
                    st = tsr_gguf_array_str(g, key, k, &s, &len);
                    if (st == TSR_OK)
                        sum += len + (len ? (unsigned char)s[len - 1] : 0);
                } else if (a.type == TSR_GGUF_TYPE_BOOL) {
                    st = tsr_gguf_array_bool(g, key, k, &b);
                    sum += b;
                } else if (a.type == TSR_GGUF_TYPE_ARRAY) {
                    break; /* nested: no element getter */
                } else {
                    st = tsr_gguf_array_f64(g, key, k, &f);
                    sum += f == f;
                }
                if (st != TSR_OK) {
                    *bad = "array element";
                    return sum;
                }
            }
            if (a.type != TSR_GGUF_TYPE_STRING && a.type != TSR_GGUF_TYPE_ARRAY &&
                tsr_gguf_array_f64(g, key, a.n, &f) != TSR_ERANGE &&
                tsr_gguf_array_bool(g, key, a.n, &b) != TSR_ERANGE) {
                *bad = "array element past the end";
                return sum;
            }
            break;
        }
        default: {
            uint64_t u;
            if (tsr_gguf_get_i64(g, key, &v) == TSR_OK) {
                sum += (uint64_t)v;
            } else if (tsr_gguf_get_u64(g, key, &u) == TSR_OK) {
                sum += u;
            } else {
                *bad = "get_i64 / get_u64";
                return sum;
            }
            break;
        }
        }
    }
    for (size_t i = 0; i < tsr_gguf_tensor_count(g); i++) {
        const tsr_gguf_tensor *t = tsr_gguf_tensor_at(g, i);
        if (!t || tsr_gguf_tensor_by_name(g, t->name) != t || t->size == 0) {
            *bad = "tensor_at / tensor_by_name";
            return sum;
        }
        const unsigned char *p = (const unsigned char *)t->data;
        for (size_t k = 0; k < t->size; k++)
            sum += p[k];
        sum += (uint64_t)t->type + (uint64_t)t->ne[0];
    }
    if (tsr_gguf_tensor_at(g, tsr_gguf_tensor_count(g)) != NULL ||
        tsr_gguf_kv_key(g, tsr_gguf_kv_count(g)) != NULL) {
        *bad = "index past the end";
    }
    return sum;
}

#endif /* TESSERA_TESTS_GGUF_WALK_H */
