/* core/ops.c — constructors of the compute ops: shape and type checks, the
 * result's shape, the op parameters; and tsr__op_rebuild, which calls the
 * constructor of an op named by its code (the meta device and the RPC
 * server rebuild nodes that way).
 *
 * Nothing here computes; kernels live in the backends. Every check that a
 * kernel relies on is made here, once, so that kernels can trust their nodes;
 * a failed check records an error in the context naming the op, the tensors,
 * their shapes and the rule that failed, and returns NULL.
 *
 * Op parameter layout (op_params words; f = float bits):
 *   SCALE s:f bias:f · FILL value:f · GLU kind swapped · RMS_NORM eps:f ·
 *   ROPE n_dims mode base:f scale:f · SOFT_MAX scale:f ·
 *   FLASH_ATTN_EXT scale:f softcap:f · CONCAT dim · ARGSORT order · TOP_K k ·
 *   PERMUTE/TRANSPOSE axes[4].
 * Sources: CPY {a, dst} · SET_ROWS {src, ids, dst} · MUL_MAT_ID {w, x, ids} ·
 *   ADD_ID {a, b, ids} · FLASH_ATTN_EXT {q, k, v, mask} · SOFT_MAX {a, mask}.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/tensor_impl.h"

/* Fails on NULL sources; an earlier constructor has already recorded why. */
#define OP_NEED(ctx, t, op)                                                        \
    do {                                                                           \
        if (!(t))                                                                  \
            return tsr__ctx_fail((ctx), TSR_EINVAL, "%s: a source is NULL", (op)); \
    } while (0)

static const char *sh(const tsr_tensor *t, char *buf) { return tsr_shape_str(t, buf, 64); }

static tsr_tensor *fail_type(tsr_ctx *ctx, const char *op, const tsr_tensor *t, const char *what,
                             const char *allowed)
{
    return tsr__ctx_fail(ctx, TSR_ETYPE, "%s: %s '%s' has type %s; allowed: %s", op, what,
                         tsr__tname(t), tsr_type_name(t->type), allowed);
}

static tsr_tensor *fail_pair(tsr_ctx *ctx, const char *op, const char *na, const tsr_tensor *a,
                             const char *nb, const tsr_tensor *b, const char *rule)
{
    char s1[64], s2[64];
    return tsr__ctx_fail(ctx, TSR_ESHAPE, "%s: %s '%s' %s and %s '%s' %s: %s", op, na,
                         tsr__tname(a), sh(a, s1), nb, tsr__tname(b), sh(b, s2), rule);
}

static tsr_tensor *fail_one(tsr_ctx *ctx, const char *op, const char *na, const tsr_tensor *a,
                            const char *rule)
{
    char s1[64];
    return tsr__ctx_fail(ctx, TSR_ESHAPE, "%s: %s '%s' %s: %s", op, na, tsr__tname(a), sh(a, s1),
                         rule);
}

static bool is_fp(tsr_type t) { return tsr_type_is_float(t); }

/* a.ne[i] is a whole multiple of b.ne[i] in every dim (b broadcasts). */
static bool can_repeat(const tsr_tensor *b, const tsr_tensor *a)
{
    for (int i = 0; i < TSR_MAX_DIMS; i++) {
        if (b->ne[i] == 0 ? a->ne[i] != 0 : a->ne[i] % b->ne[i] != 0)
            return false;
    }
    return true;
}

static tsr_tensor *new_op(tsr_ctx *ctx, tsr_op op, tsr_type type, const int64_t ne[4],
                          tsr_tensor *s0, tsr_tensor *s1, tsr_tensor *s2, tsr_tensor *s3)
{
    tsr_tensor *t = tsr__new_raw(ctx, type, ne, tsr_op_name(op));
    if (!t)
        return NULL;
    t->op = op;
    t->src[0] = s0;
    t->src[1] = s1;
    t->src[2] = s2;
    t->src[3] = s3;
    return t;
}

/* ---- copies -------------------------------------------------------------------- */

tsr_tensor *tsr_cont_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        int64_t ne3)
{
    OP_NEED(ctx, a, "cont");
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    if (ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0 || ne0 * ne1 * ne2 * ne3 != tsr_nelements(a))
        return fail_one(ctx, "cont", "a", a, "element count differs from the requested shape");
    if (tsr_type_block_size(a->type) != 1 && (ne0 != a->ne[0] || !tsr_is_contiguous_rows(a)))
        return fail_one(ctx, "cont", "a", a, "a block-quantized tensor keeps its rows");
    return new_op(ctx, TSR_OP_CONT, a->type, ne, a, NULL, NULL, NULL);
}

