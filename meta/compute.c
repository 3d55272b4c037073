/* meta/compute.c — running a graph on the meta device: the split every node
 * executes with, where the graph is cut for an all-reduce, which devices
 * hold known zeros, the simple (per-device) graphs, and their launch.
 *
 * Not the split rules (meta/infer.c, meta/view.c). Key design choices:
 * - A partial node is reduced only where something needs its value: a
 *   consumer that is not linear in it, a graph output. Linear consumers keep
 *   it partial, so chains of mul-by-mirrored, add_id with a partial bias,
 *   the MoE views + adds, and two partial branches meeting in one add cost a
 *   single all-reduce. Deciding a cut can change what earlier consumers saw,
 *   so the walk restarts from the cut (cuts only get added: it terminates).
 * - A device whose slice of a row-parallel product is empty holds known
 *   zeros: it computes nothing for that node or the linear ops after it,
 *   and the zeros are written (never left uninitialized, never 0·x) only
 *   where they are read: before a consumer that needs them, or the
 *   all-reduce.
 * - Simple nodes are built with the op constructors on the simple sources,
 *   so every shape is checked again per device; graphs and tensors live in
 *   scratch that is reused across computes (no allocation per step once
 *   warm), and everything is enqueued: the host waits only in synchronize.
 */
#include <stdlib.h>
#include <string.h>

#include "meta/meta_impl.h"

/* ---- scratch ------------------------------------------------------------------------- */

void tsr__meta_scratch_free(meta_scratch *sc)
{
    free(sc->st);
    free(sc->cut);
    free(sc->zero);
    free(sc->filled);
    free(sc->simple);
    free(sc->map);
    free(sc->map_idx);
    for (int j = 0; j < TSR_META_MAX_DEVICES; j++)
        tsr_ctx_free(sc->ctx[j]);
    for (size_t i = 0; i < sc->n_graphs; i++)
        tsr_graph_free(sc->graphs[i]);
    free(sc->graphs);
    free(sc->graph_cap);
    memset(sc, 0, sizeof(*sc));
}

/* Room for `cap` indexed tensors (nodes then leaves) on n devices. */
static tsr_status scratch_reserve(meta_scratch *sc, int n, size_t cap)
{
    if (cap <= sc->cap_nodes)
        return TSR_OK;
    cap = cap * 3 / 2 + 16;
    size_t map_size = 16;
    while (map_size < 2 * cap)
        map_size *= 2;
    tsr_split *st = realloc(sc->st, cap * sizeof(*st));
    if (st)
        sc->st = st;
    uint8_t *cut = realloc(sc->cut, cap);
    if (cut)
        sc->cut = cut;
    uint8_t *zero = realloc(sc->zero, cap * (size_t)n);
    if (zero)
        sc->zero = zero;
    uint8_t *filled = realloc(sc->filled, cap * (size_t)n);
    if (filled)
        sc->filled = filled;
    tsr_tensor **simple = realloc(sc->simple, cap * (size_t)n * sizeof(*simple));
    if (simple)
        sc->simple = simple;
    const tsr_tensor **map = realloc(sc->map, map_size * sizeof(*map));
    if (map)
        sc->map = map;
    int32_t *map_idx = realloc(sc->map_idx, map_size * sizeof(*map_idx));
    if (map_idx)
        sc->map_idx = map_idx;
    if (!st || !cut || !zero || !filled || !simple || !map || !map_idx)
        return tsr__error(TSR_ENOMEM, "meta: scratch for %zu tensors", cap);
    sc->cap_nodes = cap;
    sc->map_size = map_size;
    return TSR_OK;
}

static size_t map_slot(const meta_scratch *sc, const tsr_tensor *t)
{
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 9) & (sc->map_size - 1);
}

static void map_put(meta_scratch *sc, const tsr_tensor *t, int32_t idx)
{
    size_t i = map_slot(sc, t);
    while (sc->map[i] && sc->map[i] != t)
        i = (i + 1) & (sc->map_size - 1);
    sc->map[i] = t;
    sc->map_idx[i] = idx;
}

