/* core/tensor.c — tensor contexts, tensor creation, and the layout ops that
 * only reinterpret memory (view, reshape, permute, transpose).
 *
 * A context is a fixed-capacity array of tensor structs: pointers stay valid
 * until the context is reset or freed, and building a graph each step
 * allocates nothing once the context exists. Constructors record the first
 * error in the context (sticky) and return NULL.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/tensor_impl.h"
#include "tessera/tensor.h"

struct tsr_ctx {
    tsr_tensor *tensors;
    size_t n, cap;
    tsr_status status;
    char error[512];
};

tsr_ctx *tsr_ctx_new(size_t max_tensors)
{
    tsr_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return NULL;
    ctx->tensors = calloc(max_tensors ? max_tensors : 1, sizeof(tsr_tensor));
    if (!ctx->tensors) {
        free(ctx);
        return NULL;
    }
    ctx->cap = max_tensors;
    return ctx;
}

void tsr_ctx_free(tsr_ctx *ctx)
{
    if (!ctx)
        return;
    free(ctx->tensors);
    free(ctx);
}

void tsr_ctx_reset(tsr_ctx *ctx)
{
    ctx->n = 0;
    ctx->status = TSR_OK;
    ctx->error[0] = '\0';
}

tsr_status tsr_ctx_status(const tsr_ctx *ctx) { return ctx->status; }
const char *tsr_ctx_error(const tsr_ctx *ctx) { return ctx->error; }
size_t tsr_ctx_n_tensors(const tsr_ctx *ctx) { return ctx->n; }

tsr_tensor *tsr_ctx_tensor(tsr_ctx *ctx, size_t i) { return i < ctx->n ? &ctx->tensors[i] : NULL; }

tsr_tensor *tsr_ctx_find(tsr_ctx *ctx, const char *name)
{
    for (size_t i = 0; i < ctx->n; i++)
        if (strcmp(ctx->tensors[i].name, name) == 0)
            return &ctx->tensors[i];
    return NULL;
}

tsr_tensor *tsr__ctx_fail(tsr_ctx *ctx, tsr_status status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tsr__error(status, "%s", msg);
    if (ctx->status == TSR_OK) {
        ctx->status = status;
        snprintf(ctx->error, sizeof(ctx->error), "%s", msg);
    }
    return NULL;
}

/* ---- tensor properties ------------------------------------------------------- */

int64_t tsr_nelements(const tsr_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t tsr_nrows(const tsr_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t tsr_nbytes(const tsr_tensor *t)
{
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        if (t->ne[i] <= 0)
            return 0;
    /* First element's bytes plus the farthest offset reachable by the
     * strides; correct for permuted views too. Blocks keep dim 0 dense. */
    const int64_t blck = tsr_type_block_size(t->type);
    size_t n;
    int first;
    if (blck == 1) {
        n = tsr_type_size(t->type);
        first = 0;
    } else {
        n = (size_t)(t->ne[0] / blck) * t->nb[0];
        first = 1;
    }
    for (int i = first; i < TSR_MAX_DIMS; i++)
        n += (size_t)(t->ne[i] - 1) * t->nb[i];
    return n;
}

bool tsr_is_contiguous_rows(const tsr_tensor *t) { return t->nb[0] == tsr_type_size(t->type); }

bool tsr_is_contiguous(const tsr_tensor *t)
{
    size_t next = tsr_type_size(t->type);
    for (int i = 0; i < TSR_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != next)
            return false;
        next = (i == 0 ? next * (size_t)(t->ne[0] / tsr_type_block_size(t->type))
                       : next * (size_t)t->ne[i]);
    }
    return true;
}

bool tsr_same_shape(const tsr_tensor *a, const tsr_tensor *b)
{
    for (int i = 0; i < TSR_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i])
            return false;
    return true;
}

int tsr_n_dims(const tsr_tensor *t)
{
    for (int i = TSR_MAX_DIMS - 1; i >= 1; i--)
        if (t->ne[i] != 1)
            return i + 1;
    return 1;
}

const char *tsr_shape_str(const tsr_tensor *t, char *buf, size_t size)
{
    snprintf(buf, size, "[%lld, %lld, %lld, %lld]", (long long)t->ne[0], (long long)t->ne[1],
             (long long)t->ne[2], (long long)t->ne[3]);
    return buf;
}