tsr_tensor *tsr_cont(tsr_ctx *ctx, tsr_tensor *a)
{
    OP_NEED(ctx, a, "cont");
    return tsr_cont_4d(ctx, a, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
}

tsr_tensor *tsr_cpy(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b)
{
    OP_NEED(ctx, a, "cpy");
    OP_NEED(ctx, b, "cpy");
    const bool blocks = tsr_type_block_size(a->type) != 1 || tsr_type_block_size(b->type) != 1;
    if ((a->type == TSR_TYPE_I32) != (b->type == TSR_TYPE_I32))
        return fail_pair(ctx, "cpy", "a", a, "dst", b, "i32 copies only to i32");
    if (blocks &&
        (!tsr_same_shape(a, b) || !tsr_is_contiguous_rows(a) || !tsr_is_contiguous_rows(b)))
        return fail_pair(ctx, "cpy", "a", a, "dst", b,
                         "copies involving q8_0 need equal shapes and dense rows");
    if (tsr_nelements(a) != tsr_nelements(b))
        return fail_pair(ctx, "cpy", "a", a, "dst", b, "element counts differ");
    tsr_tensor *t = tsr_view_4d(ctx, b, b->ne[0], b->ne[1], b->ne[2], b->ne[3], b->nb[1], b->nb[2],
                                b->nb[3], 0);
    if (!t)
        return NULL;
    memcpy(t->nb, b->nb, sizeof(t->nb));
    t->op = TSR_OP_CPY;
    t->src[0] = a;
    t->src[1] = b;
    snprintf(t->name, sizeof(t->name), "%.50s (copy)", tsr__tname(b));
    return t;
}

/* ---- rows ----------------------------------------------------------------------- */

tsr_tensor *tsr_get_rows(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *ids)
{
    OP_NEED(ctx, a, "get_rows");
    OP_NEED(ctx, ids, "get_rows");
    if (ids->type != TSR_TYPE_I32)
        return fail_type(ctx, "get_rows", ids, "ids", "i32");
    if (!tsr_is_contiguous_rows(a) || !tsr_is_contiguous_rows(ids))
        return fail_pair(ctx, "get_rows", "a", a, "ids", ids, "rows must be dense");
    if (a->ne[2] != ids->ne[1] || a->ne[3] != ids->ne[2] || ids->ne[3] != 1)
        return fail_pair(ctx, "get_rows", "a", a, "ids", ids,
                         "need a.ne[2] == ids.ne[1], a.ne[3] == ids.ne[2], ids.ne[3] == 1");
    const tsr_type out = a->type == TSR_TYPE_I32 ? TSR_TYPE_I32 : TSR_TYPE_F32;
    const int64_t ne[4] = {a->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]};
    return new_op(ctx, TSR_OP_GET_ROWS, out, ne, a, ids, NULL, NULL);
}

tsr_tensor *tsr_set_rows(tsr_ctx *ctx, tsr_tensor *dst, tsr_tensor *src, tsr_tensor *ids)
{
    OP_NEED(ctx, dst, "set_rows");
    OP_NEED(ctx, src, "set_rows");
    OP_NEED(ctx, ids, "set_rows");
    if (dst->type == TSR_TYPE_I32)
        return fail_type(ctx, "set_rows", dst, "dst", "f32, f16, bf16, q8_0");
    if (src->type != TSR_TYPE_F32)
        return fail_type(ctx, "set_rows", src, "src", "f32");
    if (ids->type != TSR_TYPE_I32)
        return fail_type(ctx, "set_rows", ids, "ids", "i32");
    if (!tsr_is_contiguous_rows(dst) || !tsr_is_contiguous_rows(src) ||
        !tsr_is_contiguous_rows(ids))
        return fail_pair(ctx, "set_rows", "dst", dst, "src", src, "rows must be dense");
    if (dst->ne[0] != src->ne[0] || dst->ne[2] != src->ne[2] || dst->ne[3] != src->ne[3])
        return fail_pair(ctx, "set_rows", "dst", dst, "src", src,
                         "need equal ne[0], ne[2] and ne[3]");
    if (src->ne[1] != ids->ne[0] || ids->ne[3] != 1 || ids->ne[1] == 0 || ids->ne[2] == 0 ||
        src->ne[2] % ids->ne[1] != 0 || src->ne[3] % ids->ne[2] != 0)
        return fail_pair(ctx, "set_rows", "src", src, "ids", ids,
                         "need src.ne[1] == ids.ne[0] and ids broadcasting over dims 2, 3");
    tsr_tensor *t = tsr_view_4d(ctx, dst, dst->ne[0], dst->ne[1], dst->ne[2], dst->ne[3],
                                dst->nb[1], dst->nb[2], dst->nb[3], 0);
    if (!t)
        return NULL;
    t->op = TSR_OP_SET_ROWS;
    t->src[0] = src;
    t->src[1] = ids;
    t->src[2] = dst;
    snprintf(t->name, sizeof(t->name), "%.50s (set_rows)", tsr__tname(dst));
    return t;
}