/* Index of t among nodes (0..N-1) and leaves (N..), or -1. */
static int32_t map_get(const meta_scratch *sc, const tsr_tensor *t)
{
    size_t i = map_slot(sc, t);
    while (sc->map[i]) {
        if (sc->map[i] == t)
            return sc->map_idx[i];
        i = (i + 1) & (sc->map_size - 1);
    }
    return -1;
}

/* ---- execution splits and cuts ------------------------------------------------------ */

typedef struct {
    meta_backend *mb;
    meta_scratch *sc;
    tsr_graph *g;
    int N; /* nodes */
} walk;

static bool is_layout(tsr_op op) { return tsr_op_is_view(op); }

/* The split a source is seen with: a cut partial node has been reduced. */
static tsr_status seen_split(walk *w, const tsr_tensor *s, tsr_split *tmp, const tsr_split **out)
{
    const int32_t m = map_get(w->sc, s);
    if (m >= 0 && m < w->N) {
        if (w->sc->cut[m] && w->sc->st[m].axis == TSR_SPLIT_PARTIAL) {
            *tmp = tsr_split_mirrored(w->mb->md->n);
            *out = tmp;
        } else {
            *out = &w->sc->st[m];
        }
        return TSR_OK;
    }
    *out = tmp;
    return tsr__meta_split(w->mb->md, s, tmp);
}

/* The node after which m's memory holds its whole value: m itself, or for a
 * layout view the node it views (following the chain of views). */
static int32_t cut_point(walk *w, int32_t m)
{
    const tsr_tensor *t = tsr_graph_node(w->g, (size_t)m);
    while (is_layout(t->op)) {
        const int32_t p = map_get(w->sc, t->src[0]);
        if (p < 0 || p >= w->N)
            return -1;
        m = p;
        t = tsr_graph_node(w->g, (size_t)m);
    }
    return m;
}

static tsr_status infer_node(walk *w, int32_t i)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    tsr_split tmp[TSR_MAX_SRC];
    const tsr_split *src[TSR_MAX_SRC] = {0};
    for (int k = 0; k < TSR_MAX_SRC; k++) {
        const tsr_tensor *s = node->src[k];
        if (is_layout(node->op)) /* layout views map from their root */
            s = k == 0 ? node->view_src : NULL;
        if (!s)
            continue;
        tsr_status st = seen_split(w, s, &tmp[k], &src[k]);
        if (st != TSR_OK)
            return st;
    }
    return tsr__meta_rule(w->mb->md, node, src, &w->sc->st[i]);
}

/* Marks the cut that reduces partial node m; returns the index the walk
 * must restart after, or INT32_MAX when nothing changed. */
static tsr_status cut_partial(walk *w, int32_t m, int32_t *restart)
{
    const int32_t c = cut_point(w, m);
    if (c < 0 || w->sc->st[c].axis != TSR_SPLIT_PARTIAL)
        return tsr__error(TSR_EUNSUPPORTED,
                          "meta: '%s' needs its partial sum reduced, but its memory "
                          "is not a partial node of this graph",
                          tsr_graph_node(w->g, (size_t)m)->name);
    if (!w->sc->cut[c]) {
        w->sc->cut[c] = 1;
        if (c < *restart)
            *restart = c;
    }
    return TSR_OK;
}

static tsr_status infer_and_cut(walk *w)
{
    memset(w->sc->cut, 0, (size_t)w->N);
    for (int32_t i = 0; i < w->N; i++) {
        tsr_status st = infer_node(w, i);
        if (st != TSR_OK)
            return st;
        const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
        int32_t restart = INT32_MAX;
        /* A consumer that does not stay partial needs its partial sources
         * reduced first. */
        if (w->sc->st[i].axis != TSR_SPLIT_PARTIAL) {
            for (int k = 0; k < TSR_MAX_SRC; k++) {
                const tsr_tensor *s =
                    is_layout(node->op) ? (k == 0 ? node->src[0] : NULL) : node->src[k];
                const int32_t m = s ? map_get(w->sc, s) : -1;
                if (m < 0 || m >= w->N || w->sc->st[m].axis != TSR_SPLIT_PARTIAL)
                    continue;
                if (cut_point(w, m) >= 0 && w->sc->cut[cut_point(w, m)])
                    continue;
                if ((st = cut_partial(w, m, &restart)) != TSR_OK)
                    return st;
            }
        } else if (i == w->N - 1 || (node->flags & TSR_TENSOR_FLAG_OUTPUT)) {
            if ((st = cut_partial(w, i, &restart)) != TSR_OK)
                return st;
        }
        if (restart < i) /* earlier consumers saw it partial: redo them */
            i = restart;
    }
    return TSR_OK;
}

