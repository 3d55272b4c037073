/* comm/ar_impl.h — internals shared by the all-reduce engine
 * (comm/allreduce.c: checks, path choice, temporaries, per-call slots) and
 * its generic paths (comm/ar_paths.c: butterfly and ring). Not installed.
 *
 * Everything here is built on the public backend API only: async copies,
 * events, and one-node ADD graphs.
 */
#ifndef TESSERA_AR_IMPL_H
#define TESSERA_AR_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "tessera/comm.h"

#define AR_MAX 16  /* streams per engine (the meta device's limit) */
#define AR_SLOTS 4 /* generic collectives in flight before an enqueue waits */
/* Direct ring: blocks of at least AR_BLOCK_BYTES, at most AR_BLOCKS(n) per
 * chunk (so a call's tensors and graph nodes stay O(n), not O(n * size)). */
#define AR_BLOCK_BYTES ((int64_t)512 << 10)
#define AR_BLOCKS(n) ((n) >= 16 ? 1 : 16 / (n))

/* The objects one generic call builds and enqueues. They must stay alive
 * until the streams have run them, so calls rotate over AR_SLOTS slots and
 * a slot is reset only once its previous call's done events have fired. */
typedef struct ar_slot {
    tsr_ctx *ctx;       /* tensor metadata of one call: aliases and ADD nodes */
    tsr_graph **graphs; /* one-node ADD graphs */
    size_t n_graphs, used_graphs;
    tsr_event *ev_step[AR_MAX]; /* re-recorded per round / step */
    tsr_event *ev_end[AR_MAX];  /* end of a phase */
    tsr_event *ev_done[AR_MAX]; /* end of the call on each stream */
    bool pending;               /* ev_done recorded and not yet waited for */
} ar_slot;

struct tsr_allreduce {
    int n;
    tsr_backend *b[AR_MAX];
    tsr_dev *dev[AR_MAX];

    /* The backend's collective, when it offered one. */
    tsr_comm *comm;
    tsr_comm_allreduce_fn native;
    tsr_comm_free_fn native_free;

    tsr_allreduce_path forced; /* from TSR_ALLREDUCE; AUTO when unset */
    tsr_allreduce_path last;
    bool direct; /* TSR_ALLREDUCE_DIRECT (default 1): allow ar_call.direct */

    /* Temporaries: one buffer per device on its default buffer type, grown to
     * the largest need seen so far, never shrunk. */
    tsr_buf *tmp[AR_MAX];

    ar_slot slots[AR_SLOTS];
    uint64_t calls; /* generic calls so far (slot = calls % AR_SLOTS) */
};

/* One generic call: where every device's working copy W_j lives and where
 * its receive buffers are. W_j is the caller's tensor itself when it sits
 * at an aligned offset of its buffer (the usual case); otherwise it is a
 * stage region of the temporary buffer, filled before and copied back after. */
typedef struct ar_call {
    tsr_allreduce *ar;
    ar_slot *slot;
    tsr_tensor *const *t; /* the caller's tensors */
    tsr_type type;
    size_t es;    /* bytes per element */
    int64_t ne;   /* elements per tensor */
    int64_t unit; /* chunk granularity in elements (one buffer alignment) */
    tsr_buf *wbuf[AR_MAX];
    size_t woff[AR_MAX]; /* W_j = wbuf[j] + woff[j] */
    bool staged[AR_MAX];
    tsr_tensor *stage[AR_MAX]; /* the stage region shaped like t[j] */
    size_t roff[AR_MAX][2];    /* receive buffers in tmp[j] */
    /* Every device can read every other's W (tsr_dev_supports_buft): pulls
     * run on the receiver's stream ordered by events, and the ring adds
     * straight from the neighbour's memory (ar_paths.c). */
    bool direct;
} ar_call;

/* Bytes of the temporary buffer of device j a path needs, given whether
 * W_j is staged: the layout is [stage | receive 0 | receive 1]. */
size_t tsr__ar_temp_layout(const ar_call *c, tsr_allreduce_path path, int j, bool staged,
                           size_t roff[2]);

/* The generic paths; they enqueue and return. Every failure they can meet
 * was checked before anything was enqueued, except a backend refusing an
 * enqueue. */
tsr_status tsr__ar_butterfly(ar_call *c);
tsr_status tsr__ar_ring(ar_call *c);

/* [first, first + len) elements of chunk k of n (ring): chunks start on
 * multiples of unit; tensors smaller than n units leave chunks empty. */
void tsr__ar_chunk(int64_t ne, int64_t unit, int n, int k, int64_t *first, int64_t *len);

#endif /* TESSERA_AR_IMPL_H */