/* ---- matrix products ---------------------------------------------------------------- */

static bool mm_weight_type(tsr_type t)
{
    return t == TSR_TYPE_F32 || t == TSR_TYPE_F16 || t == TSR_TYPE_BF16 || t == TSR_TYPE_Q8_0;
}

tsr_tensor *tsr_mul_mat(tsr_ctx *ctx, tsr_tensor *w, tsr_tensor *x)
{
    OP_NEED(ctx, w, "mul_mat");
    OP_NEED(ctx, x, "mul_mat");
    if (!mm_weight_type(w->type))
        return fail_type(ctx, "mul_mat", w, "w", "f32, f16, bf16, q8_0");
    if (x->type != TSR_TYPE_F32)
        return fail_type(ctx, "mul_mat", x, "x", "f32");
    if (w->ne[0] != x->ne[0])
        return fail_pair(ctx, "mul_mat", "w", w, "x", x, "ne[0] (K) differs");
    if (w->ne[2] == 0 || w->ne[3] == 0 || x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0)
        return fail_pair(ctx, "mul_mat", "w", w, "x", x,
                         "x.ne[2], x.ne[3] must be multiples of w's (broadcast)");
    if (!tsr_is_contiguous_rows(w) || !tsr_is_contiguous_rows(x))
        return fail_pair(ctx, "mul_mat", "w", w, "x", x, "rows (dim 0) must be dense");
    const int64_t ne[4] = {w->ne[1], x->ne[1], x->ne[2], x->ne[3]};
    return new_op(ctx, TSR_OP_MUL_MAT, TSR_TYPE_F32, ne, w, x, NULL, NULL);
}

tsr_tensor *tsr_mul_mat_id(tsr_ctx *ctx, tsr_tensor *w, tsr_tensor *x, tsr_tensor *ids)
{
    OP_NEED(ctx, w, "mul_mat_id");
    OP_NEED(ctx, x, "mul_mat_id");
    OP_NEED(ctx, ids, "mul_mat_id");
    if (!mm_weight_type(w->type))
        return fail_type(ctx, "mul_mat_id", w, "w", "f32, f16, bf16, q8_0");
    if (x->type != TSR_TYPE_F32)
        return fail_type(ctx, "mul_mat_id", x, "x", "f32");
    if (ids->type != TSR_TYPE_I32)
        return fail_type(ctx, "mul_mat_id", ids, "ids", "i32");
    if (w->ne[0] != x->ne[0] || w->ne[3] != 1 || x->ne[3] != 1)
        return fail_pair(ctx, "mul_mat_id", "w", w, "x", x,
                         "need equal ne[0] (K) and 3-d w [K, N, experts], x [K, U, T]");
    if (ids->ne[1] != x->ne[2] || ids->ne[2] != 1 || ids->ne[3] != 1 ||
        (x->ne[1] != 1 && x->ne[1] != ids->ne[0]))
        return fail_pair(ctx, "mul_mat_id", "x", x, "ids", ids,
                         "need ids [U, T] with x [K, U or 1, T]");
    if (!tsr_is_contiguous_rows(w) || !tsr_is_contiguous_rows(x) || !tsr_is_contiguous_rows(ids))
        return fail_pair(ctx, "mul_mat_id", "w", w, "x", x, "rows (dim 0) must be dense");
    const int64_t ne[4] = {w->ne[1], ids->ne[0], ids->ne[1], 1};
    return new_op(ctx, TSR_OP_MUL_MAT_ID, TSR_TYPE_F32, ne, w, x, ids, NULL);
}

