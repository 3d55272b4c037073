/* backends/cpu/cpu_impl.h — internals shared by the CPU backend's files: the
 * stream (job queue + worker threads), the per-node kernel interface and the
 * kernel tables. Not installed.
 */
#ifndef TESSERA_CPU_IMPL_H
#define TESSERA_CPU_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/backend_impl.h"
#include "core/internal.h"
#include "tessera/cpu.h"

/* ---- kernels -------------------------------------------------------------------------- */

typedef struct cpu_stream cpu_stream;

/* What every kernel gets: its thread index among nth, the shared scratch
 * (sized by tsr__cpu_work_size before the graph starts) and a barrier that
 * all nth threads must call the same number of times. */
typedef struct tsr__cpu_params {
    int ith, nth;
    void *work;
    size_t work_size;
    cpu_stream *stream;
} tsr__cpu_params;

void tsr__cpu_barrier(const tsr__cpu_params *p);
/* Records a run-time error (e.g. an index out of range); the first one is
 * returned by the next synchronize. Safe from any thread. */
void tsr__cpu_fail(const tsr__cpu_params *p, tsr_status status, const char *fmt, ...)
    TSR__PRINTF(3, 4);

/* Runs node n (all nth threads call it). */
void tsr__cpu_compute_node(const tsr__cpu_params *p, tsr_tensor *n, bool reference);
/* Scratch bytes node n needs with nth threads. */
size_t tsr__cpu_work_size(const tsr_tensor *n, int nth, bool reference);

/* Reference kernels (plain C, the oracle): one per op, all types. */
void tsr__cpu_ref_compute(const tsr__cpu_params *p, tsr_tensor *n);
size_t tsr__cpu_ref_work_size(const tsr_tensor *n, int nth);

/* Fast per-row kernels for F32 rows (cpu_ops_rows.c): RMS_NORM, MUL by a
 * broadcast row, SwiGLU, ROPE, SET_ROWS, GET_ROWS; false when they decline. */
bool tsr__cpu_rows_compute(const tsr__cpu_params *p, tsr_tensor *n);

/* Fast flash attention (cpu_fa.c); false when it declines. */
bool tsr__cpu_flash_attn(const tsr__cpu_params *p, tsr_tensor *n);
size_t tsr__cpu_fa_work_size(const tsr_tensor *n, int nth);

/* The [first, last) share of n items for thread ith of nth. */
static inline void tsr__cpu_range(int64_t n, int ith, int nth, int64_t *first, int64_t *last)
{
    const int64_t per = (n + nth - 1) / nth;
    *first = TSR_MIN(n, per * ith);
    *last = TSR_MIN(n, *first + per);
}

/* ---- streams ------------------------------------------------------------------------- */

typedef enum {
    CPU_JOB_GRAPH,       /* run a graph */
    CPU_JOB_COPY,        /* 2-D memcpy */
    CPU_JOB_MEMSET,      /* memset */
    CPU_JOB_WAIT_STREAM, /* wait until another CPU stream reaches a ticket */
    CPU_JOB_WAIT_EVENT,  /* wait for a foreign event (blocks this worker) */
    CPU_JOB_HOST_FN,     /* run fn(arg) on the worker thread */
} cpu_job_kind;

/* A function run by a stream's worker thread as a job; returns a status that
 * the next synchronize reports when it is not TSR_OK. */
typedef tsr_status (*tsr__cpu_host_fn)(void *arg);

typedef struct cpu_job {
    cpu_job_kind kind;
    union {
        tsr_graph *graph;
        struct {
            char *dst;
            const char *src;
            size_t row_size, n_rows, dst_stride, src_stride;
        } copy;
        struct {
            char *dst;
            size_t size;
            uint8_t value;
        } memset;
        struct {
            cpu_stream *stream;
            uint64_t ticket;
        } wait;
        tsr_event *event;
        struct {
            tsr__cpu_host_fn fn;
            void *arg;
        } host;
    } u;
} cpu_job;

tsr_status tsr__cpu_stream_new(const char *name, int n_threads, cpu_stream **out);
void tsr__cpu_stream_free(cpu_stream *s); /* waits for queued work */
/* Enqueues a job; blocks only while the queue is full. */
tsr_status tsr__cpu_stream_push(cpu_stream *s, const cpu_job *job);
/* The ticket of the last job enqueued so far (0: none yet). */
uint64_t tsr__cpu_stream_ticket(cpu_stream *s);
/* True when every job enqueued so far has completed. */
bool tsr__cpu_stream_idle(cpu_stream *s);
/* Blocks until the stream has completed `ticket` jobs. */
void tsr__cpu_stream_wait(cpu_stream *s, uint64_t ticket);
/* Waits for everything queued; returns and clears the first run-time error. */
tsr_status tsr__cpu_stream_sync(cpu_stream *s);
tsr_status tsr__cpu_stream_set_threads(cpu_stream *s, int n_threads);
int tsr__cpu_stream_threads(cpu_stream *s);
void tsr__cpu_stream_set_reference(cpu_stream *s, bool reference);
/* Enqueues fn(arg) to run on the stream's worker thread, in order. */
tsr_status tsr__cpu_stream_push_fn(cpu_stream *s, tsr__cpu_host_fn fn, void *arg);
/* The stream behind a CPU backend (NULL for other backends). */
cpu_stream *tsr__cpu_backend_stream(tsr_backend *backend);

/* ---- copies from other backends (cpu_xcopy.c) ----------------------------------------- */

typedef struct cpu_xpool cpu_xpool;
typedef struct cpu_xrec cpu_xrec;
tsr_status tsr__cpu_xpool_new(cpu_xpool **out);
/* After the stream using the pool has been drained. */
void tsr__cpu_xpool_free(cpu_xpool *pool);
/* Whether src (on src_b, not a CPU backend) can be copied asynchronously
 * into host memory by tsr__cpu_xcopy_push. */
bool tsr__cpu_xcopy_handles(tsr_backend *src_b, const tsr_tensor *src);
/* Enqueues on s: wait for the work queued so far on src_b, then copy the
 * n bytes of src into dst. */
tsr_status tsr__cpu_xcopy_push(cpu_xpool *pool, cpu_stream *s, tsr_backend *src_b,
                               const tsr_tensor *src, void *dst, size_t n);
/* Enqueues on s a wait for event's current mark (an event of another
 * device), through a pooled copy of the mark; TSR_ENOTHANDLED when that
 * device cannot copy marks. */
tsr_status tsr__cpu_xwait_push(cpu_xpool *pool, cpu_stream *s, const tsr_event *event);

#endif /* TESSERA_CPU_IMPL_H */
