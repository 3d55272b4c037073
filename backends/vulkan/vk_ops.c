/* backends/vulkan/vk_ops.c — from graph nodes to dispatches: which ops and
 * shapes the device runs (supports_op), the shader of each node, its push
 * constants and grid, and the recording of a node on a stream.
 *
 * Not the matrix products and attention (vk_ops_mm.c), nor the shaders.
 * Each pc_* struct below is the push-constant block of one shader, field
 * for field (std430: 64-bit addresses first, then 32-bit words), so the
 * shader and this file must change together. Sizes and strides travel as
 * 32-bit words: supports_op refuses tensors whose element count or byte
 * strides do not fit.
 */
#include <math.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

/* ---- push constants (one per shader) ----------------------------------------------------- */

typedef struct {
    uint64_t src, dst;
    uint32_t sne[4], snb[4], dne[4], dnb[4];
    uint32_t stype, dtype, n, same_shape;
} pc_cpy;

typedef struct {
    uint64_t src, dst;
    uint32_t ne[4], snb[4], dnb[4];
    uint32_t stype, dtype, n, mode;
} pc_cpy_q8;

typedef struct {
    uint64_t a, ids, dst, err;
    uint32_t ne[4], anb[3], inb[2];
    uint32_t atype, arows, site;
} pc_get_rows;

typedef struct {
    uint64_t dst, src, ids, err;
    uint32_t ne[4], snb[3], dnb[3], inb[2], ine[2];
    uint32_t dtype, drows, site;
} pc_set_rows;

typedef struct {
    uint64_t a, b, dst;
    uint32_t ne[4], anb[3], bne[4], bnb[3];
    uint32_t atype, btype, op;
} pc_binary;

typedef struct {
    uint64_t a, dst;
    uint32_t ne[4], anb[3];
    uint32_t type, op;
    float s, bias;
} pc_unary;

typedef struct {
    uint64_t a, b, dst;
    uint32_t ne[4], anb[3], bnb[3];
    uint32_t type, kind, swapped, has_b;
} pc_glu;

typedef struct {
    uint64_t a, b, ids, dst, err;
    uint32_t ne[3], anb[2], bnb1, inb1, n_exp, site;
} pc_add_id;

typedef struct {
    uint64_t a, dst;
    uint32_t ne[4], anb[3];
    float eps;
} pc_rms_norm;

typedef struct {
    uint64_t a, mask, dst;
    uint32_t ne[4], anb[3], mnb[3], mne[2], mtype, has_mask;
    float scale;
} pc_soft_max;

typedef struct {
    uint64_t a, pos, dst;
    uint32_t ne[4], anb[3];
    uint32_t type, n_dims, neox;
    float freq_scale;
    uint32_t log2_base[2];
    float log2_base_f;
} pc_rope;

typedef struct {
    uint64_t a, b, dst;
    uint32_t ne[4], anb[4], bnb[4];
    uint32_t a_extent, dim, esz;
} pc_concat;

typedef struct {
    uint64_t a, dst;
    uint32_t ne[4], anb[3];
} pc_rows;

typedef struct {
    uint64_t a, dst;
    uint32_t ne[4], anb[3];
    uint32_t desc, k, P;
} pc_argsort;

_Static_assert(sizeof(pc_cpy) <= VK_PC_SIZE && sizeof(pc_set_rows) <= VK_PC_SIZE &&
                   sizeof(pc_binary) <= VK_PC_SIZE && sizeof(pc_concat) <= VK_PC_SIZE &&
                   sizeof(pc_rope) <= VK_PC_SIZE && sizeof(pc_soft_max) <= VK_PC_SIZE,
               "push constants fit 128 bytes");

/* ---- helpers ------------------------------------------------------------------------------- */

#define VK_SORT_MAX 4096   /* MAXP of argsort.comp */
#define VK_SORT_BLOCK 1024 /* B of argsort.comp */

static void ne_of(uint32_t out[4], const tsr_tensor *t)
{
    for (int i = 0; i < 4; i++)
        out[i] = (uint32_t)t->ne[i];
}

static void nb_of(uint32_t out[4], const tsr_tensor *t)
{
    for (int i = 0; i < 4; i++)
        out[i] = (uint32_t)t->nb[i];
}

/* nb[1..3] */
static void nb_rows(uint32_t out[3], const tsr_tensor *t)
{
    for (int i = 0; i < 3; i++)
        out[i] = (uint32_t)t->nb[i + 1];
}