/* ---- element-wise ------------------------------------------------------------------- */

static tsr_tensor *binary(tsr_ctx *ctx, tsr_op op, tsr_tensor *a, tsr_tensor *b)
{
    const char *name = tsr_op_name(op);
    OP_NEED(ctx, a, name);
    OP_NEED(ctx, b, name);
    if (!is_fp(a->type))
        return fail_type(ctx, name, a, "a", "f32, f16, bf16");
    if (b->type != a->type && b->type != TSR_TYPE_F32)
        return fail_type(ctx, name, b, "b", "a's type or f32");
    if (!can_repeat(b, a))
        return fail_pair(ctx, name, "a", a, "b", b,
                         "b must broadcast to a (a.ne[i] % b.ne[i] == 0)");
    if (!tsr_is_contiguous_rows(a) || !tsr_is_contiguous_rows(b))
        return fail_pair(ctx, name, "a", a, "b", b, "rows (dim 0) must be dense");
    return new_op(ctx, op, a->type, a->ne, a, b, NULL, NULL);
}

tsr_tensor *tsr_add(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b)
{
    return binary(ctx, TSR_OP_ADD, a, b);
}
tsr_tensor *tsr_sub(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b)
{
    return binary(ctx, TSR_OP_SUB, a, b);
}
tsr_tensor *tsr_mul(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b)
{
    return binary(ctx, TSR_OP_MUL, a, b);
}
tsr_tensor *tsr_div(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b)
{
    return binary(ctx, TSR_OP_DIV, a, b);
}

tsr_tensor *tsr_add_id(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, tsr_tensor *ids)
{
    OP_NEED(ctx, a, "add_id");
    OP_NEED(ctx, b, "add_id");
    OP_NEED(ctx, ids, "add_id");
    if (a->type != TSR_TYPE_F32)
        return fail_type(ctx, "add_id", a, "a", "f32");
    if (b->type != TSR_TYPE_F32)
        return fail_type(ctx, "add_id", b, "b", "f32");
    if (ids->type != TSR_TYPE_I32)
        return fail_type(ctx, "add_id", ids, "ids", "i32");
    if (a->ne[0] != b->ne[0] || b->ne[2] != 1 || b->ne[3] != 1 || a->ne[3] != 1)
        return fail_pair(ctx, "add_id", "a", a, "b", b, "need a [E, U, T] and b [E, experts]");
    if (ids->ne[0] != a->ne[1] || ids->ne[1] != a->ne[2] || ids->ne[2] != 1 || ids->ne[3] != 1)
        return fail_pair(ctx, "add_id", "a", a, "ids", ids, "need ids [U, T] for a [E, U, T]");
    if (!tsr_is_contiguous_rows(a) || !tsr_is_contiguous_rows(b) || !tsr_is_contiguous_rows(ids))
        return fail_pair(ctx, "add_id", "a", a, "b", b, "rows (dim 0) must be dense");
    return new_op(ctx, TSR_OP_ADD_ID, TSR_TYPE_F32, a->ne, a, b, ids, NULL);
}

static tsr_tensor *unary(tsr_ctx *ctx, tsr_op op, tsr_tensor *a)
{
    const char *name = tsr_op_name(op);
    OP_NEED(ctx, a, name);
    if (!is_fp(a->type))
        return fail_type(ctx, name, a, "a", "f32, f16, bf16");
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, name, "a", a, "rows (dim 0) must be dense");
    return new_op(ctx, op, a->type, a->ne, a, NULL, NULL, NULL);
}

tsr_tensor *tsr_scale_bias(tsr_ctx *ctx, tsr_tensor *a, float s, float bias)
{
    tsr_tensor *t = unary(ctx, TSR_OP_SCALE, a);
    if (t) {
        tsr__set_op_param_f32(t, 0, s);
        tsr__set_op_param_f32(t, 1, bias);
    }
    return t;
}

tsr_tensor *tsr_scale(tsr_ctx *ctx, tsr_tensor *a, float s)
{
    return tsr_scale_bias(ctx, a, s, 0.0f);
}
tsr_tensor *tsr_silu(tsr_ctx *ctx, tsr_tensor *a) { return unary(ctx, TSR_OP_SILU, a); }
tsr_tensor *tsr_gelu(tsr_ctx *ctx, tsr_tensor *a) { return unary(ctx, TSR_OP_GELU, a); }

