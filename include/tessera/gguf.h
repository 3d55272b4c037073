/* tessera/gguf.h — reading and writing GGUF files (ggml's single-file model
 * format, version 3): key/value metadata and tensors.
 *
 * Generic: nothing here knows a model architecture (the model layer reads
 * its llama.* keys and blk.N.* tensors through these calls). Not a
 * converter: only tensors of tessera's types (F32, F16, BF16, Q8_0, I32) are
 * read or written.
 *
 * Reader. tsr_gguf_open maps the file read-only and validates all of it
 * before returning: every count and length against the bytes left, every
 * value type, nesting depth, tensor shape, type, alignment, the data of every
 * tensor inside the file and no two tensors overlapping, no duplicate keys or
 * tensor names. After that the accessors cannot fail on the file's account
 * (only on a wrong key, type or range asked by the caller), and tensor data
 * are pointers into the mapping, read only when touched. Errors are statuses
 * whose message (tsr_last_error) names the file, the item and the byte
 * offset. Versions 3 and 2 (identical little-endian layout) are read; 1 is
 * refused. Memory used grows with what the file holds, never with what a
 * header claims. (As with any mapping, a file truncated by another process
 * while open faults when the lost pages are touched.)
 *
 * Writer. Keys and tensor infos are kept in memory; tensor data come from
 * the caller's pointers or from fill callbacks called chunk by chunk while
 * writing, so a model larger than memory can be written. The file is written
 * to a temporary beside `path` and renamed: no half-written file is left
 * behind. The output follows the spec as llama.cpp reads it: little-endian,
 * u64 lengths, tensors in the order added, each at the next multiple of the
 * alignment, zero padding after the tensor infos and after every tensor.
 *
 * Every call is blocking and thread-compatible: distinct handles may be used
 * from distinct threads; an open reader may be read from many threads.
 */
#ifndef TESSERA_GGUF_H
#define TESSERA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Value types, numbered as in the file. */
typedef enum tsr_gguf_type {
    TSR_GGUF_TYPE_INVALID = -1, /* returned for an index out of range */
    TSR_GGUF_TYPE_UINT8 = 0,
    TSR_GGUF_TYPE_INT8 = 1,
    TSR_GGUF_TYPE_UINT16 = 2,
    TSR_GGUF_TYPE_INT16 = 3,
    TSR_GGUF_TYPE_UINT32 = 4,
    TSR_GGUF_TYPE_INT32 = 5,
    TSR_GGUF_TYPE_FLOAT32 = 6,
    TSR_GGUF_TYPE_BOOL = 7,
    TSR_GGUF_TYPE_STRING = 8,
    TSR_GGUF_TYPE_ARRAY = 9,
    TSR_GGUF_TYPE_UINT64 = 10,
    TSR_GGUF_TYPE_INT64 = 11,
    TSR_GGUF_TYPE_FLOAT64 = 12,
    TSR_GGUF_TYPE_COUNT
} tsr_gguf_type;

/* The alignment of tensor data when a file has no general.alignment. */
#define TSR_GGUF_DEFAULT_ALIGNMENT 32
/* The largest alignment the writer writes (llama.cpp's limit). */
#define TSR_GGUF_MAX_ALIGNMENT (1u << 20)
/* The longest tensor name the writer writes (llama.cpp's limit); the reader
 * accepts the spec's 64 bytes. */
#define TSR_GGUF_MAX_NAME 63
/* Arrays nested deeper than this are refused by the reader. */
#define TSR_GGUF_MAX_DEPTH 8

/* "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array",
 * "u64", "i64", "f64"; "?" for anything else. */
const char *tsr_gguf_type_name(tsr_gguf_type type);

/* ---- reader --------------------------------------------------------------- */

typedef struct tsr_gguf tsr_gguf;

/* One tensor of an open file. Owned by the handle, valid until close. */
typedef struct tsr_gguf_tensor {
    const char *name;         /* NUL-terminated */
    tsr_type type;            /* ggml F32=0, F16=1, Q8_0=8, I32=26, BF16=30 */
    int n_dims;               /* as stored, 0..4 */
    int64_t ne[TSR_MAX_DIMS]; /* ggml order (ne[0] innermost); 1 past n_dims */
    uint64_t offset;          /* byte offset of the data from the start of the file */
    size_t size;              /* bytes of data */
    const void *data;         /* into the read-only mapping (aligned to the file's alignment
                                 relative to the mapping's start) */
} tsr_gguf_tensor;

