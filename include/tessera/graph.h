/* tessera/graph.h — computation graphs and the graph allocator.
 *
 * A graph is the topologically ordered list of nodes reaching its outputs;
 * tensors without an op (weights, inputs) are its leaves. The graph allocator
 * places every intermediate in one compute buffer, reusing the memory of
 * tensors whose last reader has run, and keeps that buffer across
 * evaluations (it only grows when a graph needs more).
 */
#ifndef TESSERA_GRAPH_H
#define TESSERA_GRAPH_H

#include <stddef.h>

#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_graph tsr_graph;
typedef struct tsr_buft tsr_buft;
typedef struct tsr_buf tsr_buf;

/* A graph with room for max_nodes nodes and as many leaves. NULL on ENOMEM. */
tsr_graph *tsr_graph_new(size_t max_nodes);
void tsr_graph_free(tsr_graph *g);
void tsr_graph_reset(tsr_graph *g); /* empties it, keeps the memory */

/* Adds t and every tensor it depends on (once each, sources before users) and
 * flags t as an output. Fails with TSR_EINVAL on NULL (e.g. a constructor's
 * error), TSR_ERANGE when the graph is full; the graph is unchanged then. */
tsr_status tsr_graph_build(tsr_graph *g, tsr_tensor *t);

size_t tsr_graph_n_nodes(const tsr_graph *g);
tsr_tensor *tsr_graph_node(const tsr_graph *g, size_t i); /* NULL when i >= n_nodes */
size_t tsr_graph_n_leafs(const tsr_graph *g);
tsr_tensor *tsr_graph_leaf(const tsr_graph *g, size_t i);
/* The graph's last node (its main output), NULL when empty. */
tsr_tensor *tsr_graph_last(const tsr_graph *g);

/* Appends t as a node without visiting its sources, and flags it
 * TSR_TENSOR_FLAG_COMPUTE: for graphs assembled by hand (e.g. the one-node
 * ADD of an all-reduce step). Adding a node twice adds it once. */
tsr_status tsr_graph_add_node(tsr_graph *g, tsr_tensor *t);

/* A graph over nodes [first, first + n) of g, sharing g's tensors (for
 * running part of a graph, e.g. between two all-reduces). Leaves are not
 * copied. Free it with tsr_graph_free. */
tsr_graph *tsr_graph_slice(const tsr_graph *g, size_t first, size_t n);

/* ---- graph allocator --------------------------------------------------------- */

typedef struct tsr_gallocr tsr_gallocr;

tsr_gallocr *tsr_gallocr_new(tsr_buft *buft); /* NULL on ENOMEM */
void tsr_gallocr_free(tsr_gallocr *ga);       /* frees its compute buffer */
/* Sizes the compute buffer for g without assigning tensors (e.g. for the
 * largest graph a model will build, so later graphs never reallocate). */
tsr_status tsr_gallocr_reserve(tsr_gallocr *ga, tsr_graph *g);
/* Gives every unallocated tensor of g (nodes and leaves, views excepted) a
 * place in the compute buffer and initializes views. Grows the buffer when g
 * needs more than it has; otherwise reuses it untouched. */
tsr_status tsr_gallocr_alloc_graph(tsr_gallocr *ga, tsr_graph *g);
size_t tsr_gallocr_buffer_size(const tsr_gallocr *ga);
tsr_buf *tsr_gallocr_buffer(const tsr_gallocr *ga);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_GRAPH_H */