tsr_tensor *tsr_fill(tsr_ctx *ctx, tsr_tensor *a, float value)
{
    OP_NEED(ctx, a, "fill");
    if (!is_fp(a->type) && a->type != TSR_TYPE_I32)
        return fail_type(ctx, "fill", a, "a", "f32, f16, bf16, i32");
    if (a->type == TSR_TYPE_I32 && !(value >= -2147483648.0f && value < 2147483648.0f))
        return tsr__ctx_fail(ctx, TSR_ERANGE, "fill of '%s': %g does not fit in i32", tsr__tname(a),
                             (double)value);
    tsr_tensor *t = new_op(ctx, TSR_OP_FILL, a->type, a->ne, a, NULL, NULL, NULL);
    if (t)
        tsr__set_op_param_f32(t, 0, value);
    return t;
}

tsr_tensor *tsr_glu(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, tsr_glu_kind kind, bool swapped)
{
    OP_NEED(ctx, a, "glu");
    if (!is_fp(a->type))
        return fail_type(ctx, "glu", a, "a", "f32, f16, bf16");
    if (kind != TSR_GLU_SWIGLU && kind != TSR_GLU_GEGLU)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "glu: unknown kind %d", (int)kind);
    int64_t ne[4] = {a->ne[0], a->ne[1], a->ne[2], a->ne[3]};
    if (b) {
        if (b->type != a->type || !tsr_same_shape(a, b))
            return fail_pair(ctx, "glu", "gate", a, "up", b, "need equal type and shape");
        if (!tsr_is_contiguous_rows(b))
            return fail_one(ctx, "glu", "up", b, "rows (dim 0) must be dense");
    } else {
        if (a->ne[0] % 2 != 0)
            return fail_one(ctx, "glu", "a", a, "fused [gate | up] needs an even ne[0]");
        ne[0] /= 2;
    }
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, "glu", "a", a, "rows (dim 0) must be dense");
    tsr_tensor *t = new_op(ctx, TSR_OP_GLU, a->type, ne, a, b, NULL, NULL);
    if (t) {
        t->op_params[0] = (int32_t)kind;
        t->op_params[1] = swapped ? 1 : 0;
    }
    return t;
}

tsr_tensor *tsr_swiglu(tsr_ctx *ctx, tsr_tensor *gate, tsr_tensor *up)
{
    return tsr_glu(ctx, gate, up, TSR_GLU_SWIGLU, false);
}

/* ---- normalization, rotation, attention -------------------------------------------- */

tsr_tensor *tsr_rms_norm(tsr_ctx *ctx, tsr_tensor *a, float eps)
{
    OP_NEED(ctx, a, "rms_norm");
    if (a->type != TSR_TYPE_F32)
        return fail_type(ctx, "rms_norm", a, "a", "f32");
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tsr__ctx_fail(ctx, TSR_EINVAL, "rms_norm of '%s': eps = %g must be finite and >= 0",
                             tsr__tname(a), (double)eps);
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, "rms_norm", "a", a, "rows (dim 0) must be dense");
    tsr_tensor *t = new_op(ctx, TSR_OP_RMS_NORM, a->type, a->ne, a, NULL, NULL, NULL);
    if (t)
        tsr__set_op_param_f32(t, 0, eps);
    return t;
}