/* ---- zeros -------------------------------------------------------------------------- */

static uint8_t *zero_at(meta_scratch *sc, int j, int32_t i)
{
    return &sc->zero[(size_t)j * sc->cap_nodes + (size_t)i];
}
static uint8_t *filled_at(meta_scratch *sc, int j, int32_t i)
{
    return &sc->filled[(size_t)j * sc->cap_nodes + (size_t)i];
}
static tsr_tensor **simple_at(meta_scratch *sc, int j, int32_t i)
{
    return &sc->simple[(size_t)j * sc->cap_nodes + (size_t)i];
}

/* Node i's value on device j is known to be zero: a row-parallel product
 * whose slice of K is empty there, or a linear op on such zeros (and on
 * stored partials that device does not contribute to). */
static tsr_status mark_zero(walk *w, int j, int32_t i)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    uint8_t *z = zero_at(w->sc, j, i);
    *z = 0;
    if (w->sc->st[i].axis != TSR_SPLIT_PARTIAL)
        return TSR_OK;
    if ((node->op == TSR_OP_MUL_MAT || node->op == TSR_OP_MUL_MAT_ID)) {
        tsr_split tmp;
        const tsr_split *ws;
        tsr_status st = seen_split(w, node->src[0], &tmp, &ws);
        if (st != TSR_OK)
            return st;
        if (ws->axis == TSR_SPLIT_A0) {
            *z = tsr_split_extent(ws, j) == 0;
            return TSR_OK;
        }
    }
    bool any_partial = false, all_zero = true;
    for (int k = 0; k < TSR_MAX_SRC; k++) {
        const tsr_tensor *s = is_layout(node->op) ? (k == 0 ? node->src[0] : NULL) : node->src[k];
        if (!s)
            continue;
        const int32_t m = map_get(w->sc, s);
        if (m >= 0 && m < w->N) {
            const int32_t c = cut_point(w, m);
            if (w->sc->st[m].axis != TSR_SPLIT_PARTIAL || c < 0 || w->sc->cut[c])
                continue;
            any_partial = true;
            all_zero &= *zero_at(w->sc, j, m) != 0;
        } else {
            tsr_split ls;
            tsr_status st = tsr__meta_split(w->mb->md, s, &ls);
            if (st != TSR_OK)
                return st;
            if (ls.axis == TSR_SPLIT_PARTIAL) {
                any_partial = true;
                all_zero &= ls.ne[0][j] == 0;
            }
        }
    }
    *z = any_partial && all_zero;
    return TSR_OK;
}

/* ---- simple tensors -------------------------------------------------------------------- */

static tsr_status placed_data(walk *w, const tsr_tensor *node, int j, tsr_tensor *t)
{
    if (!node->buffer || !tsr__meta_is_buf(node->buffer) || !node->extra)
        return tsr__error(TSR_EINVAL,
                          "%s: node '%s' (%s) is not allocated in this meta device's "
                          "memory",
                          w->mb->name, node->name, tsr_op_name(node->op));
    tsr_tensor placed;
    tsr_status st = tsr__meta_simple_placed(node, j, &placed);
    if (st != TSR_OK)
        return st;
    t->buffer = placed.buffer;
    t->data = placed.data;
    return TSR_OK;
}

