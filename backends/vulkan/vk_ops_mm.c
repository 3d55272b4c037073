/* backends/vulkan/vk_ops_mm.c — the matrix products and attention: which
 * kernel runs a MUL_MAT (matrix-vector for few columns, the tiled GEMM
 * otherwise), MUL_MAT_ID and FLASH_ATTN_EXT, with their push constants and
 * grids.
 *
 * Not the kernels themselves (shaders/mul_mat*.comp, flash_attn.comp).
 * Shapes: W: [K, N, B2, B3], X: F32 [K, T, C2, C3], Y = Wᵀ·X: [N, T, C2, C3].
 * Every product accumulates in F32 with x used as is (no rounding of x to
 * the weight type), so F32 and F16 weights match the reference up to
 * summation order.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

enum {
    VK_MV_MAX_T = 8, /* columns the matrix-vector kernel takes (MAXT) */
    VK_MV_ROWS = 2,  /* rows per workgroup of mul_mat_vec.comp */
    VK_MM_TILE = 64, /* BM = BN of mul_mat.comp */
    VK_MMID_ROWS = 4,
    VK_FA_MAXD = 256,
};

typedef struct {
    uint64_t w, x, y;
    uint32_t K, N, T, C2, r2, r3;
    uint32_t wnb[3], xnb[3];
} pc_mm;

typedef struct {
    uint64_t w, x, ids, y, err;
    uint32_t K, N, E, U, x_shared;
    uint32_t wnb[2], xnb[2], inb1, site;
} pc_mmid;

typedef struct {
    uint64_t q, k, v, mask, dst;
    uint32_t qnb[3], knb[3], vnb[3], mnb[3];
    uint32_t D, Dv, S, H, Hk, T, mflags;
    float scale, softcap;
} pc_fa;

typedef struct {
    uint64_t y;
    uint32_t K4, N, T, ttiles, ntiles;
    uint32_t woff, wrow, wnb2, wnb3; /* in texels */
    uint32_t xoff, xrow, xnb2, xnb3;
    uint32_t C2, r2, r3;
} pc_mmt;

_Static_assert(sizeof(pc_fa) <= VK_PC_SIZE && sizeof(pc_mmid) <= VK_PC_SIZE,
               "push constants fit 128 bytes");

static int wtype_index(tsr_type t)
{
    switch (t) {
    case TSR_TYPE_F32:
        return 0;
    case TSR_TYPE_F16:
        return 1;
    case TSR_TYPE_BF16:
        return 2;
    default:
        return 3;
    }
}

static bool use_vec(const tsr_tensor *n) { return n->src[1]->ne[1] <= VK_MV_MAX_T; }

/* TSR_VULKAN_MM=tiled makes CPU-like devices use the tiled GEMM too (to
 * test it there); read once. */
static bool force_tiled(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("TSR_VULKAN_MM");
        v = e && strcmp(e, "tiled") == 0;
    }
    return v == 1;
}

/* Whether t lies in its buffer's texel view `view` with its start and
 * strides on whole texels. */
static bool on_texels(const tsr_tensor *t, int view)
{
    const size_t tex = tsr__vk_texel_bytes[view];
    const vk_buffer *b = tsr__vk_buffer_of(t);
    const size_t off = tsr__vk_offset(t);
    if (!b->sets[view] || off % tex || t->nb[1] % tex || t->nb[2] % tex || t->nb[3] % tex)
        return false;
    return (off + tsr_nbytes(t)) / tex <= b->view_texels[view] && b->view_texels[view] <= INT32_MAX;
}

/* The texel view W of this node is read through on a CPU-like device (the
 * texel kernels, mul_mat*_texel.comp), -1 for none: 0 (RGBA32F) for F32;
 * 2 (RGBA32UI, 8 weights a texel) for F16 and BF16 with K % 8 == 0 and rows
 * on 16 bytes; else 1 (RGBA16F) for F16 with K % 4 == 0. X must be on
 * RGBA32F texels. */
static int texel_view(const vk_device *d, const tsr_tensor *n)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1];
    if (!d->cpu_like || force_tiled() || n->op != TSR_OP_MUL_MAT || w->ne[0] % 4 ||
        !on_texels(x, 0))
        return -1;
    switch (w->type) {
    case TSR_TYPE_F32:
        return on_texels(w, 0) ? 0 : -1;
    case TSR_TYPE_F16:
        if (w->ne[0] % 8 == 0 && on_texels(w, 2))
            return 2;
        return on_texels(w, 1) ? 1 : -1;
    case TSR_TYPE_BF16:
        return w->ne[0] % 8 == 0 && on_texels(w, 2) ? 2 : -1;
    default:
        return -1;
    }
}

