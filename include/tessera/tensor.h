/* tessera/tensor.h — element types, tensors, tensor contexts and the op
 * constructors that build computation graphs.
 *
 * Dimension conventions follow ggml so that split rules carry over: ne[0] is
 * the innermost, contiguous dimension; nb[i] is the byte stride of dim i.
 * Matrix products use W: [K, N] (K = in-features = ne[0]), X: [K, T],
 * Y = Wᵀ·X: [N, T].
 *
 * A context (tsr_ctx) holds tensor *metadata* only; data always lives in a
 * backend buffer (see backend.h). Op constructors never abort: on a bad shape
 * or type they return NULL and record the first error in the context
 * (tsr_ctx_status / tsr_ctx_error). A constructor given a NULL source returns
 * NULL too, so a whole model can be built and checked once at the end.
 */
#ifndef TESSERA_TENSOR_H
#define TESSERA_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types ---------------------------------------------------- */

typedef enum tsr_type {
    TSR_TYPE_F32 = 0,
    TSR_TYPE_F16 = 1,
    TSR_TYPE_BF16 = 2,
    TSR_TYPE_Q8_0 = 3, /* blocks of 32: one fp16 scale + 32 int8 */
    TSR_TYPE_I32 = 4,
    TSR_TYPE_COUNT
} tsr_type;

typedef uint16_t tsr_fp16;
typedef uint16_t tsr_bf16;

#define TSR_QK8_0 32
typedef struct tsr_block_q8_0 {
    tsr_fp16 d;           /* scale: x[i] = d * qs[i] */
    int8_t qs[TSR_QK8_0]; /* quantized values */
} tsr_block_q8_0;

const char *tsr_type_name(tsr_type type);   /* "f32", "q8_0"; "?" if invalid */
bool tsr_type_valid(int type);              /* a known tsr_type value */
int64_t tsr_type_block_size(tsr_type type); /* elements per block: 1 or 32 */
size_t tsr_type_size(tsr_type type);        /* bytes per block */
bool tsr_type_is_float(tsr_type type);      /* F32, F16 or BF16 */
/* Bytes of a row of ne0 elements (ne0 must be a multiple of the block size). */
size_t tsr_row_size(tsr_type type, int64_t ne0);

float tsr_fp16_to_f32(tsr_fp16 h);
tsr_fp16 tsr_f32_to_fp16(float f); /* round to nearest even */
float tsr_bf16_to_f32(tsr_bf16 h);
tsr_bf16 tsr_f32_to_bf16(float f); /* round to nearest even, NaN kept */

/* Convert n elements between a type and F32. n must be a multiple of the
 * type's block size (TSR_EINVAL otherwise). I32 converts value-preserving. */
tsr_status tsr_row_to_f32(tsr_type type, const void *src, float *dst, int64_t n);
tsr_status tsr_row_from_f32(tsr_type type, const float *src, void *dst, int64_t n);

/* ---- ops ---------------------------------------------------------------- */

#define TSR_OP_LIST(X) \
    X(NONE)            \
    X(VIEW)            \
    X(RESHAPE)         \
    X(PERMUTE)         \
    X(TRANSPOSE)       \
    X(CONT)            \
    X(CPY)             \
    X(GET_ROWS)        \
    X(SET_ROWS)        \
    X(MUL_MAT)         \
    X(MUL_MAT_ID)      \
    X(ADD)             \
    X(SUB)             \
    X(MUL)             \
    X(DIV)             \
    X(ADD_ID)          \
    X(SCALE)           \
    X(FILL)            \
    X(SILU)            \
    X(GELU)            \
    X(GLU)             \
    X(RMS_NORM)        \
    X(ROPE)            \
    X(SOFT_MAX)        \
    X(FLASH_ATTN_EXT)  \
    X(CONCAT)          \
    X(SUM_ROWS)        \
    X(ARGMAX)          \
    X(ARGSORT)         \
    X(TOP_K)

typedef enum tsr_op {
#define TSR__OP_ENUM(name) TSR_OP_##name,
    TSR_OP_LIST(TSR__OP_ENUM)
#undef TSR__OP_ENUM
        TSR_OP_COUNT
} tsr_op;