/* The simple tensor of a leaf on device j (made once per compute). */
static tsr_status leaf_simple(walk *w, int j, const tsr_tensor *t, tsr_tensor **out)
{
    const int32_t idx = map_get(w->sc, t);
    if (idx < 0)
        return tsr__error(TSR_EINVAL, "%s: '%s' is used but not part of the graph", w->mb->name,
                          t->name);
    tsr_tensor **slot = simple_at(w->sc, j, idx);
    if (*slot) {
        *out = *slot;
        return TSR_OK;
    }
    if (!t->buffer || !tsr__meta_is_buf(t->buffer)) {
        *slot = (tsr_tensor *)t; /* memory every device reads: shared as is */
        *out = *slot;
        return TSR_OK;
    }
    tsr_tensor placed;
    tsr_status st = tsr__meta_simple_placed(t, j, &placed);
    if (st != TSR_OK)
        return st;
    tsr_tensor *s = tsr_new_tensor_4d(w->sc->ctx[j], t->type, placed.ne[0], placed.ne[1],
                                      placed.ne[2], placed.ne[3]);
    if (!s)
        return tsr__error(TSR_ENOMEM, "%s: %s", w->mb->name, tsr_ctx_error(w->sc->ctx[j]));
    s->buffer = placed.buffer;
    s->data = placed.data;
    s->flags = placed.flags;
    memcpy(s->name, placed.name, sizeof(s->name));
    *slot = s;
    *out = s;
    return TSR_OK;
}

static tsr_status src_simple(walk *w, int j, const tsr_tensor *s, tsr_tensor **out)
{
    const int32_t m = map_get(w->sc, s);
    if (m >= 0 && m < w->N) {
        *out = *simple_at(w->sc, j, m);
        return TSR_OK;
    }
    return leaf_simple(w, j, s, out);
}

/* With q split by heads and k, v mirrored, device j reads the kv heads of
 * its own q heads: views of k and v over that head range. */
static tsr_status fa_kv_views(walk *w, int j, const tsr_tensor *node, tsr_tensor **s)
{
    const tsr_split *qs = NULL;
    tsr_split tmp;
    tsr_status st = seen_split(w, node->src[0], &tmp, &qs);
    if (st != TSR_OK || qs->axis != TSR_SPLIT_A2 || s[1]->ne[2] != node->src[1]->ne[2])
        return st; /* k, v already split by heads */
    const int64_t group = node->src[0]->ne[2] / node->src[1]->ne[2];
    int64_t start = 0;
    for (int d = 0; d < j; d++)
        start += tsr_split_extent(qs, d);
    const int64_t heads = tsr_split_extent(qs, j) / group, first = start / group;
    for (int k = 1; k <= 2; k++) {
        tsr_tensor *v =
            tsr_view_4d(w->sc->ctx[j], s[k], s[k]->ne[0], s[k]->ne[1], heads, s[k]->ne[3],
                        s[k]->nb[1], s[k]->nb[2], s[k]->nb[3], (size_t)first * s[k]->nb[2]);
        if (!v)
            return tsr__error(TSR_EINTERNAL, "%s: %s", w->mb->name, tsr_ctx_error(w->sc->ctx[j]));
        s[k] = v;
    }
    return TSR_OK;
}

static tsr_status build_view(walk *w, int j, int32_t i)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    const tsr_tensor *root = node->view_src;
    tsr_tensor *rsim, *s0;
    tsr_status st = src_simple(w, j, root, &rsim);
    if (st == TSR_OK)
        st = src_simple(w, j, node->src[0], &s0);
    tsr_split tmp, out;
    const tsr_split *rs;
    if (st == TSR_OK)
        st = seen_split(w, root, &tmp, &rs);
    int64_t ne[4];
    size_t nb[4], offs;
    if (st == TSR_OK)
        st = tsr__meta_view(node, root, rs, j, &out, ne, nb, &offs);
    if (st != TSR_OK)
        return st;
    tsr_tensor *v = tsr_new_tensor_4d(w->sc->ctx[j], node->type, ne[0], ne[1], ne[2], ne[3]);
    if (!v)
        return tsr__error(TSR_ENOMEM, "%s: %s", w->mb->name, tsr_ctx_error(w->sc->ctx[j]));
    memcpy(v->nb, nb, sizeof(nb));
    v->op = node->op;
    memcpy(v->op_params, node->op_params, sizeof(v->op_params));
    v->src[0] = s0;
    v->view_src = rsim;
    v->view_offs = offs;
    v->buffer = rsim->buffer;
    v->data = rsim->data ? (char *)rsim->data + offs : NULL;
    memcpy(v->name, node->name, sizeof(v->name));
    *simple_at(w->sc, j, i) = v;
    return TSR_OK;
}

