/* meta/meta_impl.h — internals shared by the meta device's files: the device
 * context, the per-tensor record of a meta buffer, split inference and the
 * construction of simple (per-device) tensors. Not installed.
 *
 * The meta device uses only the public backend API for its sub-devices; it
 * fills the common interface tables (core/backend_impl.h) for itself.
 */
#ifndef TESSERA_META_IMPL_H
#define TESSERA_META_IMPL_H

#include <pthread.h>

#include "core/backend_impl.h"
#include "core/internal.h"
#include "tessera/meta.h"

#define META_CACHE_SIZE 1024 /* split-inference cache entries (bounded) */

typedef struct meta_cache_entry {
    const tsr_tensor *t;
    uint64_t sig; /* hash of everything the split depends on */
    tsr_split split;
} meta_cache_entry;

typedef struct meta_dev {
    tsr_dev dev; /* the public object; context points back here */
    tsr_buft buft;
    int n;
    tsr_dev *devs[TSR_META_MAX_DEVICES];
    tsr_split_fn split_fn;
    void *userdata;
    char name[32];
    char desc[512];
    pthread_mutex_t cache_lock;
    meta_cache_entry *cache;
} meta_dev;

/* What a meta buffer records for each tensor placed in it (not views): its
 * split and its offset in every lane (sub-device buffer). */
typedef struct meta_tensor {
    tsr_split split;
    size_t offs[TSR_META_MAX_DEVICES];
} meta_tensor;

typedef struct meta_buf {
    meta_dev *md;
    tsr_buf *bufs[TSR_META_MAX_DEVICES];
    /* Records, in chunks that are kept and reused after a reset. */
    meta_tensor **chunks;
    size_t n_chunks, used;
} meta_buf;

meta_dev *tsr__meta_dev(tsr_dev *dev); /* NULL when dev is not a meta device */
bool tsr__meta_is_buf(const tsr_buf *buf);
meta_buf *tsr__meta_buf(const tsr_buf *buf);
extern const struct tsr_buft_i tsr__meta_buft_iface;

/* ---- split inference (meta/infer.c) ----------------------------------------- */

/* The split of t as seen on its own: static tensors from the split function
 * (or their record), views from their root, computed tensors by the op's
 * rule from their sources' splits (partial sources passed as partial). */
tsr_status tsr__meta_split(meta_dev *md, const tsr_tensor *t, tsr_split *out);

/* The rule of node n's op given its sources' splits (NULL for absent
 * sources). Partial sources are kept partial only by ops linear in them
 * (mul by a mirrored factor, add of two partials, add_id with a partial bias,
 * scale without bias, layout ops); any other op treats them as reduced. */
tsr_status tsr__meta_rule(meta_dev *md, const tsr_tensor *n, const tsr_split *const *src,
                          tsr_split *out);

/* The split of view v (VIEW/RESHAPE/PERMUTE/TRANSPOSE) of a root with split
 * rs, and for device j the view's shape, strides and byte offset within the
 * root's simple tensor on j (any of ne_j/nb_j/offs_j may be NULL). */
tsr_status tsr__meta_view(const tsr_tensor *v, const tsr_tensor *root, const tsr_split *rs, int j,
                          tsr_split *out, int64_t *ne_j, size_t *nb_j, size_t *offs_j);

/* Shape of tensor t's slice on device j under split s. */
void tsr__meta_simple_shape(const tsr_tensor *t, const tsr_split *s, int j, int64_t ne[4]);

/* Records an inference error naming the op, the tensor and the splits. */
tsr_status tsr__meta_rule_error(const tsr_tensor *n, const tsr_split *const *src, const char *why);

/* ---- simple tensors (meta/buffer.c) --------------------------------------- */

/* Fills *out with the simple tensor of a placed non-view meta tensor t on
 * device j (a plain struct; no context needed). */
tsr_status tsr__meta_simple_placed(const tsr_tensor *t, int j, tsr_tensor *out);
/* Bytes [offset, offset + size) of t (placed in a meta buffer, or a view of
 * such a tensor) to or from host `data`, enqueued piece by piece on the
 * sub-streams (each device's slice on its own stream, so ordered after that
 * stream's work). TSR_ENOTHANDLED for a write to a stored partial tensor
 * (staged, so blocking only). */
tsr_status tsr__meta_io_async(tsr_backend *const *subs, const tsr_tensor *t, void *data,
                              size_t offset, size_t size, bool get);

/* ---- streams (meta/device.c, meta/compute.c) ------------------------------------ */

/* Per-compute scratch, grown to the largest graph seen and then reused. */
typedef struct meta_scratch {
    size_t cap_nodes;
    tsr_split *st;          /* [node] split as executed */
    uint8_t *cut;           /* [node] all-reduce after it */
    uint8_t *zero;          /* [dev * cap + node]: value known to be zero on dev */
    uint8_t *filled;        /* [dev * cap + node]: zero root already written */
    tsr_tensor **simple;    /* [dev * cap + node] */
    const tsr_tensor **map; /* hash: tensor -> node index + 1 in map_idx */
    int32_t *map_idx;
    size_t map_size;
    int32_t *use_first, *use_next, *use_node; /* consumers, as linked lists */
    tsr_ctx *ctx[TSR_META_MAX_DEVICES];
    size_t ctx_cap;
    /* [segment * n_dev + dev]: a graph stays alive until its work ran, so
     * every segment has its own; kept and regrown across computes. */
    tsr_graph **graphs;
    size_t *graph_cap;
    size_t n_graphs;
} meta_scratch;

typedef struct meta_backend {
    meta_dev *md;
    tsr_backend *subs[TSR_META_MAX_DEVICES];
    tsr_allreduce *ar;
    char name[64];
    bool in_flight; /* scratch still used by enqueued work */
    meta_scratch sc;
    tsr_meta_stats stats;
} meta_backend;

tsr_status tsr__meta_graph_compute(tsr_backend *backend, tsr_graph *g);
/* Waits for every sub-stream; the first error wins. */
tsr_status tsr__meta_sync_subs(meta_backend *mb);
void tsr__meta_scratch_free(meta_scratch *sc);

#endif /* TESSERA_META_IMPL_H */