void tsr__vk_grid_1d(const vk_device *d, uint64_t n, uint32_t wg, uint32_t groups[3])
{
    const uint64_t total = (n + wg - 1) / wg;
    const uint64_t gx = TSR_MIN(total, (uint64_t)d->limits.maxComputeWorkGroupCount[0]);
    groups[0] = (uint32_t)(gx ? gx : 1);
    groups[1] = (uint32_t)(gx ? (total + gx - 1) / gx : 0);
    groups[2] = 1;
    if (total == 0)
        groups[0] = groups[1] = 0;
}

/* Whether t's sizes and strides fit the 32-bit words of the shaders. */
static bool fits32(const tsr_tensor *t)
{
    if (!t)
        return true;
    uint64_t n = 1;
    for (int i = 0; i < 4; i++) {
        if (t->ne[i] < 0 || t->ne[i] > INT32_MAX || t->nb[i] > UINT32_MAX)
            return false;
        n *= (uint64_t)t->ne[i];
    }
    return n <= INT32_MAX;
}

static uint32_t pow2_at_least(uint32_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

bool tsr__vk_supports_op(vk_device *d, const tsr_tensor *n)
{
    if (!fits32(n))
        return false;
    for (int i = 0; i < TSR_MAX_SRC; i++)
        if (!fits32(n->src[i]))
            return false;
    switch (n->op) {
    case TSR_OP_CONT:
    case TSR_OP_CPY:
    case TSR_OP_GET_ROWS:
    case TSR_OP_SET_ROWS:
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
    case TSR_OP_ADD_ID:
    case TSR_OP_SCALE:
    case TSR_OP_FILL:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
    case TSR_OP_GLU:
    case TSR_OP_RMS_NORM:
    case TSR_OP_ROPE:
    case TSR_OP_SOFT_MAX:
    case TSR_OP_CONCAT:
    case TSR_OP_SUM_ROWS:
    case TSR_OP_ARGMAX:
        return true;
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        /* One workgroup sorts a row in shared memory (values + indices);
         * TOP_K streams longer rows through it, keeping k < MAXP - B. */
        if (d->limits.maxComputeSharedMemorySize < VK_SORT_MAX * 8)
            return false;
        return n->src[0]->ne[0] <= VK_SORT_MAX ||
               (n->op == TSR_OP_TOP_K && n->ne[0] < VK_SORT_MAX - VK_SORT_BLOCK);
    case TSR_OP_MUL_MAT:
    case TSR_OP_MUL_MAT_ID:
    case TSR_OP_FLASH_ATTN_EXT:
        return tsr__vk_mm_supported(d, n);
    default:
        return false;
    }
}

static bool is_q8(tsr_type t) { return t == TSR_TYPE_Q8_0; }

static tsr__vk_shader_id shader_of(vk_device *d, const tsr_tensor *n)
{
    switch (n->op) {
    case TSR_OP_CONT:
    case TSR_OP_CPY:
        return is_q8(n->src[0]->type) || is_q8(n->type) ? VK_SH_cpy_q8 : VK_SH_cpy;
    case TSR_OP_GET_ROWS:
        return VK_SH_get_rows;
    case TSR_OP_SET_ROWS:
        return VK_SH_set_rows;
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
        return VK_SH_binary;
    case TSR_OP_ADD_ID:
        return VK_SH_add_id;
    case TSR_OP_SCALE:
    case TSR_OP_FILL:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
        return VK_SH_unary;
    case TSR_OP_GLU:
        return VK_SH_glu;
    case TSR_OP_RMS_NORM:
        return VK_SH_rms_norm;
    case TSR_OP_ROPE:
        return d->has_f64 ? VK_SH_rope : VK_SH_rope_f32;
    case TSR_OP_SOFT_MAX:
        return VK_SH_soft_max;
    case TSR_OP_CONCAT:
        return VK_SH_concat;
    case TSR_OP_SUM_ROWS:
        return VK_SH_sum_rows;
    case TSR_OP_ARGMAX:
        return VK_SH_argmax;
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        return VK_SH_argsort;
    default:
        return tsr__vk_mm_shader(d, n);
    }
}

/* Elements of block types and 16-bit types sit on 2-byte boundaries,
 * others on 4. */
static size_t align_of_type(tsr_type t) { return t == TSR_TYPE_F32 || t == TSR_TYPE_I32 ? 4 : 2; }

static tsr_status check_tensor(vk_device *d, const tsr_tensor *t, const tsr_tensor *node)
{
    if (!tsr__vk_is_buffer(t->buffer) || tsr__vk_buffer_of(t)->d != d)
        return tsr__error(TSR_EUNSUPPORTED, "%s: '%s' (of node '%s') is not in %s memory", d->name,
                          t->name, node->name, d->name);
    const size_t a = align_of_type(t->type);
    if (tsr__vk_offset(t) % a != 0)
        return tsr__error(TSR_EUNSUPPORTED,
                          "%s: '%s' (of node '%s') starts at byte %zu, not a multiple of %zu",
                          d->name, t->name, node->name, tsr__vk_offset(t), a);
    return TSR_OK;
}

static bool runs(const tsr_tensor *n)
{
    return (n->flags & TSR_TENSOR_FLAG_COMPUTE) && n->op != TSR_OP_NONE && !tsr_op_is_view(n->op) &&
           tsr_nelements(n) > 0;
}

tsr_status tsr__vk_graph_prepare(vk_device *d, tsr_graph *g)
{
    tsr_status st = tsr__vk_device_ready(d);
    for (size_t i = 0; i < tsr_graph_n_nodes(g) && st == TSR_OK; i++) {
        const tsr_tensor *n = tsr_graph_node(g, i);
        if (!runs(n))
            continue;
        st = check_tensor(d, n, n);
        for (int s = 0; s < TSR_MAX_SRC && st == TSR_OK; s++)
            if (n->src[s])
                st = check_tensor(d, n->src[s], n);
        VkPipeline p;
        if (st == TSR_OK)
            st = tsr__vk_pipeline(d, shader_of(d, n), &p);
    }
    return st;
}

/* ---- launches of the element-wise and row ops -------------------------------------------- */

#define PC_SET(l, type, var)             \
    type *var = (type *)(l)->pc;         \
    memset((l)->pc, 0, sizeof((l)->pc)); \
    (l)->pc_size = sizeof(type)

static void plan_cpy(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *s = n->src[0];
    const uint64_t count = (uint64_t)tsr_nelements(s);
    if (is_q8(s->type) || is_q8(n->type)) {
        PC_SET(l, pc_cpy_q8, p);
        p->src = tsr__vk_addr(s);
        p->dst = tsr__vk_addr(n);
        ne_of(p->ne, s);
        nb_of(p->snb, s);
        nb_of(p->dnb, n);
        p->stype = s->type;
        p->dtype = n->type;
        p->mode = s->type == n->type ? 0 : is_q8(n->type) ? 1 : 2;
        p->n = (uint32_t)(p->mode == 2 ? count : count / 32);
        tsr__vk_grid_1d(d, p->n, 64, l->groups);
        return;
    }
    PC_SET(l, pc_cpy, p);
    p->src = tsr__vk_addr(s);
    p->dst = tsr__vk_addr(n);
    ne_of(p->sne, s);
    nb_of(p->snb, s);
    ne_of(p->dne, n);
    nb_of(p->dnb, n);
    p->stype = s->type;
    p->dtype = n->type;
    p->n = (uint32_t)count;
    p->same_shape = tsr_same_shape(s, n);
    tsr__vk_grid_1d(d, count, 256, l->groups);
}

static void plan_binary(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    PC_SET(l, pc_binary, p);
    p->a = tsr__vk_addr(a);
    p->b = tsr__vk_addr(b);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, n);
    nb_rows(p->anb, a);
    ne_of(p->bne, b);
    nb_rows(p->bnb, b);
    p->atype = a->type;
    p->btype = b->type;
    p->op = n->op == TSR_OP_ADD ? 0 : n->op == TSR_OP_SUB ? 1 : n->op == TSR_OP_MUL ? 2 : 3;
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_unary(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0];
    PC_SET(l, pc_unary, p);
    p->a = tsr__vk_addr(a);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, n);
    nb_rows(p->anb, a);
    p->type = n->type;
    p->op = n->op == TSR_OP_SCALE ? 0 : n->op == TSR_OP_FILL ? 1 : n->op == TSR_OP_SILU ? 2 : 3;
    p->s = tsr_get_op_param_f32(n, 0);
    p->bias = n->op == TSR_OP_SCALE ? tsr_get_op_param_f32(n, 1) : 0.0f;
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_glu(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    PC_SET(l, pc_glu, p);
    p->a = tsr__vk_addr(a);
    p->b = b ? tsr__vk_addr(b) : p->a;
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, n);
    nb_rows(p->anb, a);
    nb_rows(p->bnb, b ? b : a);
    p->type = n->type;
    p->kind = (uint32_t)n->op_params[0];
    p->swapped = n->op_params[1] != 0;
    p->has_b = b != NULL;
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_rows(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0];
    PC_SET(l, pc_rows, p);
    p->a = tsr__vk_addr(a);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, a);
    nb_rows(p->anb, a);
    tsr__vk_grid_1d(d, (uint64_t)tsr_nrows(a), 1, l->groups);
}