/* An array value. Owned by the handle, valid until close. */
typedef struct tsr_gguf_array {
    tsr_gguf_type type; /* element type (ARRAY for nested arrays) */
    size_t n;           /* number of elements */
    const void *data;   /* numbers and bools: the n elements as stored (little-endian,
                           possibly unaligned); NULL for strings and nested arrays */
} tsr_gguf_array;

/* Maps and validates the file at `path`; *out is NULL on error. Blocks for
 * the parse (no tensor data is read). TSR_ENOTFOUND (no such file), TSR_EIO
 * (not a regular file, I/O), TSR_EFORMAT (malformed; the message names the
 * problem and its byte offset), TSR_ETYPE (a tensor of a type tessera does not
 * have), TSR_ENOMEM. */
tsr_status tsr_gguf_open(const char *path, tsr_gguf **out);
/* The same parser over `size` bytes at `data`, which are borrowed: they must
 * stay unchanged until tsr_gguf_close. Messages name the file "<memory>". */
tsr_status tsr_gguf_open_memory(const void *data, size_t size, tsr_gguf **out);
/* Unmaps and frees everything, pointers handed out included. NULL is a no-op. */
void tsr_gguf_close(tsr_gguf *g);

uint32_t tsr_gguf_version(const tsr_gguf *g); /* 3 or 2 */
size_t tsr_gguf_alignment(const tsr_gguf *g); /* general.alignment or 32 */

/* Keys, in file order. kv_key: NULL and kv_type: INVALID when i is out of
 * range. find_key: the index of `key`, or -1 (no error is recorded). */
size_t tsr_gguf_kv_count(const tsr_gguf *g);
const char *tsr_gguf_kv_key(const tsr_gguf *g, size_t i);
tsr_gguf_type tsr_gguf_kv_type(const tsr_gguf *g, size_t i);
int64_t tsr_gguf_find_key(const tsr_gguf *g, const char *key);

/* Typed values by key. TSR_ENOTFOUND: no such key; TSR_ETYPE: a value of
 * another kind (integer getters take any integer type; float getters take
 * floats and integers; bool only bool; string only string); TSR_ERANGE: the
 * value does not fit (a negative into unsigned, 300 into u8 … a finite f64
 * beyond the f32 range). *out is unchanged on error. */
tsr_status tsr_gguf_get_bool(const tsr_gguf *g, const char *key, bool *out);
tsr_status tsr_gguf_get_i32(const tsr_gguf *g, const char *key, int32_t *out);
tsr_status tsr_gguf_get_u32(const tsr_gguf *g, const char *key, uint32_t *out);
tsr_status tsr_gguf_get_i64(const tsr_gguf *g, const char *key, int64_t *out);
tsr_status tsr_gguf_get_u64(const tsr_gguf *g, const char *key, uint64_t *out);
tsr_status tsr_gguf_get_f32(const tsr_gguf *g, const char *key, float *out);
tsr_status tsr_gguf_get_f64(const tsr_gguf *g, const char *key, double *out);
/* A NUL-terminated copy owned by the handle; *len (may be NULL) is its
 * length in bytes (the string may hold NULs: *len counts them). */
tsr_status tsr_gguf_get_str(const tsr_gguf *g, const char *key, const char **out, size_t *len);

/* Arrays by key: type and length (TSR_ETYPE when the value is not an array),
 * then element i, with the conversions and errors of the scalar getters
 * (TSR_ERANGE also when i >= n; nested arrays have no element getter). */
tsr_status tsr_gguf_get_array(const tsr_gguf *g, const char *key, tsr_gguf_array *out);
tsr_status tsr_gguf_array_bool(const tsr_gguf *g, const char *key, size_t i, bool *out);
tsr_status tsr_gguf_array_i64(const tsr_gguf *g, const char *key, size_t i, int64_t *out);
tsr_status tsr_gguf_array_u64(const tsr_gguf *g, const char *key, size_t i, uint64_t *out);
tsr_status tsr_gguf_array_f64(const tsr_gguf *g, const char *key, size_t i, double *out);
tsr_status tsr_gguf_array_str(const tsr_gguf *g, const char *key, size_t i, const char **out,
                              size_t *len);

/* Tensors, in file order. tensor_at: NULL when i is out of range;
 * tensor_by_name: NULL when absent (no error is recorded). */
size_t tsr_gguf_tensor_count(const tsr_gguf *g);
const tsr_gguf_tensor *tsr_gguf_tensor_at(const tsr_gguf *g, size_t i);
const tsr_gguf_tensor *tsr_gguf_tensor_by_name(const tsr_gguf *g, const char *name);

/* ---- writer --------------------------------------------------------------- */

typedef struct tsr_gguf_writer tsr_gguf_writer;

