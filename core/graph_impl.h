/* core/graph_impl.h — the graph struct, shared by core/graph.c, the graph
 * allocator and backends that walk nodes. Not installed.
 */
#ifndef TESSERA_CORE_GRAPH_IMPL_H
#define TESSERA_CORE_GRAPH_IMPL_H

#include "tessera/graph.h"

typedef struct tsr__graph_frame {
    tsr_tensor *t;
    int next; /* next dependency index to visit */
} tsr__graph_frame;

struct tsr_graph {
    size_t cap;
    size_t n_nodes, n_leafs;
    tsr_tensor **nodes;
    tsr_tensor **leafs;
    const tsr_tensor **hash; /* visited set, open addressing */
    size_t hash_size;        /* power of two, 4x cap */
    tsr__graph_frame *stack; /* traversal stack, 2x cap */
};

bool tsr__graph_contains(const tsr_graph *g, const tsr_tensor *t);

#endif /* TESSERA_CORE_GRAPH_IMPL_H */