static bool computed_on(walk *w, int j, int32_t i)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    const tsr_tensor *s = *simple_at(w->sc, j, i);
    return !is_layout(node->op) && node->op != TSR_OP_NONE && !*zero_at(w->sc, j, i) &&
           tsr_nelements(s) > 0 && s->op == node->op;
}

static tsr_status build_node(walk *w, int j, int32_t i)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    if (is_layout(node->op))
        return build_view(w, j, i);
    tsr_ctx *c = w->sc->ctx[j];
    int64_t ne[4];
    tsr__meta_simple_shape(node, &w->sc->st[i], j, ne);
    tsr_tensor *s[TSR_MAX_SRC] = {0};
    tsr_status st = TSR_OK;
    for (int k = 0; k < TSR_MAX_SRC && st == TSR_OK; k++)
        if (node->src[k])
            st = src_simple(w, j, node->src[k], &s[k]);
    if (st != TSR_OK)
        return st;
    tsr_tensor *t = NULL;
    const bool skip = *zero_at(w->sc, j, i) || ne[0] * ne[1] * ne[2] * ne[3] == 0;
    if (!skip) {
        if (node->op == TSR_OP_FLASH_ATTN_EXT && (st = fa_kv_views(w, j, node, s)) != TSR_OK)
            return st;
        t = tsr__op_rebuild(c, node->op, node->op_params, s, ne);
        if (!t)
            return tsr__error(TSR_EINTERNAL, "%s: rebuilding %s '%s' for device %d: %s",
                              w->mb->name, tsr_op_name(node->op), node->name, j,
                              tsr_ctx_status(c) ? tsr_ctx_error(c) : "no constructor");
        if (memcmp(t->ne, ne, sizeof(ne)) != 0) {
            char a[64], b[64];
            tsr_tensor probe = {.type = node->type};
            memcpy(probe.ne, ne, sizeof(ne));
            return tsr__error(TSR_EINTERNAL,
                              "%s: %s '%s' on device %d has shape %s, its split says %s",
                              w->mb->name, tsr_op_name(node->op), node->name, j,
                              tsr_shape_str(t, a, sizeof(a)), tsr_shape_str(&probe, b, sizeof(b)));
        }
        memcpy(t->op_params, node->op_params, sizeof(t->op_params));
    } else {
        /* Known zeros or an empty slice: a placeholder with the right shape
         * and memory; it is not computed. */
        t = tsr_new_tensor_4d(c, node->type, ne[0], ne[1], ne[2], ne[3]);
        if (!t)
            return tsr__error(TSR_ENOMEM, "%s: %s", w->mb->name, tsr_ctx_error(c));
        if (node->view_src) { /* in-place ops write their destination */
            tsr_tensor *d;
            if ((st = src_simple(w, j, node->view_src, &d)) != TSR_OK)
                return st;
            t->view_src = d;
            t->buffer = d->buffer;
            t->data = d->data;
        }
    }
    if (!t->view_src && (st = placed_data(w, node, j, t)) != TSR_OK)
        return st;
    memcpy(t->name, node->name, sizeof(t->name));
    *simple_at(w->sc, j, i) = t;
    return TSR_OK;
}

/* ---- launch ------------------------------------------------------------------------------ */