bool tsr__vk_mm_supported(vk_device *d, const tsr_tensor *n)
{
    const uint32_t *mc = d->limits.maxComputeWorkGroupCount;
    if (n->op == TSR_OP_MUL_MAT) {
        const tsr_tensor *w = n->src[0], *x = n->src[1];
        const uint64_t batches = (uint64_t)x->ne[2] * (uint64_t)x->ne[3];
        return batches <= mc[2] && (uint64_t)(w->ne[1] + VK_MM_TILE - 1) / VK_MM_TILE <= mc[0] &&
               (uint64_t)(x->ne[1] + VK_MM_TILE - 1) / VK_MM_TILE <= mc[1];
    }
    if (n->op == TSR_OP_MUL_MAT_ID) {
        const tsr_tensor *w = n->src[0], *ids = n->src[2];
        return (uint64_t)ids->ne[0] * (uint64_t)ids->ne[1] <= mc[1] &&
               (uint64_t)(w->ne[1] + VK_MMID_ROWS - 1) / VK_MMID_ROWS <= mc[0];
    }
    if (n->op == TSR_OP_FLASH_ATTN_EXT) {
        const tsr_tensor *q = n->src[0], *v = n->src[2], *m = n->src[3];
        return q->ne[0] <= VK_FA_MAXD && v->ne[0] <= VK_FA_MAXD &&
               (!m || (m->ne[2] < 32768 && m->ne[3] < 32768));
    }
    return false;
}

tsr__vk_shader_id tsr__vk_mm_shader(vk_device *d, const tsr_tensor *n)
{
    if (n->op == TSR_OP_FLASH_ATTN_EXT)
        return n->src[1]->type == TSR_TYPE_F16 ? VK_SH_fa_f16 : VK_SH_fa_f32;
    const int t = wtype_index(n->src[0]->type);
    if (n->op == TSR_OP_MUL_MAT_ID)
        return (tsr__vk_shader_id)(VK_SH_mmid_f32 + t);
    const int view = texel_view(d, n);
    if (view == 2)
        return n->src[0]->type == TSR_TYPE_F16 ? (use_vec(n) ? VK_SH_mvt_h : VK_SH_mmt_h)
                                               : (use_vec(n) ? VK_SH_mvt_b : VK_SH_mmt_b);
    if (view >= 0)
        return use_vec(n) ? VK_SH_mvt : VK_SH_mmt;
    if (use_vec(n))
        return (tsr__vk_shader_id)(VK_SH_mv_f32 + t);
    return (tsr__vk_shader_id)(VK_SH_mm_f32 + t);
}

static void plan_mul_mat(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1];
    pc_mm *p = (pc_mm *)l->pc;
    l->pc_size = sizeof(*p);
    p->w = tsr__vk_addr(w);
    p->x = tsr__vk_addr(x);
    p->y = tsr__vk_addr(n);
    p->K = (uint32_t)w->ne[0];
    p->N = (uint32_t)w->ne[1];
    p->T = (uint32_t)x->ne[1];
    p->C2 = (uint32_t)x->ne[2];
    p->r2 = (uint32_t)(x->ne[2] / w->ne[2]);
    p->r3 = (uint32_t)(x->ne[3] / w->ne[3]);
    for (int i = 0; i < 3; i++) {
        p->wnb[i] = (uint32_t)w->nb[i + 1];
        p->xnb[i] = (uint32_t)x->nb[i + 1];
    }
    const uint32_t batches = (uint32_t)(x->ne[2] * x->ne[3]);
    if (use_vec(n)) {
        tsr__vk_grid_1d(d, p->N, VK_MV_ROWS, l->groups);
        l->groups[2] = batches;
    } else {
        l->groups[0] = (p->N + VK_MM_TILE - 1) / VK_MM_TILE;
        l->groups[1] = (p->T + VK_MM_TILE - 1) / VK_MM_TILE;
        l->groups[2] = batches;
    }
}

/* R, C, WG of mul_mat_texel.comp; ROWS of mul_mat_vec_texel.comp */
enum { VK_MMT_R = 16, VK_MMT_C = 16, VK_MMT_WG = 32, VK_MVT_ROWS = 4 };

