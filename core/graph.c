/* core/graph.c — building computation graphs: a topological order of the
 * nodes reaching an output, and the leaves (weights, inputs) they read.
 *
 * Not an optimizer: the order is the depth-first post-order of the sources
 * (sources before users, src[0] first), which is what every backend runs.
 * The traversal is iterative with an explicit stack, so graph depth is
 * bounded by memory, not by the C stack; a pointer hash set marks visited
 * tensors.
 */
#include <stdlib.h>
#include <string.h>

#include "core/graph_impl.h"
#include "core/internal.h"

static size_t hash_size_for(size_t cap)
{
    size_t n = 16;
    while (n < 4 * cap + 16)
        n *= 2;
    return n;
}

tsr_graph *tsr_graph_new(size_t max_nodes)
{
    tsr_graph *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->cap = max_nodes ? max_nodes : 1;
    g->hash_size = hash_size_for(g->cap);
    g->nodes = calloc(g->cap, sizeof(*g->nodes));
    g->leafs = calloc(g->cap, sizeof(*g->leafs));
    g->hash = calloc(g->hash_size, sizeof(*g->hash));
    g->stack = calloc(2 * g->cap + 2, sizeof(*g->stack));
    if (!g->nodes || !g->leafs || !g->hash || !g->stack) {
        tsr_graph_free(g);
        return NULL;
    }
    return g;
}

void tsr_graph_free(tsr_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->leafs);
    free(g->hash);
    free(g->stack);
    free(g);
}

void tsr_graph_reset(tsr_graph *g)
{
    g->n_nodes = 0;
    g->n_leafs = 0;
    memset(g->hash, 0, g->hash_size * sizeof(*g->hash));
}

size_t tsr_graph_n_nodes(const tsr_graph *g) { return g->n_nodes; }
size_t tsr_graph_n_leafs(const tsr_graph *g) { return g->n_leafs; }

tsr_tensor *tsr_graph_node(const tsr_graph *g, size_t i)
{
    return i < g->n_nodes ? g->nodes[i] : NULL;
}
tsr_tensor *tsr_graph_leaf(const tsr_graph *g, size_t i)
{
    return i < g->n_leafs ? g->leafs[i] : NULL;
}
tsr_tensor *tsr_graph_last(const tsr_graph *g)
{
    return g->n_nodes ? g->nodes[g->n_nodes - 1] : NULL;
}

static size_t hash_slot(const tsr_graph *g, const tsr_tensor *t)
{
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 7) & (g->hash_size - 1);
}

/* Inserts t; false when it was already there. The table is sized 4x the
 * capacity, so it never fills. */
static bool hash_insert(tsr_graph *g, const tsr_tensor *t)
{
    size_t i = hash_slot(g, t);
    while (g->hash[i]) {
        if (g->hash[i] == t)
            return false;
        i = (i + 1) & (g->hash_size - 1);
    }
    g->hash[i] = t;
    return true;
}

bool tsr__graph_contains(const tsr_graph *g, const tsr_tensor *t)
{
    size_t i = hash_slot(g, t);
    while (g->hash[i]) {
        if (g->hash[i] == t)
            return true;
        i = (i + 1) & (g->hash_size - 1);
    }
    return false;
}

static void hash_rebuild(tsr_graph *g)
{
    memset(g->hash, 0, g->hash_size * sizeof(*g->hash));
    for (size_t i = 0; i < g->n_nodes; i++)
        hash_insert(g, g->nodes[i]);
    for (size_t i = 0; i < g->n_leafs; i++)
        hash_insert(g, g->leafs[i]);
}

/* The k-th dependency of t: its sources, then the tensor it views. */
static tsr_tensor *dependency(const tsr_tensor *t, int k)
{
    if (k < TSR_MAX_SRC)
        return t->src[k];
    if (k == TSR_MAX_SRC)
        return t->view_src;
    return NULL;
}

tsr_status tsr_graph_build(tsr_graph *g, tsr_tensor *t)
{
    if (!g || !t)
        return tsr__error(TSR_EINVAL, "graph_build: %s is NULL (did a constructor fail?)",
                          g ? "the output tensor" : "the graph");
    const size_t saved_nodes = g->n_nodes, saved_leafs = g->n_leafs;
    tsr_status st = TSR_OK;
    size_t sp = 0;
    if (hash_insert(g, t)) {
        g->stack[sp++] = (tsr__graph_frame){t, 0};
    }
    while (sp > 0 && st == TSR_OK) {
        tsr__graph_frame *f = &g->stack[sp - 1];
        tsr_tensor *dep = NULL;
        while (f->next <= TSR_MAX_SRC && !dep) {
            dep = dependency(f->t, f->next++);
            if (dep && !hash_insert(g, dep))
                dep = NULL; /* already visited */
        }
        if (dep) {
            if (sp >= 2 * g->cap + 2) {
                st = tsr__error(TSR_ERANGE, "graph_build: deeper than the graph's capacity (%zu)",
                                g->cap);
                break;
            }
            g->stack[sp++] = (tsr__graph_frame){dep, 0};
            continue;
        }
        /* All dependencies are placed: place this tensor. */
        tsr_tensor *cur = f->t;
        sp--;
        if (cur->op == TSR_OP_NONE) {
            if (g->n_leafs >= g->cap) {
                st = tsr__error(TSR_ERANGE, "graph_build: more than %zu leaves", g->cap);
                break;
            }
            g->leafs[g->n_leafs++] = cur;
        } else {
            if (g->n_nodes >= g->cap) {
                st = tsr__error(TSR_ERANGE, "graph_build: more than %zu nodes", g->cap);
                break;
            }
            g->nodes[g->n_nodes++] = cur;
        }
    }
    if (st != TSR_OK) {
        g->n_nodes = saved_nodes;
        g->n_leafs = saved_leafs;
        hash_rebuild(g);
        return st;
    }
    for (size_t i = saved_nodes; i < g->n_nodes; i++)
        g->nodes[i]->flags |= TSR_TENSOR_FLAG_COMPUTE;
    t->flags |= TSR_TENSOR_FLAG_OUTPUT;
    return TSR_OK;
}

tsr_status tsr_graph_add_node(tsr_graph *g, tsr_tensor *t)
{
    if (!g || !t)
        return tsr__error(TSR_EINVAL, "graph_add_node: NULL argument");
    if (tsr__graph_contains(g, t))
        return TSR_OK;
    if (g->n_nodes >= g->cap)
        return tsr__error(TSR_ERANGE, "graph_add_node: more than %zu nodes", g->cap);
    hash_insert(g, t);
    g->nodes[g->n_nodes++] = t;
    t->flags |= TSR_TENSOR_FLAG_COMPUTE;
    return TSR_OK;
}

tsr_graph *tsr_graph_slice(const tsr_graph *g, size_t first, size_t n)
{
    if (first > g->n_nodes || n > g->n_nodes - first)
        return NULL;
    tsr_graph *s = tsr_graph_new(n);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        s->nodes[i] = g->nodes[first + i];
        hash_insert(s, s->nodes[i]);
    }
    s->n_nodes = n;
    return s;
}