static tsr_status seg_graph(walk *w, size_t seg, int j, tsr_graph **out)
{
    meta_scratch *sc = w->sc;
    const int n = w->mb->md->n;
    const size_t idx = seg * (size_t)n + (size_t)j;
    const size_t want = (size_t)w->N * 2 + 8;
    if (idx >= sc->n_graphs) {
        size_t cnt = TSR_MAX(idx + 1, sc->n_graphs * 2);
        tsr_graph **g = realloc(sc->graphs, cnt * sizeof(*g));
        size_t *cap = g ? realloc(sc->graph_cap, cnt * sizeof(*cap)) : NULL;
        if (g)
            sc->graphs = g;
        if (cap)
            sc->graph_cap = cap;
        if (!g || !cap)
            return tsr__error(TSR_ENOMEM, "meta: %zu segment graphs", cnt);
        for (size_t k = sc->n_graphs; k < cnt; k++) {
            sc->graphs[k] = NULL;
            sc->graph_cap[k] = 0;
        }
        sc->n_graphs = cnt;
    }
    if (sc->graph_cap[idx] < want) {
        tsr_graph_free(sc->graphs[idx]);
        sc->graphs[idx] = tsr_graph_new(want);
        sc->graph_cap[idx] = sc->graphs[idx] ? want : 0;
        if (!sc->graphs[idx])
            return tsr__error(TSR_ENOMEM, "meta: graph of %zu nodes", want);
    } else {
        tsr_graph_reset(sc->graphs[idx]);
    }
    *out = sc->graphs[idx];
    return TSR_OK;
}

/* Node c's memory (the tensor an all-reduce or a fill acts on) on device j. */
static tsr_tensor *memory_of(walk *w, int j, int32_t c)
{
    tsr_tensor *s = *simple_at(w->sc, j, c);
    return s->view_src ? s->view_src : s;
}

/* Writes zeros over node c's memory on device j, once per compute. */
static tsr_status fill_zero(walk *w, int j, int32_t c, tsr_graph *g)
{
    if (*filled_at(w->sc, j, c))
        return TSR_OK;
    *filled_at(w->sc, j, c) = 1;
    tsr_tensor *mem = memory_of(w, j, c);
    tsr_tensor *f = tsr_fill(w->sc->ctx[j], mem, 0.0f);
    if (!f)
        return tsr__error(TSR_EINTERNAL, "%s: %s", w->mb->name, tsr_ctx_error(w->sc->ctx[j]));
    f->buffer = mem->buffer;
    f->data = mem->data;
    memcpy(f->nb, mem->nb, sizeof(f->nb));
    return tsr_graph_add_node(g, f);
}

/* Before node i runs on device j as a partial op, its known-zero partial
 * sources must hold zeros. */