tsr_tensor *tsr_rope(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *pos, int n_dims, tsr_rope_mode mode,
                     float freq_base, float freq_scale)
{
    OP_NEED(ctx, a, "rope");
    OP_NEED(ctx, pos, "rope");
    if (a->type != TSR_TYPE_F32 && a->type != TSR_TYPE_F16)
        return fail_type(ctx, "rope", a, "a", "f32, f16");
    if (pos->type != TSR_TYPE_I32)
        return fail_type(ctx, "rope", pos, "pos", "i32");
    if (pos->ne[0] != a->ne[2] || tsr_nelements(pos) != pos->ne[0] || !tsr_is_contiguous_rows(pos))
        return fail_pair(ctx, "rope", "a", a, "pos", pos, "need pos [T] with a [D, H, T, B]");
    if (n_dims <= 0 || n_dims % 2 != 0 || n_dims > a->ne[0])
        return tsr__ctx_fail(ctx, TSR_EINVAL,
                             "rope of '%s': n_dims = %d must be even and in (0, %lld]",
                             tsr__tname(a), n_dims, (long long)a->ne[0]);
    if (mode != TSR_ROPE_NORMAL && mode != TSR_ROPE_NEOX)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "rope of '%s': unknown mode %d", tsr__tname(a),
                             (int)mode);
    if (!(freq_base > 0.0f) || !isfinite(freq_base) || !isfinite(freq_scale))
        return tsr__ctx_fail(ctx, TSR_EINVAL, "rope of '%s': freq_base %g, freq_scale %g",
                             tsr__tname(a), (double)freq_base, (double)freq_scale);
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, "rope", "a", a, "rows (dim 0) must be dense");
    tsr_tensor *t = new_op(ctx, TSR_OP_ROPE, a->type, a->ne, a, pos, NULL, NULL);
    if (t) {
        t->op_params[0] = n_dims;
        t->op_params[1] = (int32_t)mode;
        tsr__set_op_param_f32(t, 2, freq_base);
        tsr__set_op_param_f32(t, 3, freq_scale);
    }
    return t;
}

static bool mask_type_ok(const tsr_tensor *m)
{
    return m->type == TSR_TYPE_F32 || m->type == TSR_TYPE_F16;
}

tsr_tensor *tsr_soft_max(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *mask, float scale)
{
    OP_NEED(ctx, a, "soft_max");
    if (a->type != TSR_TYPE_F32)
        return fail_type(ctx, "soft_max", a, "a", "f32");
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, "soft_max", "a", a, "rows (dim 0) must be dense");
    if (mask) {
        if (!mask_type_ok(mask))
            return fail_type(ctx, "soft_max", mask, "mask", "f32, f16");
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1] || mask->ne[2] == 0 ||
            mask->ne[3] == 0 || a->ne[2] % mask->ne[2] != 0 || a->ne[3] % mask->ne[3] != 0)
            return fail_pair(
                ctx, "soft_max", "a", a, "mask", mask,
                "need mask.ne[0] == a.ne[0], mask.ne[1] >= a.ne[1], dims 2, 3 broadcasting");
        if (!tsr_is_contiguous_rows(mask))
            return fail_one(ctx, "soft_max", "mask", mask, "rows (dim 0) must be dense");
    }
    if (!isfinite(scale))
        return tsr__ctx_fail(ctx, TSR_EINVAL, "soft_max: scale %g", (double)scale);
    tsr_tensor *t = new_op(ctx, TSR_OP_SOFT_MAX, TSR_TYPE_F32, a->ne, a, mask, NULL, NULL);
    if (t)
        tsr__set_op_param_f32(t, 0, scale);
    return t;
}

tsr_tensor *tsr_flash_attn_ext(tsr_ctx *ctx, tsr_tensor *q, tsr_tensor *k, tsr_tensor *v,
                               tsr_tensor *mask, float scale, float softcap)
{
    const char *op = "flash_attn_ext";
    OP_NEED(ctx, q, op);
    OP_NEED(ctx, k, op);
    OP_NEED(ctx, v, op);
    if (q->type != TSR_TYPE_F32)
        return fail_type(ctx, op, q, "q", "f32");
    if (k->type != TSR_TYPE_F32 && k->type != TSR_TYPE_F16)
        return fail_type(ctx, op, k, "k", "f32, f16");
    if (v->type != k->type)
        return fail_type(ctx, op, v, "v", "k's type");
    if (q->ne[0] != k->ne[0])
        return fail_pair(ctx, op, "q", q, "k", k, "head size ne[0] differs");
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2] || k->ne[3] != v->ne[3])
        return fail_pair(ctx, op, "k", k, "v", v, "need equal ne[1..3] (kv length, heads, batch)");
    if (k->ne[2] == 0 || q->ne[2] % k->ne[2] != 0 || q->ne[3] != k->ne[3])
        return fail_pair(ctx, op, "q", q, "k", k,
                         "q heads must be a multiple of kv heads, equal batch");
    if (!tsr_is_contiguous_rows(q) || !tsr_is_contiguous_rows(k) || !tsr_is_contiguous_rows(v))
        return fail_pair(ctx, op, "q", q, "k", k, "rows (dim 0) must be dense");
    if (mask) {
        if (!mask_type_ok(mask))
            return fail_type(ctx, op, mask, "mask", "f32, f16");
        if (mask->ne[0] != k->ne[1] || mask->ne[1] < q->ne[1] || mask->ne[2] == 0 ||
            mask->ne[3] == 0 || q->ne[2] % mask->ne[2] != 0 || q->ne[3] % mask->ne[3] != 0 ||
            !tsr_is_contiguous_rows(mask))
            return fail_pair(ctx, op, "q", q, "mask", mask,
                             "need mask [S, >= T, heads | 1, batch | 1] with dense rows");
    }
    if (!isfinite(scale) || !(softcap >= 0.0f) || !isfinite(softcap))
        return tsr__ctx_fail(ctx, TSR_EINVAL, "%s: scale %g, softcap %g", op, (double)scale,
                             (double)softcap);
    const int64_t ne[4] = {v->ne[0], q->ne[2], q->ne[1], q->ne[3]};
    tsr_tensor *t = new_op(ctx, TSR_OP_FLASH_ATTN_EXT, TSR_TYPE_F32, ne, q, k, v, mask);
    if (t) {
        tsr__set_op_param_f32(t, 0, scale);
        tsr__set_op_param_f32(t, 1, softcap);
    }
    return t;
}