const char *tsr_op_name(tsr_op op); /* "MUL_MAT"; "?" if invalid */

/* True for ops that only reinterpret memory (VIEW, RESHAPE, PERMUTE,
 * TRANSPOSE): backends skip them. NONE is a leaf, also skipped. */
bool tsr_op_is_view(tsr_op op);

typedef enum tsr_glu_kind { TSR_GLU_SWIGLU = 0, TSR_GLU_GEGLU = 1 } tsr_glu_kind;
typedef enum tsr_rope_mode { TSR_ROPE_NORMAL = 0, TSR_ROPE_NEOX = 2 } tsr_rope_mode;
typedef enum tsr_sort_order { TSR_SORT_ASC = 0, TSR_SORT_DESC = 1 } tsr_sort_order;

/* ---- tensors ------------------------------------------------------------ */

#define TSR_MAX_DIMS 4
#define TSR_MAX_SRC 6
#define TSR_MAX_OP_PARAMS 16 /* int32 words */
#define TSR_MAX_NAME 64

enum {
    TSR_TENSOR_FLAG_INPUT = 1,   /* set by the user before compute; allocated first */
    TSR_TENSOR_FLAG_OUTPUT = 2,  /* read after compute; never reused by the allocator */
    TSR_TENSOR_FLAG_PARAM = 4,   /* a weight */
    TSR_TENSOR_FLAG_COMPUTE = 8, /* set on graph nodes; a backend skips nodes without it */
};

typedef struct tsr_buf tsr_buf;

typedef struct tsr_tensor {
    tsr_type type;
    int64_t ne[TSR_MAX_DIMS]; /* elements per dimension, ne[0] innermost */
    size_t nb[TSR_MAX_DIMS];  /* byte strides; nb[0] = block size in bytes */

    tsr_op op;
    int32_t op_params[TSR_MAX_OP_PARAMS];
    int32_t flags;

    struct tsr_tensor *src[TSR_MAX_SRC];

    struct tsr_tensor *view_src; /* the tensor whose memory this one views */
    size_t view_offs;            /* byte offset into view_src */

    tsr_buf *buffer; /* where the data lives, NULL until allocated */
    void *data;      /* address in the buffer (may be a device address) */
    void *extra;     /* backend-private per-tensor data */

    char name[TSR_MAX_NAME];
} tsr_tensor;

int64_t tsr_nelements(const tsr_tensor *t);
int64_t tsr_nrows(const tsr_tensor *t); /* ne[1]*ne[2]*ne[3] */
/* Bytes spanned by the tensor from its first to its last element. */
size_t tsr_nbytes(const tsr_tensor *t);
bool tsr_is_contiguous(const tsr_tensor *t);
bool tsr_is_contiguous_rows(const tsr_tensor *t); /* nb[0] is the element size */
bool tsr_same_shape(const tsr_tensor *a, const tsr_tensor *b);
int tsr_n_dims(const tsr_tensor *t); /* index of the last dim > 1, plus one; at least 1 */
/* Writes "[64, 32, 1, 1]" style text; returns buf. */
const char *tsr_shape_str(const tsr_tensor *t, char *buf, size_t size);

float tsr_get_op_param_f32(const tsr_tensor *t, int i);
int32_t tsr_get_op_param_i32(const tsr_tensor *t, int i);

tsr_tensor *tsr_set_name(tsr_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- contexts ------------------------------------------------------------ */

typedef struct tsr_ctx tsr_ctx;

/* A context for at most max_tensors tensors. NULL when out of memory. */
tsr_ctx *tsr_ctx_new(size_t max_tensors);
void tsr_ctx_free(tsr_ctx *ctx);
/* Forgets every tensor and the sticky error; keeps the memory. */
void tsr_ctx_reset(tsr_ctx *ctx);
/* The first error raised by a constructor since creation or reset. */
tsr_status tsr_ctx_status(const tsr_ctx *ctx);
const char *tsr_ctx_error(const tsr_ctx *ctx); /* "" when none */
size_t tsr_ctx_n_tensors(const tsr_ctx *ctx);
tsr_tensor *tsr_ctx_tensor(tsr_ctx *ctx, size_t i);
tsr_tensor *tsr_ctx_find(tsr_ctx *ctx, const char *name);

tsr_tensor *tsr_new_tensor(tsr_ctx *ctx, tsr_type type, int n_dims, const int64_t *ne);
tsr_tensor *tsr_new_tensor_1d(tsr_ctx *ctx, tsr_type type, int64_t ne0);
tsr_tensor *tsr_new_tensor_2d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1);
tsr_tensor *tsr_new_tensor_3d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2);
tsr_tensor *tsr_new_tensor_4d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                              int64_t ne3);
/* A tensor with the same type and shape as t (not a view). */
tsr_tensor *tsr_dup_tensor(tsr_ctx *ctx, const tsr_tensor *t);