/* Fills elements [first, first + n) of the tensor `name` (flat ggml order)
 * into dst: n / block · type size bytes. Called by tsr_gguf_writer_write on
 * the calling thread, tensor after tensor, in increasing order without gaps,
 * in chunks of at most 4 MiB that hold whole rows (ne[0] elements) unless a
 * row alone is larger (then pieces of one row, in whole blocks). Anything but TSR_OK stops the
 * write (which then returns that status and leaves no file). */
typedef tsr_status (*tsr_gguf_fill_fn)(void *user, const char *name, int64_t first, int64_t n,
                                       void *dst);

/* An empty writer (no keys, no tensors, alignment 32). TSR_ENOMEM. */
tsr_status tsr_gguf_writer_new(tsr_gguf_writer **out);
/* Frees the writer (the callers' tensor data stay theirs). NULL is a no-op. */
void tsr_gguf_writer_free(tsr_gguf_writer *w);

/* Set a key (keys are kept in the order first set; setting a key again
 * replaces its value in place). The key is copied; TSR_EINVAL for a NULL or
 * empty key or one longer than 65535 bytes, TSR_ENOMEM. general.alignment can
 * only be a u32 power of two ≤ TSR_GGUF_MAX_ALIGNMENT (TSR_ETYPE /
 * TSR_EINVAL otherwise) and sets the alignment of the tensor data. */
tsr_status tsr_gguf_writer_set_u8(tsr_gguf_writer *w, const char *key, uint8_t v);
tsr_status tsr_gguf_writer_set_i8(tsr_gguf_writer *w, const char *key, int8_t v);
tsr_status tsr_gguf_writer_set_u16(tsr_gguf_writer *w, const char *key, uint16_t v);
tsr_status tsr_gguf_writer_set_i16(tsr_gguf_writer *w, const char *key, int16_t v);
tsr_status tsr_gguf_writer_set_u32(tsr_gguf_writer *w, const char *key, uint32_t v);
tsr_status tsr_gguf_writer_set_i32(tsr_gguf_writer *w, const char *key, int32_t v);
tsr_status tsr_gguf_writer_set_u64(tsr_gguf_writer *w, const char *key, uint64_t v);
tsr_status tsr_gguf_writer_set_i64(tsr_gguf_writer *w, const char *key, int64_t v);
tsr_status tsr_gguf_writer_set_f32(tsr_gguf_writer *w, const char *key, float v);
tsr_status tsr_gguf_writer_set_f64(tsr_gguf_writer *w, const char *key, double v);
tsr_status tsr_gguf_writer_set_bool(tsr_gguf_writer *w, const char *key, bool v);
tsr_status tsr_gguf_writer_set_str(tsr_gguf_writer *w, const char *key, const char *v);
/* An array of n numbers or bools, copied: `values` points to n C values of
 * the element type (uint8_t … int64_t, float, double, bool). STRING and ARRAY
 * element types are TSR_EINVAL (strings: set_str_array; nested arrays are
 * not written: llama.cpp cannot read them). */
tsr_status tsr_gguf_writer_set_array(tsr_gguf_writer *w, const char *key, tsr_gguf_type type,
                                     const void *values, size_t n);
tsr_status tsr_gguf_writer_set_str_array(tsr_gguf_writer *w, const char *key,
                                         const char *const *values, size_t n);
/* Same as set_u32("general.alignment", alignment). */
tsr_status tsr_gguf_writer_set_alignment(tsr_gguf_writer *w, uint32_t alignment);

/* Add a tensor info; the data are written in the order tensors are added.
 * ne: n_dims (1..4) extents in ggml order, each > 0, ne[0] a multiple of
 * the type's block size. `data` (tsr_nbytes-sized, contiguous) is borrowed
 * until the last write. TSR_EINVAL (a NULL, empty, duplicate or longer than
 * TSR_GGUF_MAX_NAME name, a bad shape), TSR_ETYPE, TSR_ENOMEM. */
tsr_status tsr_gguf_writer_add_tensor(tsr_gguf_writer *w, const char *name, tsr_type type,
                                      int n_dims, const int64_t *ne, const void *data);
/* The same with the data produced by `fill` at write time. */
tsr_status tsr_gguf_writer_add_tensor_fn(tsr_gguf_writer *w, const char *name, tsr_type type,
                                         int n_dims, const int64_t *ne, tsr_gguf_fill_fn fill,
                                         void *user);

/* Writes the file (blocks until it is complete and renamed into place; an
 * existing file at `path` is replaced only on success). May be called again.
 * TSR_EIO (with the path and the system's reason), TSR_ENOMEM, or a fill
 * callback's status. */
tsr_status tsr_gguf_writer_write(const tsr_gguf_writer *w, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_GGUF_H */