/* ---- shape and reductions ------------------------------------------------------------ */

tsr_tensor *tsr_concat(tsr_ctx *ctx, tsr_tensor *a, tsr_tensor *b, int dim)
{
    OP_NEED(ctx, a, "concat");
    OP_NEED(ctx, b, "concat");
    if (dim < 0 || dim >= TSR_MAX_DIMS)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "concat: dim %d (0..3 allowed)", dim);
    if (a->type != b->type || tsr_type_block_size(a->type) != 1)
        return fail_pair(ctx, "concat", "a", a, "b", b, "need the same non-block type");
    int64_t ne[4];
    for (int i = 0; i < TSR_MAX_DIMS; i++) {
        if (i != dim && a->ne[i] != b->ne[i])
            return fail_pair(ctx, "concat", "a", a, "b", b,
                             "dims other than the joined one differ");
        ne[i] = i == dim ? a->ne[i] + b->ne[i] : a->ne[i];
    }
    tsr_tensor *t = new_op(ctx, TSR_OP_CONCAT, a->type, ne, a, b, NULL, NULL);
    if (t)
        t->op_params[0] = dim;
    return t;
}

static tsr_tensor *row_op(tsr_ctx *ctx, tsr_op op, tsr_tensor *a, tsr_type out, int64_t ne0,
                          bool drop_dim0)
{
    const char *name = tsr_op_name(op);
    OP_NEED(ctx, a, name);
    if (a->type != TSR_TYPE_F32)
        return fail_type(ctx, name, a, "a", "f32");
    if (!tsr_is_contiguous_rows(a))
        return fail_one(ctx, name, "a", a, "rows (dim 0) must be dense");
    int64_t ne[4] = {ne0, a->ne[1], a->ne[2], a->ne[3]};
    if (drop_dim0) {
        ne[0] = a->ne[1];
        ne[1] = a->ne[2];
        ne[2] = a->ne[3];
        ne[3] = 1;
    }
    return new_op(ctx, op, out, ne, a, NULL, NULL, NULL);
}

tsr_tensor *tsr_sum_rows(tsr_ctx *ctx, tsr_tensor *a)
{
    return row_op(ctx, TSR_OP_SUM_ROWS, a, TSR_TYPE_F32, 1, false);
}

tsr_tensor *tsr_argmax(tsr_ctx *ctx, tsr_tensor *a)
{
    if (a && a->ne[0] == 0)
        return fail_one(ctx, "argmax", "a", a, "rows must not be empty");
    return row_op(ctx, TSR_OP_ARGMAX, a, TSR_TYPE_I32, 0, true);
}

tsr_tensor *tsr_argsort(tsr_ctx *ctx, tsr_tensor *a, tsr_sort_order order)
{
    if (order != TSR_SORT_ASC && order != TSR_SORT_DESC)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "argsort: unknown order %d", (int)order);
    tsr_tensor *t = row_op(ctx, TSR_OP_ARGSORT, a, TSR_TYPE_I32, a ? a->ne[0] : 0, false);
    if (t)
        t->op_params[0] = (int32_t)order;
    return t;
}