/* ---- op constructors -------------------------------------------------- */
/* Shapes use the ggml convention; each returns NULL on error (see above). */

/* Views into a's memory. Offsets and strides are in bytes and are checked
 * against a's extent. */
tsr_tensor *tsr_view_1d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, size_t offset);
tsr_tensor *tsr_view_2d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, size_t nb1,
                        size_t offset);
tsr_tensor *tsr_view_3d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        size_t nb1, size_t nb2, size_t offset);
tsr_tensor *tsr_view_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset);
/* a must be contiguous; the element count must match. */
tsr_tensor *tsr_reshape_1d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0);
tsr_tensor *tsr_reshape_2d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1);
tsr_tensor *tsr_reshape_3d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2);
tsr_tensor *tsr_reshape_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                           int64_t ne3);
/* Dim i of a becomes dim axis_i of the result (a permutation of 0..3). */
tsr_tensor *tsr_permute(tsr_ctx *ctx, tsr_tensor *a, int axis0, int axis1, int axis2, int axis3);
tsr_tensor *tsr_transpose(tsr_ctx *ctx, tsr_tensor *a); /* swaps dims 0 and 1 */
/* A contiguous copy of a (same type); the _4d form also reshapes. */
tsr_tensor *tsr_cont(tsr_ctx *ctx, tsr_tensor *a);
tsr_tensor *tsr_cont_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        int64_t ne3);
/* Copies a into b (same element count, any types, conversion included);
 * returns a view of b that carries the copy. */
tsr_tensor *tsr_cpy(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b);

/* a: [E, R, B2, B3] rows table, ids: I32 [n, B2, B3] → F32 [E, n, B2, B3]
 * (I32 when a is I32). Out-of-range ids are a runtime error (zeros written). */
tsr_tensor *tsr_get_rows(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *ids);
/* dst: [E, R, B2, B3] any type, src: F32 [E, n, B2, B3], ids: I32 [n, C2, C3]
 * with B2 % C2 == 0, B3 % C3 == 0: dst[:, ids[i]] = src[:, i]. Returns a view
 * of dst. Out-of-range ids are a runtime error (the row is skipped). */
tsr_tensor *tsr_set_rows(tsr_ctx *ctx, tsr_tensor *dst, tsr_tensor *src, tsr_tensor *ids);

/* W: [K, N, B2, B3] (F32/F16/BF16/Q8_0, rows contiguous), X: F32 [K, T, C2, C3]
 * with C2 % B2 == 0, C3 % B3 == 0 → Y = Wᵀ·X: F32 [N, T, C2, C3]. */
tsr_tensor *tsr_mul_mat(tsr_ctx *ctx, tsr_tensor *w, tsr_tensor *x);
/* W: [K, N, E] experts, X: F32 [K, U or 1, T], ids: I32 [U, T] expert per slot
 * → F32 [N, U, T]; y[:, u, t] = W[:, :, ids[u, t]]ᵀ · x[:, u (or 0), t]. */
tsr_tensor *tsr_mul_mat_id(tsr_ctx *ctx, tsr_tensor *w, tsr_tensor *x, tsr_tensor *ids);

/* Element-wise a ∘ b with b broadcast (a.ne[i] % b.ne[i] == 0). a and the
 * result have type F32, F16 or BF16; b the same type or F32. */