static void plan_rms_norm(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0];
    PC_SET(l, pc_rms_norm, p);
    p->a = tsr__vk_addr(a);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, a);
    nb_rows(p->anb, a);
    p->eps = tsr_get_op_param_f32(n, 0);
    tsr__vk_grid_1d(d, (uint64_t)tsr_nrows(a), 1, l->groups);
}

static void plan_soft_max(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *m = n->src[1];
    PC_SET(l, pc_soft_max, p);
    p->a = tsr__vk_addr(a);
    p->mask = m ? tsr__vk_addr(m) : p->a;
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, a);
    nb_rows(p->anb, a);
    if (m) {
        nb_rows(p->mnb, m);
        p->mne[0] = (uint32_t)m->ne[2];
        p->mne[1] = (uint32_t)m->ne[3];
        p->mtype = m->type;
        p->has_mask = 1;
    } else {
        p->mne[0] = p->mne[1] = 1;
    }
    p->scale = tsr_get_op_param_f32(n, 0);
    tsr__vk_grid_1d(d, (uint64_t)tsr_nrows(a), 1, l->groups);
}

static void plan_rope(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0];
    PC_SET(l, pc_rope, p);
    p->a = tsr__vk_addr(a);
    p->pos = tsr__vk_addr(n->src[1]);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, n);
    nb_rows(p->anb, a);
    p->type = n->type;
    p->n_dims = (uint32_t)n->op_params[0];
    p->neox = n->op_params[1] == TSR_ROPE_NEOX;
    p->freq_scale = tsr_get_op_param_f32(n, 3);
    const double lb = log2((double)tsr_get_op_param_f32(n, 2));
    uint64_t bits;
    memcpy(&bits, &lb, sizeof(bits));
    p->log2_base[0] = (uint32_t)bits;
    p->log2_base[1] = (uint32_t)(bits >> 32);
    p->log2_base_f = (float)lb;
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_concat(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1];
    PC_SET(l, pc_concat, p);
    p->a = tsr__vk_addr(a);
    p->b = tsr__vk_addr(b);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, n);
    nb_of(p->anb, a);
    nb_of(p->bnb, b);
    p->dim = (uint32_t)n->op_params[0];
    p->a_extent = (uint32_t)a->ne[p->dim];
    p->esz = (uint32_t)tsr_type_size(n->type);
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_argsort(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0];
    PC_SET(l, pc_argsort, p);
    p->a = tsr__vk_addr(a);
    p->dst = tsr__vk_addr(n);
    ne_of(p->ne, a);
    nb_rows(p->anb, a);
    p->desc = n->op == TSR_OP_TOP_K || n->op_params[0] == TSR_SORT_DESC;
    p->k = (uint32_t)n->ne[0];
    p->P = a->ne[0] <= VK_SORT_MAX ? pow2_at_least((uint32_t)a->ne[0]) : VK_SORT_MAX;
    tsr__vk_grid_1d(d, (uint64_t)tsr_nrows(a), 1, l->groups);
}