float tsr_get_op_param_f32(const tsr_tensor *t, int i)
{
    float f;
    memcpy(&f, &t->op_params[i], sizeof(f));
    return f;
}

int32_t tsr_get_op_param_i32(const tsr_tensor *t, int i) { return t->op_params[i]; }

void tsr__set_op_param_f32(tsr_tensor *t, int i, float v)
{
    memcpy(&t->op_params[i], &v, sizeof(v));
}

tsr_tensor *tsr_set_name(tsr_tensor *t, const char *fmt, ...)
{
    if (!t)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    return t;
}

const char *tsr__tname(const tsr_tensor *t) { return t->name[0] ? t->name : tsr_op_name(t->op); }

/* ---- creation --------------------------------------------------------------------- */

void tsr__set_contiguous_strides(tsr_tensor *t)
{
    t->nb[0] = tsr_type_size(t->type);
    t->nb[1] = t->nb[0] * (size_t)(t->ne[0] / tsr_type_block_size(t->type));
    for (int i = 2; i < TSR_MAX_DIMS; i++)
        t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
}

/* Checks that the dims are non-negative, the row is whole blocks and the byte
 * size fits in size_t. */
static bool shape_ok(tsr_ctx *ctx, tsr_type type, const int64_t ne[4], const char *what)
{
    if (!tsr_type_valid((int)type)) {
        tsr__ctx_fail(ctx, TSR_ETYPE, "%s: invalid type %d", what, (int)type);
        return false;
    }
    size_t total = tsr_type_size(type);
    for (int i = 0; i < TSR_MAX_DIMS; i++) {
        if (ne[i] < 0) {
            tsr__ctx_fail(ctx, TSR_ESHAPE, "%s: ne[%d] = %lld is negative", what, i,
                          (long long)ne[i]);
            return false;
        }
        size_t dim = (size_t)(i == 0 ? ne[0] / tsr_type_block_size(type) : ne[i]);
        if (!tsr__mul_ok(total, dim ? dim : 1, &total) || total > (size_t)INT64_MAX) {
            tsr__ctx_fail(ctx, TSR_ERANGE, "%s: [%lld, %lld, %lld, %lld] %s is too large", what,
                          (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3],
                          tsr_type_name(type));
            return false;
        }
    }
    if (ne[0] % tsr_type_block_size(type) != 0) {
        tsr__ctx_fail(ctx, TSR_ESHAPE, "%s: ne[0] = %lld is not a multiple of the %s block (%lld)",
                      what, (long long)ne[0], tsr_type_name(type),
                      (long long)tsr_type_block_size(type));
        return false;
    }
    return true;
}

tsr_tensor *tsr__new_raw(tsr_ctx *ctx, tsr_type type, const int64_t ne[4], const char *what)
{
    if (!shape_ok(ctx, type, ne, what))
        return NULL;
    if (ctx->n >= ctx->cap)
        return tsr__ctx_fail(ctx, TSR_ENOMEM, "%s: context full (%zu tensors)", what, ctx->cap);
    tsr_tensor *t = &ctx->tensors[ctx->n++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    memcpy(t->ne, ne, sizeof(t->ne));
    tsr__set_contiguous_strides(t);
    return t;
}

tsr_tensor *tsr_new_tensor(tsr_ctx *ctx, tsr_type type, int n_dims, const int64_t *ne)
{
    if (n_dims < 1 || n_dims > TSR_MAX_DIMS || !ne)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "new_tensor: %d dims (1..4 allowed)", n_dims);
    int64_t full[4] = {1, 1, 1, 1};
    memcpy(full, ne, (size_t)n_dims * sizeof(int64_t));
    return tsr__new_raw(ctx, type, full, "new_tensor");
}

tsr_tensor *tsr_new_tensor_1d(tsr_ctx *ctx, tsr_type type, int64_t ne0)
{
    return tsr__new_raw(ctx, type, (int64_t[4]){ne0, 1, 1, 1}, "new_tensor");
}

