/* core/galloc.c — the graph allocator: places a graph's intermediates in one
 * compute buffer, reusing memory once a tensor's last reader has run.
 *
 * Planning is a simulation over offsets (best-fit free list with merging);
 * only then is the buffer touched: reused when big enough, replaced by a
 * larger one otherwise. A node's memory is taken before its sources are
 * released, so an output never overlaps an input of the same node. Graph
 * outputs, inputs and leaves are never reused. Tensors already placed in
 * another buffer (weights, caches) are left alone. A buffer type with several
 * lanes (a meta device: one per sub-device) is planned lane by lane with
 * each lane's own tensor sizes, so every device gets exactly its share.
 *
 * Not a general heap: it knows nothing outside the graph it is given.
 */
#include <stdlib.h>
#include <string.h>

#include "core/backend_impl.h"
#include "core/graph_impl.h"
#include "core/internal.h"

typedef struct {
    const tsr_tensor *t;
    int n_children; /* nodes of the graph that read it and have not run yet */
    int n_views;    /* views of it that are still alive */
    bool managed;   /* its memory is ours (compute buffer) */
    bool allocated; /* holds its offset range now */
    bool planned;   /* was given an offset in this plan */
    bool released;  /* its last reader ran; never revisited */
    size_t offset, size;
} ga_info;

typedef struct {
    size_t offset, size;
} ga_block;

struct tsr_gallocr {
    tsr_buft *buft;
    tsr_buf *buf;
    size_t align;
    int n_lanes;

    ga_info *info; /* hash table keyed by tensor */
    size_t info_size;
    size_t *lane_offs; /* [lane][info slot]: planned offsets */
    size_t lane_high[TSR_MAX_LANES];

    ga_block *free_blocks;
    size_t n_free, free_cap;
    size_t high_water;
};

tsr_gallocr *tsr_gallocr_new(tsr_buft *buft)
{
    if (!buft)
        return NULL;
    tsr_gallocr *ga = calloc(1, sizeof(*ga));
    if (!ga)
        return NULL;
    ga->buft = buft;
    ga->align = tsr_buft_alignment(buft);
    ga->n_lanes = tsr_buft_n_lanes(buft);
    return ga;
}

void tsr_gallocr_free(tsr_gallocr *ga)
{
    if (!ga)
        return;
    tsr_buf_free(ga->buf);
    free(ga->info);
    free(ga->lane_offs);
    free(ga->free_blocks);
    free(ga);
}

size_t tsr_gallocr_buffer_size(const tsr_gallocr *ga)
{
    return ga->buf ? tsr_buf_size(ga->buf) : 0;
}
tsr_buf *tsr_gallocr_buffer(const tsr_gallocr *ga) { return ga->buf; }

/* ---- tensor info table --------------------------------------------------------- */

static tsr_status info_prepare(tsr_gallocr *ga, const tsr_graph *g)
{
    size_t want = 16;
    while (want < 4 * (g->n_nodes + g->n_leafs) + 16)
        want *= 2;
    if (want > ga->info_size) {
        ga_info *n = calloc(want, sizeof(*n));
        size_t *lo = malloc(want * (size_t)ga->n_lanes * sizeof(size_t));
        if (!n || !lo) {
            free(n);
            free(lo);
            return tsr__error(TSR_ENOMEM, "graph allocator: %zu-entry table", want);
        }
        free(ga->info);
        free(ga->lane_offs);
        ga->info = n;
        ga->lane_offs = lo;
        ga->info_size = want;
    } else {
        memset(ga->info, 0, ga->info_size * sizeof(*ga->info));
    }
    return TSR_OK;
}

static ga_info *info_get(tsr_gallocr *ga, const tsr_tensor *t, bool create)
{
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 7) & (ga->info_size - 1);
    while (ga->info[i].t) {
        if (ga->info[i].t == t)
            return &ga->info[i];
        i = (i + 1) & (ga->info_size - 1);
    }
    if (!create)
        return NULL;
    ga->info[i].t = t;
    return &ga->info[i];
}

/* ---- offset allocator ------------------------------------------------------------ */

static tsr_status blocks_reserve(tsr_gallocr *ga, size_t n)
{
    if (n <= ga->free_cap)
        return TSR_OK;
    size_t cap = ga->free_cap ? ga->free_cap * 2 : 64;
    while (cap < n)
        cap *= 2;
    ga_block *b = realloc(ga->free_blocks, cap * sizeof(*b));
    if (!b)
        return tsr__error(TSR_ENOMEM, "graph allocator: %zu free blocks", cap);
    ga->free_blocks = b;
    ga->free_cap = cap;
    return TSR_OK;
}

