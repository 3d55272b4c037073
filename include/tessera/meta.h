/* tessera/meta.h — the meta device: one virtual device over N sub-devices of
 * any kind, which splits every tensor across them (tensor parallelism) and
 * sums partial results with an all-reduce.
 *
 * A meta device is used exactly like a single device: allocate its buffers,
 * open a stream, compute graphs. Behind the interface every tensor has one
 * *simple tensor* per sub-device, holding that device's slice; a split
 * ledger (tsr_split) says which slice. Static tensors (weights, caches,
 * inputs) get their split from the application's split function; computed
 * tensors get theirs from the rules of their ops (split inference), which
 * also decide where the graph must be cut for an all-reduce.
 */
#ifndef TESSERA_META_H
#define TESSERA_META_H

#include <stdbool.h>

#include "backend.h"
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_META_MAX_DEVICES 16
#define TSR_SPLIT_MAX_SEGMENTS 8

typedef enum tsr_split_axis {
    TSR_SPLIT_A0 = 0, /* a real slice along dimension 0 */
    TSR_SPLIT_A1 = 1,
    TSR_SPLIT_A2 = 2,
    TSR_SPLIT_A3 = 3,
    TSR_SPLIT_MIRRORED = 10, /* every device holds the whole tensor */
    TSR_SPLIT_PARTIAL = 11,  /* every device holds a full-shape partial sum */
} tsr_split_axis;

/* The split ledger. Along the axis the tensor is a sequence of blocks: for
 * each segment s, nr[s] consecutive blocks of Σ_j ne[s][j] elements; device j
 * holds ne[s][j] elements of every block of segment s, in device order
 * within the block. Device j's extent is Σ_s ne[s][j]·nr[s]. Segments keep a
 * fused tensor (e.g. [Q | K, V]) cut inside each logical part.
 * For PARTIAL, ne[0][j] != 0 marks the devices that contribute (a stored
 * partial tensor is written as value/contributors on each of them). */
typedef struct tsr_split {
    tsr_split_axis axis;
    int n_devices;
    int n_segments;
    int32_t nr[TSR_SPLIT_MAX_SEGMENTS];
    int64_t ne[TSR_SPLIT_MAX_SEGMENTS][TSR_META_MAX_DEVICES];
} tsr_split;

/* Device j's extent along the axis (0 for MIRRORED/PARTIAL). */
int64_t tsr_split_extent(const tsr_split *s, int j);
/* The full extent Σ_j extent(j). */
int64_t tsr_split_total(const tsr_split *s);
bool tsr_split_is_axis(const tsr_split *s); /* A0..A3 */
/* "A1 {Q: 64,64 | KV×2: 16,16}" style text; returns buf. */
const char *tsr_split_str(const tsr_split *s, char *buf, size_t size);
const char *tsr_split_axis_name(tsr_split_axis axis); /* "A0".."A3", "M", "P" */

tsr_split tsr_split_mirrored(int n_devices);
/* contributors may be NULL: every device contributes. */
tsr_split tsr_split_partial(int n_devices, const bool *contributors);

/* One segment of a split built by tsr_split_make. */
typedef struct tsr_split_segment {
    int64_t size;        /* elements along the axis per repetition */
    int32_t repeat;      /* nr; 0 means 1 */
    int64_t granularity; /* every cut is a multiple of it; 0 means 1 */
} tsr_split_segment;

/* Splits every segment among n devices in proportion to ratios (NULL or
 * all zero: even). Cuts are rounded down to the segment's granularity; the
 * device that takes the rounding remainder is (rotation + n - 1) mod n, so
 * rotating per layer spreads it. Devices may get zero elements. TSR_EINVAL
 * on a size that is not a multiple of its granularity, or bad counts. */
tsr_status tsr_split_make(tsr_split *out, tsr_split_axis axis, int n_devices,
                          const tsr_split_segment *segments, int n_segments, const float *ratios,
                          int rotation);
/* One segment, even or by ratios. */
tsr_status tsr_split_simple(tsr_split *out, tsr_split_axis axis, int n_devices, int64_t size,
                            int64_t granularity, const float *ratios, int rotation);

/* The split of a static tensor (one with no op, placed in a meta buffer):
 * fills *out; returns TSR_OK, or an error naming the problem (it becomes the
 * error of the allocation). NULL split function: every static tensor is
 * MIRRORED. */
typedef tsr_status (*tsr_split_fn)(const tsr_tensor *t, int n_devices, tsr_split *out,
                                   void *userdata);

/* A meta device over devs[0..n) (1 ≤ n ≤ 16, no meta device among them, no
 * device twice). Memory is the sum, caps the intersection, an op is
 * supported when every sub-device supports it. */
tsr_status tsr_meta_device_new(tsr_dev *const *devs, int n, tsr_split_fn split_fn, void *userdata,
                               tsr_dev **out);
/* Frees a meta device; its buffers and streams must be freed first. */
void tsr_meta_device_free(tsr_dev *meta);
bool tsr_dev_is_meta(tsr_dev *dev);
int tsr_meta_n_devices(tsr_dev *meta);
tsr_dev *tsr_meta_sub_device(tsr_dev *meta, int j);

/* The split the meta device gives t: a static tensor's from the split
 * function, a computed one's by inference from its sources. An op or a
 * combination of source splits without a rule is an error naming the op, the
 * tensor and the splits. */
tsr_status tsr_meta_split_of(tsr_dev *meta, const tsr_tensor *t, tsr_split *out);
/* Checks every node of g: returns the first inference error (call it right
 * after building a graph to catch unsupported ops before allocating). */
tsr_status tsr_meta_check_graph(tsr_dev *meta, tsr_graph *g);

/* The stream of sub-device j behind a meta stream (NULL when out of range),
 * e.g. to run per-device work on the slices of a tensor. */
tsr_backend *tsr_meta_sub_backend(tsr_backend *meta_backend, int j);
/* Device j's slice of a tensor placed in a meta buffer (not a view): a plain
 * tensor in that device's memory, and where the slice starts along the
 * split axis (0 when mirrored). */
tsr_status tsr_meta_slice(const tsr_tensor *t, int j, tsr_tensor *out, int64_t *start);

/* What the last graph computed on a meta stream did. */
typedef struct tsr_meta_stats {
    int n_subgraphs;         /* pieces between cuts */
    int n_allreduce;         /* all-reduces enqueued */
    int n_delayed;           /* cuts avoided by delaying through linear ops */
    tsr_allreduce_path path; /* path of the last all-reduce */
} tsr_meta_stats;
tsr_status tsr_meta_stats_get(tsr_backend *meta_backend, tsr_meta_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_META_H */