tsr_tensor *tsr_top_k(tsr_ctx *ctx, tsr_tensor *a, int k)
{
    if (a && (k < 1 || k > a->ne[0]))
        return tsr__ctx_fail(ctx, TSR_EINVAL, "top_k of '%s': k = %d must be in [1, %lld]",
                             tsr__tname(a), k, (long long)a->ne[0]);
    tsr_tensor *t = row_op(ctx, TSR_OP_TOP_K, a, TSR_TYPE_I32, k, false);
    if (t)
        t->op_params[0] = k;
    return t;
}

/* ---- rebuilding a node --------------------------------------------------------------- */

static float param_f32(const int32_t *p, int i)
{
    float f;
    memcpy(&f, &p[i], sizeof(f));
    return f;
}

tsr_tensor *tsr__op_rebuild(tsr_ctx *c, tsr_op op, const int32_t *p, tsr_tensor **s,
                            const int64_t ne[4])
{
    const float f0 = param_f32(p, 0), f1 = param_f32(p, 1);
    switch (op) {
    case TSR_OP_CONT:
        return tsr_cont_4d(c, s[0], ne[0], ne[1], ne[2], ne[3]);
    case TSR_OP_CPY:
        return tsr_cpy(c, s[0], s[1]);
    case TSR_OP_GET_ROWS:
        return tsr_get_rows(c, s[0], s[1]);
    case TSR_OP_SET_ROWS:
        return tsr_set_rows(c, s[2], s[0], s[1]);
    case TSR_OP_MUL_MAT:
        return tsr_mul_mat(c, s[0], s[1]);
    case TSR_OP_MUL_MAT_ID:
        return tsr_mul_mat_id(c, s[0], s[1], s[2]);
    case TSR_OP_ADD:
        return tsr_add(c, s[0], s[1]);
    case TSR_OP_SUB:
        return tsr_sub(c, s[0], s[1]);
    case TSR_OP_MUL:
        return tsr_mul(c, s[0], s[1]);
    case TSR_OP_DIV:
        return tsr_div(c, s[0], s[1]);
    case TSR_OP_ADD_ID:
        return tsr_add_id(c, s[0], s[1], s[2]);
    case TSR_OP_SCALE:
        return tsr_scale_bias(c, s[0], f0, f1);
    case TSR_OP_FILL:
        return tsr_fill(c, s[0], f0);
    case TSR_OP_SILU:
        return tsr_silu(c, s[0]);
    case TSR_OP_GELU:
        return tsr_gelu(c, s[0]);
    case TSR_OP_GLU:
        return tsr_glu(c, s[0], s[1], (tsr_glu_kind)p[0], p[1] != 0);
    case TSR_OP_RMS_NORM:
        return tsr_rms_norm(c, s[0], f0);
    case TSR_OP_ROPE:
        return tsr_rope(c, s[0], s[1], p[0], (tsr_rope_mode)p[1], param_f32(p, 2), param_f32(p, 3));
    case TSR_OP_SOFT_MAX:
        return tsr_soft_max(c, s[0], s[1], f0);
    case TSR_OP_FLASH_ATTN_EXT:
        return tsr_flash_attn_ext(c, s[0], s[1], s[2], s[3], f0, f1);
    case TSR_OP_CONCAT:
        return tsr_concat(c, s[0], s[1], p[0]);
    case TSR_OP_SUM_ROWS:
        return tsr_sum_rows(c, s[0]);
    case TSR_OP_ARGMAX:
        return tsr_argmax(c, s[0]);
    case TSR_OP_ARGSORT:
        return tsr_argsort(c, s[0], (tsr_sort_order)p[0]);
    case TSR_OP_TOP_K:
        return tsr_top_k(c, s[0], p[0]);
    default:
        return NULL;
    }
}

/* ---- names ------------------------------------------------------------------------- */

const char *tsr_op_name(tsr_op op)
{
    static const char *names[] = {
#define TSR__OP_NAME(name) #name,
        TSR_OP_LIST(TSR__OP_NAME)
#undef TSR__OP_NAME
    };
    return (int)op >= 0 && op < TSR_OP_COUNT ? names[op] : "?";
}

bool tsr_op_is_view(tsr_op op)
{
    return op == TSR_OP_VIEW || op == TSR_OP_RESHAPE || op == TSR_OP_PERMUTE ||
           op == TSR_OP_TRANSPOSE;
}