tsr_tensor *tsr_new_tensor_2d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1)
{
    return tsr__new_raw(ctx, type, (int64_t[4]){ne0, ne1, 1, 1}, "new_tensor");
}

tsr_tensor *tsr_new_tensor_3d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2)
{
    return tsr__new_raw(ctx, type, (int64_t[4]){ne0, ne1, ne2, 1}, "new_tensor");
}

tsr_tensor *tsr_new_tensor_4d(tsr_ctx *ctx, tsr_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                              int64_t ne3)
{
    return tsr__new_raw(ctx, type, (int64_t[4]){ne0, ne1, ne2, ne3}, "new_tensor");
}

tsr_tensor *tsr_dup_tensor(tsr_ctx *ctx, const tsr_tensor *t)
{
    if (!t)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "dup_tensor: NULL source");
    return tsr__new_raw(ctx, t->type, t->ne, "dup_tensor");
}

/* ---- layout ops ------------------------------------------------------------------- */

/* The tensor that owns the memory a view chain refers to. */
static const tsr_tensor *view_root(const tsr_tensor *a) { return a->view_src ? a->view_src : a; }

/* A view of a with the given shape and strides at byte `offset` from a's
 * start, checked to stay inside the memory of a's root. */
static tsr_tensor *make_view(tsr_ctx *ctx, tsr_tensor *a, tsr_op op, const int64_t ne[4],
                             const size_t nb[4], size_t offset, const char *what)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "%s: NULL source", what);
    if (!shape_ok(ctx, a->type, ne, what))
        return NULL;
    const tsr_tensor *root = view_root(a);
    tsr_tensor probe = {.type = a->type};
    memcpy(probe.ne, ne, sizeof(probe.ne));
    memcpy(probe.nb, nb, sizeof(probe.nb));
    size_t offs = 0, end = 0;
    if (!tsr__add_ok(a->view_offs, offset, &offs) || !tsr__add_ok(offs, tsr_nbytes(&probe), &end) ||
        end > tsr_nbytes(root)) {
        char s[64];
        return tsr__ctx_fail(ctx, TSR_ERANGE,
                             "%s of '%s': %s (%zu bytes) at offset %zu does not fit in the %zu "
                             "bytes of its source",
                             what, tsr__tname(a), tsr_shape_str(&probe, s, sizeof(s)),
                             tsr_nbytes(&probe), offset, tsr_nbytes(root));
    }
    tsr_tensor *t = tsr__new_raw(ctx, a->type, ne, what);
    if (!t)
        return NULL;
    memcpy(t->nb, nb, sizeof(t->nb));
    t->op = op;
    t->src[0] = a;
    t->view_src = (tsr_tensor *)root;
    t->view_offs = offs;
    /* A view is placed where its source is, if the source is already placed. */
    if (root->buffer) {
        t->buffer = root->buffer;
        t->data = (char *)root->data + offs;
    }
    snprintf(t->name, sizeof(t->name), "%.50s (view)", tsr__tname(a));
    return t;
}

tsr_tensor *tsr_view_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "view: NULL source");
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    const size_t nb[4] = {tsr_type_size(a->type), nb1, nb2, nb3};
    return make_view(ctx, a, TSR_OP_VIEW, ne, nb, offset, "view");
}

tsr_tensor *tsr_view_3d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                        size_t nb1, size_t nb2, size_t offset)
{
    return tsr_view_4d(ctx, a, ne0, ne1, ne2, 1, nb1, nb2, nb2 * (size_t)(ne2 > 0 ? ne2 : 1),
                       offset);
}

tsr_tensor *tsr_view_2d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, size_t nb1,
                        size_t offset)
{
    size_t nb2 = nb1 * (size_t)(ne1 > 0 ? ne1 : 1);
    return tsr_view_4d(ctx, a, ne0, ne1, 1, 1, nb1, nb2, nb2, offset);
}

tsr_tensor *tsr_view_1d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, size_t offset)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "view: NULL source");
    size_t nb1 = tsr_row_size(a->type, ne0);
    return tsr_view_4d(ctx, a, ne0, 1, 1, 1, nb1, nb1, nb1, offset);
}