tsr_tensor *tsr_add(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b);
tsr_tensor *tsr_sub(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b);
tsr_tensor *tsr_mul(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b);
tsr_tensor *tsr_div(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b);
/* a: F32 [E, U, T], b: F32 [E, n_expert], ids: I32 [U, T]:
 * y[:, u, t] = a[:, u, t] + b[:, ids[u, t]]. */
tsr_tensor *tsr_add_id(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, tsr_tensor *ids);
/* y = s·a + bias (F32, F16, BF16). */
tsr_tensor *tsr_scale(tsr_ctx *ctx, tsr_tensor *a, float s);
tsr_tensor *tsr_scale_bias(tsr_ctx *ctx, tsr_tensor *a, float s, float bias);
/* A new tensor of a's type and shape with every element = value (F32, F16,
 * BF16, I32); a only gives the shape and is not read. */
tsr_tensor *tsr_fill(tsr_ctx *ctx, tsr_tensor *a, float value);
tsr_tensor *tsr_silu(tsr_ctx *ctx, tsr_tensor *a);
tsr_tensor *tsr_gelu(tsr_ctx *ctx, tsr_tensor *a); /* tanh approximation */
/* Gated linear unit. With b == NULL, a: [2F, ...] holds [gate | up] halves
 * (swapped: [up | gate]); else gate = a, up = b, same shape. y = act(gate)·up:
 * [F, ...]. F32, F16, BF16. */
tsr_tensor *tsr_glu(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, tsr_glu_kind kind, bool swapped);
tsr_tensor *tsr_swiglu(tsr_ctx *ctx, tsr_tensor *gate, tsr_tensor *up);
/* y = a / sqrt(mean(a²) + eps) along ne[0]. F32. */
tsr_tensor *tsr_rms_norm(tsr_ctx *ctx, tsr_tensor *a, float eps);
/* a: [D, H, T, B] (F32/F16), pos: I32 [T]. Rotates the first n_dims of each
 * head by pos·freq_scale·base^(-2i/n_dims); NORMAL rotates pairs (2i, 2i+1),
 * NEOX rotates (i, i + n_dims/2). */
tsr_tensor *tsr_rope(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *pos, int n_dims, tsr_rope_mode mode,
                     float freq_base, float freq_scale);
/* softmax(a·scale + mask) along ne[0]. a: F32 [C, R, B2, B3]; mask (may be
 * NULL): F32/F16 [C, R' ≥ R, M2, M3] broadcast over dims 2, 3 (B2 % M2 == 0). */
tsr_tensor *tsr_soft_max(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *mask, float scale);
/* q: F32 [D, T, H, B], k: F32/F16 [D, S, Hk, B], v: same type [Dv, S, Hk, B],
 * H % Hk == 0 (GQA), mask (may be NULL): F32/F16 [S, T' ≥ T, 1, 1] additive
 * (−inf masks). softcap > 0 applies softcap·tanh(x/softcap) to the scores.
 * Result F32 [Dv, H, T, B] (heads before tokens, ready to reshape). */
tsr_tensor *tsr_flash_attn_ext(tsr_ctx *ctx, tsr_tensor *q, tsr_tensor *k, tsr_tensor *v,
                               tsr_tensor *mask, float scale, float softcap);
/* Joins a and b along dim (all other dims equal, same type, not Q8_0). */
tsr_tensor *tsr_concat(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, int dim);
/* F32 [C, R, B2, B3] → F32 [1, R, B2, B3]. */
tsr_tensor *tsr_sum_rows(tsr_ctx *ctx, tsr_tensor *a);
/* F32 [C, R, B2, B3] → I32 [R, B2, B3]: index of the first maximum per row. */
tsr_tensor *tsr_argmax(tsr_ctx *ctx, tsr_tensor *a);
/* F32 [C, ...] → I32 [C, ...]: per row, indices ordered by value (stable). */
tsr_tensor *tsr_argsort(tsr_ctx *ctx, tsr_tensor *a, tsr_sort_order order);
/* F32 [C, ...] → I32 [k, ...]: per row, indices of the k largest values, in
 * descending order of value (ties: lower index first). 1 ≤ k ≤ C. */
tsr_tensor *tsr_top_k(tsr_ctx *ctx, tsr_tensor *a, int k);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TENSOR_H */
