/* tessera/comm.h — all-reduce across a set of streams: the capability
 * protocol by which a backend offers a native collective, and the engine
 * that picks the fastest path (native, or the generic butterfly / ring built
 * only from the public backend API).
 *
 * Protocol: the engine asks the registry of the first stream's device for
 * "tsr_comm_init" (tsr_reg_get_proc). NULL, or a NULL context, means the
 * backend has no collective for this set of streams. A native allreduce may
 * return TSR_ENOTHANDLED for one call (a type or shape it does not take);
 * the engine then runs a generic path for that call only.
 *
 * Ordering: a collective is enqueued on every stream; it runs after the work
 * already queued on each of them, and each stream's later work sees the sum
 * and may freely overwrite its tensor. Every participant must enqueue
 * collectives in the same order (as with NCCL).
 *
 * Generic paths (comm/ar_paths.c): device j pulls a partner's data into a
 * temporary on its own stream with tsr_backend_copy_async, then adds it with
 * a one-node ADD graph whose result is placed on its own tensor. When every
 * device can use every other's memory (tsr_dev_supports_buft), pulls are
 * ordered by events instead, and the ring becomes "two-shot": device j sums
 * chunk j of every tensor in place and copies the sum into everyone's chunk
 * j (TSR_ALLREDUCE_DIRECT=0 turns direct mode off).
 */
#ifndef TESSERA_COMM_H
#define TESSERA_COMM_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the protocol a backend implements ------------------------------------- */

typedef struct tsr_comm tsr_comm; /* backend-defined */

/* A context for these n streams (all of this backend), or NULL. Blocks. */
typedef tsr_comm *(*tsr_comm_init_fn)(tsr_backend *const *backends, int n);
/* Enqueues the in-place sum of tensors[j] (on backends[j]'s device, same type
 * and shape, contiguous) across j; async. TSR_ENOTHANDLED: not this call. */
typedef tsr_status (*tsr_comm_allreduce_fn)(tsr_comm *comm, tsr_tensor *const *tensors);
/* Waits for the context's queued work, then frees it. */
typedef void (*tsr_comm_free_fn)(tsr_comm *comm);

/* ---- the all-reduce engine -------------------------------------------------- */

typedef enum tsr_allreduce_path {
    TSR_ALLREDUCE_AUTO = 0,  /* native when offered, else by size and count */
    TSR_ALLREDUCE_NATIVE,    /* the backend's own collective */
    TSR_ALLREDUCE_BUTTERFLY, /* recursive doubling: log2(n) rounds of whole tensors */
    TSR_ALLREDUCE_RING,      /* reduce-scatter + all-gather in n chunks */
} tsr_allreduce_path;

typedef struct tsr_allreduce tsr_allreduce;

/* An engine over 1 ≤ n ≤ 16 streams (any devices, any backends; a stream
 * may appear twice, then there is no native path). The environment variable
 * TSR_ALLREDUCE=auto|native|butterfly|ring forces a path ("nccl" and
 * "internal" mean native; native falls back to auto, with a warning, when
 * the backend has none). Auto = native when offered, else butterfly below a
 * measured size threshold and ring above it. TSR_EINVAL for n out of range
 * or a NULL stream; TSR_ENOMEM. */
tsr_status tsr_allreduce_new(tsr_backend *const *backends, int n, tsr_allreduce **out);
void tsr_allreduce_free(tsr_allreduce *ar); /* waits for its queued work; NULL allowed */

/* Enqueues the in-place sum of tensors[0..n) (tensor j on stream j's device;
 * same type F32, F16 or BF16 and shape; contiguous; no two sharing memory)
 * and returns; n == 1 or zero elements: nothing to do. Temporary memory (at
 * most two tensors' worth per device, none for the native and direct ring
 * paths) is allocated on first need, grown to the largest tensor seen and
 * reused: no allocation per call once warm. Up to 4 generic collectives may
 * be in flight (the CPU native path: 64); enqueuing more waits on the host
 * for the oldest. Arguments are checked before anything is enqueued:
 * TSR_EINVAL (NULL, unallocated, not contiguous, shared memory, memory the
 * device cannot use), TSR_ETYPE, TSR_ESHAPE, with tsr_last_error() naming
 * the tensor, its device, type and shape; nothing runs then. One thread at
 * a time per engine. */
tsr_status tsr_allreduce_run(tsr_allreduce *ar, tsr_tensor *const *tensors);
/* The same with a path chosen by the caller (AUTO = the engine's choice,
 * including TSR_ALLREDUCE). NATIVE when the backend offers none:
 * TSR_EUNSUPPORTED; when it declines this call, auto's generic choice runs. */
tsr_status tsr_allreduce_run_path(tsr_allreduce *ar, tsr_tensor *const *tensors,
                                  tsr_allreduce_path path);
/* The path the last run took (logged at debug level too); AUTO when nothing
 * ran (n == 1, an empty tensor, or an error). Its name: "auto", "native",
 * "butterfly", "ring". */
tsr_allreduce_path tsr_allreduce_last_path(const tsr_allreduce *ar);
const char *tsr_allreduce_path_name(tsr_allreduce_path path);
/* Whether the streams' backend offered a native collective. */
bool tsr_allreduce_has_native(const tsr_allreduce *ar);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_COMM_H */