static void plan_mul_mat_texel(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1];
    const vk_buffer *wb = tsr__vk_buffer_of(w), *xb = tsr__vk_buffer_of(x);
    const int wv = texel_view(d, n);
    const size_t wt = tsr__vk_texel_bytes[wv];
    pc_mmt *p = (pc_mmt *)l->pc;
    l->pc_size = sizeof(*p);
    p->y = tsr__vk_addr(n);
    p->K4 = (uint32_t)(w->ne[0] / 4);
    p->N = (uint32_t)w->ne[1];
    p->T = (uint32_t)x->ne[1];
    const bool vec = l->id == VK_SH_mvt || l->id == VK_SH_mvt_h || l->id == VK_SH_mvt_b;
    p->ttiles = vec ? 1 : (p->T + VK_MMT_C - 1) / VK_MMT_C;
    p->ntiles = vec ? (p->N + VK_MVT_ROWS - 1) / VK_MVT_ROWS : (p->N + VK_MMT_R - 1) / VK_MMT_R;
    p->woff = (uint32_t)(tsr__vk_offset(w) / wt);
    p->wrow = (uint32_t)(w->nb[1] / wt);
    p->wnb2 = (uint32_t)(w->nb[2] / wt);
    p->wnb3 = (uint32_t)(w->nb[3] / wt);
    p->xoff = (uint32_t)(tsr__vk_offset(x) / 16);
    p->xrow = (uint32_t)(x->nb[1] / 16);
    p->xnb2 = (uint32_t)(x->nb[2] / 16);
    p->xnb3 = (uint32_t)(x->nb[3] / 16);
    p->C2 = (uint32_t)x->ne[2];
    p->r2 = (uint32_t)(x->ne[2] / w->ne[2]);
    p->r3 = (uint32_t)(x->ne[3] / w->ne[3]);
    tsr__vk_grid_1d(d, (uint64_t)p->ttiles * p->ntiles, VK_MMT_WG, l->groups);
    l->groups[2] = (uint32_t)(x->ne[2] * x->ne[3]);
    l->texel_sets[0] = wb->sets[wv];
    l->texel_sets[1] = xb->sets[0];
}

static void plan_mul_mat_id(const tsr_tensor *n, uint64_t err, uint32_t site, vk_launch *l)
{
    const tsr_tensor *w = n->src[0], *x = n->src[1], *ids = n->src[2];
    pc_mmid *p = (pc_mmid *)l->pc;
    l->pc_size = sizeof(*p);
    p->w = tsr__vk_addr(w);
    p->x = tsr__vk_addr(x);
    p->ids = tsr__vk_addr(ids);
    p->y = tsr__vk_addr(n);
    p->err = err;
    p->site = site;
    p->K = (uint32_t)w->ne[0];
    p->N = (uint32_t)w->ne[1];
    p->E = (uint32_t)w->ne[2];
    p->U = (uint32_t)ids->ne[0];
    p->x_shared = x->ne[1] == 1;
    p->wnb[0] = (uint32_t)w->nb[1];
    p->wnb[1] = (uint32_t)w->nb[2];
    p->xnb[0] = (uint32_t)x->nb[1];
    p->xnb[1] = (uint32_t)x->nb[2];
    p->inb1 = (uint32_t)ids->nb[1];
    l->groups[0] = (p->N + VK_MMID_ROWS - 1) / VK_MMID_ROWS;
    l->groups[1] = (uint32_t)(ids->ne[0] * ids->ne[1]);
    l->groups[2] = 1;
}

static void plan_flash_attn(vk_device *d, const tsr_tensor *n, vk_launch *l)
{
    const tsr_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    pc_fa *p = (pc_fa *)l->pc;
    l->pc_size = sizeof(*p);
    p->q = tsr__vk_addr(q);
    p->k = tsr__vk_addr(k);
    p->v = tsr__vk_addr(v);
    p->mask = m ? tsr__vk_addr(m) : p->q;
    p->dst = tsr__vk_addr(n);
    for (int i = 0; i < 3; i++) {
        p->qnb[i] = (uint32_t)q->nb[i + 1];
        p->knb[i] = (uint32_t)k->nb[i + 1];
        p->vnb[i] = (uint32_t)v->nb[i + 1];
        p->mnb[i] = m ? (uint32_t)m->nb[i + 1] : 0;
    }
    p->D = (uint32_t)q->ne[0];
    p->Dv = (uint32_t)v->ne[0];
    p->S = (uint32_t)k->ne[1];
    p->H = (uint32_t)q->ne[2];
    p->Hk = (uint32_t)k->ne[2];
    p->T = (uint32_t)q->ne[1];
    p->mflags = m ? (uint32_t)m->ne[2] | (uint32_t)m->ne[3] << 15 | (uint32_t)m->type << 30 : 0;
    p->scale = tsr_get_op_param_f32(n, 0);
    p->softcap = tsr_get_op_param_f32(n, 1);
    tsr__vk_grid_1d(d, (uint64_t)(q->ne[2] * q->ne[1] * q->ne[3]), 1, l->groups);
}

void tsr__vk_mm_plan(vk_device *d, const tsr_tensor *n, uint64_t err_addr, uint32_t site,
                     vk_launch *out, int *n_out)
{
    vk_launch *l = &out[0];
    memset(l, 0, sizeof(*l));
    l->id = tsr__vk_mm_shader(d, n);
    *n_out = 1;
    if (tsr__vk_shader_uses_texels(l->id))
        plan_mul_mat_texel(d, n, l);
    else if (n->op == TSR_OP_MUL_MAT)
        plan_mul_mat(d, n, l);
    else if (n->op == TSR_OP_MUL_MAT_ID)
        plan_mul_mat_id(n, err_addr, site, l);
    else
        plan_flash_attn(d, n, l);
}