/* Best fit among free blocks; else extend the high-water mark. */
static size_t offset_alloc(tsr_gallocr *ga, size_t size)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < ga->n_free; i++) {
        if (ga->free_blocks[i].size >= size &&
            (best == SIZE_MAX || ga->free_blocks[i].size < ga->free_blocks[best].size))
            best = i;
    }
    if (best != SIZE_MAX) {
        ga_block *b = &ga->free_blocks[best];
        size_t off = b->offset;
        b->offset += size;
        b->size -= size;
        if (b->size == 0) {
            memmove(b, b + 1, (ga->n_free - best - 1) * sizeof(*b));
            ga->n_free--;
        }
        return off;
    }
    /* Extend, absorbing a free block that ends at the high-water mark. */
    if (ga->n_free &&
        ga->free_blocks[ga->n_free - 1].offset + ga->free_blocks[ga->n_free - 1].size ==
            ga->high_water) {
        ga_block *last = &ga->free_blocks[ga->n_free - 1];
        size_t off = last->offset;
        ga->high_water = off + size;
        ga->n_free--;
        return off;
    }
    size_t off = ga->high_water;
    ga->high_water += size;
    return off;
}

/* Returns [offset, offset+size) to the sorted free list, merging neighbours. */
static tsr_status offset_free(tsr_gallocr *ga, size_t offset, size_t size)
{
    tsr_status st = blocks_reserve(ga, ga->n_free + 1);
    if (st != TSR_OK)
        return st;
    size_t i = 0;
    while (i < ga->n_free && ga->free_blocks[i].offset < offset)
        i++;
    memmove(&ga->free_blocks[i + 1], &ga->free_blocks[i], (ga->n_free - i) * sizeof(ga_block));
    ga->free_blocks[i] = (ga_block){offset, size};
    ga->n_free++;
    if (i + 1 < ga->n_free && offset + size == ga->free_blocks[i + 1].offset) {
        ga->free_blocks[i].size += ga->free_blocks[i + 1].size;
        memmove(&ga->free_blocks[i + 1], &ga->free_blocks[i + 2],
                (ga->n_free - i - 2) * sizeof(ga_block));
        ga->n_free--;
    }
    if (i > 0 && ga->free_blocks[i - 1].offset + ga->free_blocks[i - 1].size == offset) {
        ga->free_blocks[i - 1].size += ga->free_blocks[i].size;
        memmove(&ga->free_blocks[i], &ga->free_blocks[i + 1],
                (ga->n_free - i - 1) * sizeof(ga_block));
        ga->n_free--;
    }
    return TSR_OK;
}

/* ---- planning ------------------------------------------------------------------------ */

/* Our memory when it is unplaced or placed in our own compute buffer. */
static bool is_managed(const tsr_gallocr *ga, const tsr_tensor *t)
{
    return !t->buffer || (ga->buf && t->buffer == ga->buf);
}

static void plan_alloc(tsr_gallocr *ga, ga_info *in, int lane)
{
    if (in->allocated || !in->managed || in->t->view_src)
        return;
    in->size = tsr__align_up(tsr_buft_alloc_size_lane(ga->buft, in->t, lane), ga->align);
    if (in->size == 0)
        in->size = ga->align;
    in->offset = offset_alloc(ga, in->size);
    in->allocated = true;
    in->planned = true;
}

static bool is_pinned(const tsr_tensor *t)
{
    return (t->flags & (TSR_TENSOR_FLAG_OUTPUT | TSR_TENSOR_FLAG_INPUT)) || t->op == TSR_OP_NONE;
}

static tsr_status plan_release(tsr_gallocr *ga, ga_info *in);

/* A reader of `in` has run. */
static tsr_status plan_child_done(tsr_gallocr *ga, ga_info *in)
{
    in->n_children--;
    return plan_release(ga, in);
}

static tsr_status plan_release(tsr_gallocr *ga, ga_info *in)
{
    if (in->released || in->n_children > 0 || in->n_views > 0)
        return TSR_OK;
    in->released = true;
    if (in->t->view_src) {
        /* A dead view releases its hold on the memory it views. */
        ga_info *root = info_get(ga, in->t->view_src, false);
        if (!root)
            return TSR_OK;
        root->n_views--;
        return plan_release(ga, root);
    }
    if (!in->allocated || is_pinned(in->t) || !in->managed)
        return TSR_OK;
    in->allocated = false;
    return offset_free(ga, in->offset, in->size);
}

/* Plans lane `lane`: offsets land in ga->lane_offs, the size needed in
 * ga->lane_high[lane]. */