tsr_tensor *tsr_reshape_4d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                           int64_t ne3)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "reshape: NULL source");
    char s[64];
    if (!tsr_is_contiguous(a))
        return tsr__ctx_fail(ctx, TSR_ESHAPE, "reshape of '%s' %s: source is not contiguous",
                             tsr__tname(a), tsr_shape_str(a, s, sizeof(s)));
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    if (ne0 < 0 || ne1 < 0 || ne2 < 0 || ne3 < 0 || ne0 * ne1 * ne2 * ne3 != tsr_nelements(a))
        return tsr__ctx_fail(
            ctx, TSR_ESHAPE, "reshape of '%s' %s (%lld elements) to [%lld, %lld, %lld, %lld]",
            tsr__tname(a), tsr_shape_str(a, s, sizeof(s)), (long long)tsr_nelements(a),
            (long long)ne0, (long long)ne1, (long long)ne2, (long long)ne3);
    tsr_tensor probe = {.type = a->type};
    memcpy(probe.ne, ne, sizeof(ne));
    if (ne0 % tsr_type_block_size(a->type) != 0)
        return tsr__ctx_fail(ctx, TSR_ESHAPE, "reshape of '%s': ne[0] = %lld splits a %s block",
                             tsr__tname(a), (long long)ne0, tsr_type_name(a->type));
    tsr__set_contiguous_strides(&probe);
    return make_view(ctx, a, TSR_OP_RESHAPE, ne, probe.nb, 0, "reshape");
}

tsr_tensor *tsr_reshape_3d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2)
{
    return tsr_reshape_4d(ctx, a, ne0, ne1, ne2, 1);
}

tsr_tensor *tsr_reshape_2d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0, int64_t ne1)
{
    return tsr_reshape_4d(ctx, a, ne0, ne1, 1, 1);
}

tsr_tensor *tsr_reshape_1d(tsr_ctx *ctx, tsr_tensor *a, int64_t ne0)
{
    return tsr_reshape_4d(ctx, a, ne0, 1, 1, 1);
}

tsr_tensor *tsr_permute(tsr_ctx *ctx, tsr_tensor *a, int axis0, int axis1, int axis2, int axis3)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "permute: NULL source");
    const int axes[4] = {axis0, axis1, axis2, axis3};
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        if (axes[i] < 0 || axes[i] > 3 || (seen & (1 << axes[i])))
            return tsr__ctx_fail(ctx, TSR_EINVAL,
                                 "permute of '%s': (%d, %d, %d, %d) is not a permutation of 0..3",
                                 tsr__tname(a), axis0, axis1, axis2, axis3);
        seen |= 1 << axes[i];
    }
    if (tsr_type_block_size(a->type) != 1 && axes[0] != 0)
        return tsr__ctx_fail(ctx, TSR_ETYPE, "permute of '%s': cannot move dim 0 of a %s tensor",
                             tsr__tname(a), tsr_type_name(a->type));
    int64_t ne[4];
    size_t nb[4];
    for (int i = 0; i < 4; i++) {
        ne[axes[i]] = a->ne[i];
        nb[axes[i]] = a->nb[i];
    }
    tsr_tensor *t = make_view(ctx, a, TSR_OP_PERMUTE, ne, nb, 0, "permute");
    if (t)
        memcpy(t->op_params, axes, sizeof(axes));
    return t;
}

tsr_tensor *tsr_transpose(tsr_ctx *ctx, tsr_tensor *a)
{
    if (!a)
        return tsr__ctx_fail(ctx, TSR_EINVAL, "transpose: NULL source");
    if (tsr_type_block_size(a->type) != 1)
        return tsr__ctx_fail(ctx, TSR_ETYPE, "transpose of '%s': cannot transpose a %s tensor",
                             tsr__tname(a), tsr_type_name(a->type));
    const int64_t ne[4] = {a->ne[1], a->ne[0], a->ne[2], a->ne[3]};
    const size_t nb[4] = {a->nb[1], a->nb[0], a->nb[2], a->nb[3]};
    tsr_tensor *t = make_view(ctx, a, TSR_OP_TRANSPOSE, ne, nb, 0, "transpose");
    if (t) {
        const int axes[4] = {1, 0, 2, 3};
        memcpy(t->op_params, axes, sizeof(axes));
    }
    return t;
}