static void plan_get_rows(vk_stream *s, vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *ids = n->src[1];
    PC_SET(l, pc_get_rows, p);
    p->a = tsr__vk_addr(a);
    p->ids = tsr__vk_addr(ids);
    p->dst = tsr__vk_addr(n);
    p->site = tsr__vk_error_site_locked(s, n, &p->err);
    ne_of(p->ne, n);
    nb_rows(p->anb, a);
    p->inb[0] = (uint32_t)ids->nb[1];
    p->inb[1] = (uint32_t)ids->nb[2];
    p->atype = a->type;
    p->arows = (uint32_t)a->ne[1];
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

static void plan_set_rows(vk_stream *s, vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *src = n->src[0], *ids = n->src[1];
    PC_SET(l, pc_set_rows, p);
    p->dst = tsr__vk_addr(n);
    p->src = tsr__vk_addr(src);
    p->ids = tsr__vk_addr(ids);
    p->site = tsr__vk_error_site_locked(s, n, &p->err);
    ne_of(p->ne, src);
    nb_rows(p->snb, src);
    nb_rows(p->dnb, n);
    p->inb[0] = (uint32_t)ids->nb[1];
    p->inb[1] = (uint32_t)ids->nb[2];
    p->ine[0] = (uint32_t)ids->ne[1];
    p->ine[1] = (uint32_t)ids->ne[2];
    p->dtype = n->type;
    p->drows = (uint32_t)n->ne[1];
    const uint64_t items = (uint64_t)tsr_nelements(src) / (is_q8(n->type) ? 32 : 1);
    tsr__vk_grid_1d(d, items, 64, l->groups);
}

static void plan_add_id(vk_stream *s, vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *a = n->src[0], *b = n->src[1], *ids = n->src[2];
    PC_SET(l, pc_add_id, p);
    p->a = tsr__vk_addr(a);
    p->b = tsr__vk_addr(b);
    p->ids = tsr__vk_addr(ids);
    p->dst = tsr__vk_addr(n);
    p->site = tsr__vk_error_site_locked(s, n, &p->err);
    p->ne[0] = (uint32_t)n->ne[0];
    p->ne[1] = (uint32_t)n->ne[1];
    p->ne[2] = (uint32_t)n->ne[2];
    p->anb[0] = (uint32_t)a->nb[1];
    p->anb[1] = (uint32_t)a->nb[2];
    p->bnb1 = (uint32_t)b->nb[1];
    p->inb1 = (uint32_t)ids->nb[1];
    p->n_exp = (uint32_t)b->ne[1];
    tsr__vk_grid_1d(d, (uint64_t)tsr_nelements(n), 256, l->groups);
}

/* ---- recording ------------------------------------------------------------------------------- */

static vk_range range_of(const tsr_tensor *t)
{
    const uint64_t a = tsr__vk_addr(t);
    return (vk_range){a, a + tsr_nbytes(t)};
}

void tsr__vk_record_node(vk_stream *s, tsr_tensor *n)
{
    vk_device *d = tsr__vk_buffer_of(n)->d;
    vk_launch launches[4];
    int n_launch = 1;
    vk_launch *l = &launches[0];
    memset(l, 0, sizeof(*l));
    l->id = shader_of(d, n);
    switch (n->op) {
    case TSR_OP_CONT:
    case TSR_OP_CPY:
        plan_cpy(d, n, l);
        break;
    case TSR_OP_GET_ROWS:
        plan_get_rows(s, d, n, l);
        break;
    case TSR_OP_SET_ROWS:
        plan_set_rows(s, d, n, l);
        break;
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
        plan_binary(d, n, l);
        break;
    case TSR_OP_ADD_ID:
        plan_add_id(s, d, n, l);
        break;
    case TSR_OP_SCALE:
    case TSR_OP_FILL:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
        plan_unary(d, n, l);
        break;
    case TSR_OP_GLU:
        plan_glu(d, n, l);
        break;
    case TSR_OP_RMS_NORM:
        plan_rms_norm(d, n, l);
        break;
    case TSR_OP_ROPE:
        plan_rope(d, n, l);
        break;
    case TSR_OP_SOFT_MAX:
        plan_soft_max(d, n, l);
        break;
    case TSR_OP_CONCAT:
        plan_concat(d, n, l);
        break;
    case TSR_OP_SUM_ROWS:
    case TSR_OP_ARGMAX:
        plan_rows(d, n, l);
        break;
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        plan_argsort(d, n, l);
        break;
    default: {
        uint64_t err = 0;
        uint32_t site = 0;
        if (n->op == TSR_OP_MUL_MAT_ID)
            site = tsr__vk_error_site_locked(s, n, &err);
        tsr__vk_mm_plan(d, n, err, site, launches, &n_launch);
        break;
    }
    }
    /* What the node reads: its sources, except those only giving a shape
     * (FILL) or being the memory it writes (CPY, SET_ROWS). */
    vk_range reads[TSR_MAX_SRC];
    int n_reads = 0;
    for (int i = 0; i < TSR_MAX_SRC; i++) {
        const tsr_tensor *src = n->src[i];
        if (!src || n->op == TSR_OP_FILL || (n->op == TSR_OP_CPY && i == 1) ||
            (n->op == TSR_OP_SET_ROWS && i == 2))
            continue;
        reads[n_reads++] = range_of(src);
    }
    for (int i = 0; i < n_launch; i++)
        tsr__vk_dispatch_locked(s, launches[i].id, launches[i].pc, launches[i].pc_size,
                                launches[i].groups[0], launches[i].groups[1], launches[i].groups[2],
                                reads, n_reads, range_of(n),
                                launches[i].texel_sets[0] ? launches[i].texel_sets : NULL);
}