static tsr_status fill_sources(walk *w, int j, int32_t i, tsr_graph *g)
{
    const tsr_tensor *node = tsr_graph_node(w->g, (size_t)i);
    if (w->sc->st[i].axis != TSR_SPLIT_PARTIAL)
        return TSR_OK;
    for (int k = 0; k < TSR_MAX_SRC; k++) {
        const int32_t m = node->src[k] ? map_get(w->sc, node->src[k]) : -1;
        if (m < 0 || m >= w->N || !*zero_at(w->sc, j, m))
            continue;
        const int32_t c = cut_point(w, m);
        tsr_status st = c >= 0 ? fill_zero(w, j, c, g) : TSR_OK;
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

static tsr_status launch(walk *w)
{
    meta_backend *mb = w->mb;
    const int n = mb->md->n;
    tsr_graph *g[TSR_META_MAX_DEVICES];
    size_t seg = 0;
    tsr_status st = TSR_OK;
    for (int j = 0; j < n && st == TSR_OK; j++)
        st = seg_graph(w, seg, j, &g[j]);
    mb->stats = (tsr_meta_stats){.path = mb->stats.path};
    for (int32_t i = 0; i < w->N && st == TSR_OK; i++) {
        for (int j = 0; j < n && st == TSR_OK; j++) {
            if (!computed_on(w, j, i))
                continue;
            st = fill_sources(w, j, i, g[j]);
            if (st == TSR_OK)
                st = tsr_graph_add_node(g[j], *simple_at(w->sc, j, i));
        }
        if (st != TSR_OK || !w->sc->cut[i])
            continue;
        tsr_tensor *mem[TSR_META_MAX_DEVICES];
        for (int j = 0; j < n && st == TSR_OK; j++) {
            if (*zero_at(w->sc, j, i))
                st = fill_zero(w, j, i, g[j]);
            mem[j] = memory_of(w, j, i);
        }
        bool any = false;
        for (int j = 0; j < n && st == TSR_OK; j++) {
            if (tsr_graph_n_nodes(g[j]) == 0)
                continue;
            any = true;
            st = tsr_backend_graph_compute_async(mb->subs[j], g[j]);
        }
        if (st == TSR_OK)
            st = tsr_allreduce_run(mb->ar, mem);
        mb->stats.n_subgraphs += any;
        mb->stats.n_allreduce++;
        mb->stats.path = tsr_allreduce_last_path(mb->ar);
        seg++;
        for (int j = 0; j < n && st == TSR_OK; j++)
            st = seg_graph(w, seg, j, &g[j]);
    }
    bool any = false;
    for (int j = 0; j < n && st == TSR_OK; j++) {
        if (tsr_graph_n_nodes(g[j]) == 0)
            continue;
        any = true;
        st = tsr_backend_graph_compute_async(mb->subs[j], g[j]);
    }
    mb->stats.n_subgraphs += any;
    for (int32_t i = 0; i < w->N; i++)
        if (w->sc->st[i].axis == TSR_SPLIT_PARTIAL && !w->sc->cut[i] &&
            !is_layout(tsr_graph_node(w->g, (size_t)i)->op))
            mb->stats.n_delayed++;
    return st;
}

tsr_status tsr__meta_graph_compute(tsr_backend *backend, tsr_graph *g)
{
    meta_backend *mb = backend->context;
    meta_scratch *sc = &mb->sc;
    const int n = mb->md->n;
    tsr_status st;
    if (mb->in_flight && (st = tsr__meta_sync_subs(mb)) != TSR_OK)
        return st; /* the scratch of the previous compute is free again */
    const size_t N = tsr_graph_n_nodes(g), L = tsr_graph_n_leafs(g);
    if ((st = scratch_reserve(sc, n, N + L)) != TSR_OK)
        return st;
    memset(sc->map, 0, sc->map_size * sizeof(*sc->map));
    for (size_t i = 0; i < N; i++)
        map_put(sc, tsr_graph_node(g, i), (int32_t)i);
    for (size_t i = 0; i < L; i++)
        map_put(sc, tsr_graph_leaf(g, i), (int32_t)(N + i));
    memset(sc->simple, 0, sc->cap_nodes * (size_t)n * sizeof(*sc->simple));
    memset(sc->filled, 0, sc->cap_nodes * (size_t)n);
    const size_t ctx_need = 3 * (N + L) + 16;
    for (int j = 0; j < n; j++) {
        if (!sc->ctx[j] || sc->ctx_cap < ctx_need) {
            tsr_ctx_free(sc->ctx[j]);
            sc->ctx[j] = tsr_ctx_new(ctx_need);
            if (!sc->ctx[j])
                return tsr__error(TSR_ENOMEM, "meta: context of %zu tensors", ctx_need);
        } else {
            tsr_ctx_reset(sc->ctx[j]);
        }
    }
    sc->ctx_cap = TSR_MAX(sc->ctx_cap, ctx_need);

    walk w = {.mb = mb, .sc = sc, .g = g, .N = (int)N};
    if ((st = infer_and_cut(&w)) != TSR_OK)
        return st;
    for (int j = 0; j < n; j++)
        for (int32_t i = 0; i < (int32_t)N && st == TSR_OK; i++)
            st = mark_zero(&w, j, i);
    for (int j = 0; j < n; j++)
        for (int32_t i = 0; i < (int32_t)N && st == TSR_OK; i++)
            st = build_node(&w, j, i);
    if (st != TSR_OK)
        return st;
    mb->in_flight = true;
    return launch(&w);
}