static tsr_status plan_lane(tsr_gallocr *ga, const tsr_graph *g, int lane)
{
    tsr_status st = info_prepare(ga, g);
    if (st != TSR_OK)
        return st;
    ga->n_free = 0;
    ga->high_water = 0;

    for (size_t i = 0; i < g->n_leafs; i++) {
        ga_info *in = info_get(ga, g->leafs[i], true);
        in->managed = is_managed(ga, g->leafs[i]);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        ga_info *in = info_get(ga, g->nodes[i], true);
        in->managed = is_managed(ga, g->nodes[i]);
    }
    /* Count readers and views. */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tsr_tensor *n = g->nodes[i];
        for (int s = 0; s < TSR_MAX_SRC; s++) {
            ga_info *in = n->src[s] ? info_get(ga, n->src[s], false) : NULL;
            if (in)
                in->n_children++;
        }
        if (n->view_src) {
            ga_info *in = info_get(ga, n->view_src, false);
            if (in)
                in->n_views++;
        }
    }
    /* Leaves without memory (inputs) are placed first and kept. */
    for (size_t i = 0; i < g->n_leafs; i++)
        plan_alloc(ga, info_get(ga, g->leafs[i], false), lane);

    for (size_t i = 0; i < g->n_nodes; i++) {
        const tsr_tensor *n = g->nodes[i];
        if (n->view_src) {
            ga_info *root = info_get(ga, n->view_src, false);
            if (root)
                plan_alloc(ga, root, lane);
        }
        plan_alloc(ga, info_get(ga, n, false), lane);
        for (int s = 0; s < TSR_MAX_SRC; s++) {
            ga_info *in = n->src[s] ? info_get(ga, n->src[s], false) : NULL;
            if (in && (st = plan_child_done(ga, in)) != TSR_OK)
                return st;
        }
        /* A node nobody reads and nobody views is dead once it has run. */
        ga_info *self = info_get(ga, n, false);
        if (self->n_children == 0 && (st = plan_release(ga, self)) != TSR_OK)
            return st;
    }
    for (size_t i = 0; i < ga->info_size; i++)
        ga->lane_offs[(size_t)lane * ga->info_size + i] = ga->info[i].offset;
    ga->lane_high[lane] = ga->high_water;
    return TSR_OK;
}

static tsr_status plan(tsr_gallocr *ga, const tsr_graph *g)
{
    tsr_status st = TSR_OK;
    /* The buffer type may refuse a tensor (and say why) before sizing it. */
    for (size_t i = 0; i < g->n_leafs && st == TSR_OK; i++)
        if (is_managed(ga, g->leafs[i]))
            st = tsr__buft_check_tensor(ga->buft, g->leafs[i]);
    for (size_t i = 0; i < g->n_nodes && st == TSR_OK; i++)
        if (is_managed(ga, g->nodes[i]) || g->nodes[i]->view_src)
            st = tsr__buft_check_tensor(ga->buft, g->nodes[i]);
    for (int l = 0; l < ga->n_lanes && st == TSR_OK; l++)
        st = plan_lane(ga, g, l);
    return st;
}

static tsr_status ensure_buffer(tsr_gallocr *ga)
{
    bool fits = ga->buf != NULL;
    for (int l = 0; l < ga->n_lanes && fits; l++)
        fits = tsr_buf_lane_size(ga->buf, l) >= ga->lane_high[l];
    if (fits)
        return TSR_OK;
    tsr_buf *nb = NULL;
    tsr_status st = tsr_buft_alloc_lanes(ga->buft, ga->lane_high, &nb);
    if (st != TSR_OK)
        return st;
    tsr_buf_set_usage(nb, TSR_BUF_USAGE_COMPUTE);
    for (int l = 0; l < ga->n_lanes; l++)
        TSR_LOG_D("graph allocator: %s lane %d: compute buffer %zu -> %zu bytes",
                  tsr_buft_name(ga->buft), l, ga->buf ? tsr_buf_lane_size(ga->buf, l) : (size_t)0,
                  ga->lane_high[l]);
    tsr_buf_free(ga->buf);
    ga->buf = nb;
    return TSR_OK;
}

tsr_status tsr_gallocr_reserve(tsr_gallocr *ga, tsr_graph *g)
{
    if (!ga || !g)
        return tsr__error(TSR_EINVAL, "gallocr_reserve: NULL argument");
    tsr_status st = plan(ga, g);
    if (st != TSR_OK)
        return st;
    return ensure_buffer(ga);
}

static tsr_status place(tsr_gallocr *ga, tsr_tensor *t)
{
    ga_info *in = info_get(ga, t, false);
    if (!in || !in->planned)
        return TSR_OK;
    t->buffer = NULL;
    t->data = NULL;
    size_t offsets[TSR_MAX_LANES];
    const size_t slot = (size_t)(in - ga->info);
    for (int l = 0; l < ga->n_lanes; l++)
        offsets[l] = ga->lane_offs[(size_t)l * ga->info_size + slot];
    return tsr_buf_place_tensor_lanes(ga->buf, t, offsets);
}

tsr_status tsr_gallocr_alloc_graph(tsr_gallocr *ga, tsr_graph *g)
{
    if (!ga || !g)
        return tsr__error(TSR_EINVAL, "gallocr_alloc_graph: NULL argument");
    tsr_status st = plan(ga, g);
    if (st == TSR_OK)
        st = ensure_buffer(ga);
    if (st != TSR_OK)
        return st;
    /* Every tensor of the buffer is placed anew: per-tensor state of the
     * previous graph can go. */
    if (ga->buf->iface->reset)
        ga->buf->iface->reset(ga->buf);
    /* Plan offsets survive release (size stays set), so every managed
     * non-view tensor has its place now. */
    for (size_t i = 0; i < g->n_leafs && st == TSR_OK; i++)
        st = place(ga, g->leafs[i]);
    for (size_t i = 0; i < g->n_nodes && st == TSR_OK; i++)
        st = place(ga, g->nodes[i]);
    for (size_t i = 0; i < g->n_nodes && st == TSR_OK; i++)
        if (g->nodes[i]->view_src)
            st = tsr_view_init(g->nodes[i]);
    return st;
}
