/* backends/cpu/cpu_comm.c — the CPU backend's native all-reduce over a set
 * of CPU streams (any mix of CPU devices): the comm protocol of
 * tessera/comm.h, exported by the CPU registry as "tsr_comm_init",
 * "tsr_comm_allreduce" and "tsr_comm_free".
 *
 * Not the engine that picks a path (comm/allreduce.c), nor the vector
 * kernels (cpu_comm_avx512.c). Key design choice: every CPU device shares
 * host memory, so no data moves between "devices": one host-function job per
 * stream; the N workers meet at a barrier, each sums its 1/N share of the
 * elements across all N tensors and writes the sum back into all N, and a
 * second barrier keeps every worker (and so every stream's later work) from
 * going on before all shares are written. Per-call state lives in a ring of
 * preallocated slots, so collectives can be enqueued far ahead without any
 * allocation; the enqueue blocks only when the ring is full. When every
 * stream is idle and the tensors are small, no job is needed at all: the
 * calling thread sums in place (TSR_CPU_COMM_INLINE=0 turns that off).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_comm.h"
#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/cpu_mm.h"

#define CPU_COMM_MAX 64                  /* streams per context */
#define CPU_COMM_SLOTS 64                /* collectives in flight per context */
#define CPU_COMM_SPIN_NS 30000           /* spin this long at a rendezvous, then sleep */
#define CPU_COMM_SOLO_BYTES (64 << 10)   /* up to this, one worker sums it all */
#define CPU_COMM_INLINE_BYTES (64 << 10) /* up to this, idle streams: the caller sums */

typedef struct cpu_comm cpu_comm;
typedef struct cpu_comm_slot cpu_comm_slot;

typedef struct {
    cpu_comm *comm;
    cpu_comm_slot *slot;
    int rank;
} cpu_comm_arg;

/* One collective. The enqueuing thread fills it while it is free (left ==
 * n); the workers only read type/ne/data and move the counters. */
struct cpu_comm_slot {
    _Alignas(64) atomic_int in; /* workers arrived at the first barrier */
    atomic_int open_in;         /* 1: everyone arrived (or the call was cancelled) */
    _Alignas(64) atomic_int out;
    atomic_int open_out;
    _Alignas(64) atomic_int left; /* workers done with the slot; n = free */
    atomic_bool cancel;           /* enqueue failed midway: skip the sum */
    tsr_type type;
    int64_t ne;
    void **data;       /* [n] */
    cpu_comm_arg *arg; /* [n] */
};

struct cpu_comm {
    int n;
    cpu_stream **streams;        /* [n] */
    tsr__cpu_comm_sum_fn sum[3]; /* F32, F16, BF16 */
    uint64_t next;               /* collectives enqueued so far */
    cpu_comm_slot *slots;        /* [CPU_COMM_SLOTS] */
    /* Sleeping at a rendezvous: everybody waits on the one condition. */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int sleepers;
    bool inline_sum; /* TSR_CPU_COMM_INLINE (default 1): idle streams, caller sums */
};

static void cpu_comm_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Wakes every sleeper; a sleeper re-checks its own flag. Called after the
 * flag it waits for has been set (seq_cst on both sides: either we see the
 * sleeper, or the sleeper sees the flag). */
static void cpu_comm_wake(cpu_comm *c)
{
    if (atomic_load(&c->sleepers) > 0) {
        pthread_mutex_lock(&c->lock);
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
    }
}

/* Blocks until *v >= target: spins for CPU_COMM_SPIN_NS (a rendezvous is
 * usually microseconds away), then sleeps — a stream may be busy with a long
 * graph before it reaches its part of the collective. */
static void cpu_comm_wait(cpu_comm *c, atomic_int *v, int target)
{
    uint64_t start = 0;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(v, memory_order_acquire) >= target)
            return;
        cpu_comm_pause();
        if ((i & 15) == 15) {
            const uint64_t now = tsr__time_ns();
            if (!start)
                start = now;
            else if (now - start > CPU_COMM_SPIN_NS)
                break;
            sched_yield(); /* more spinning threads than cores: let the others run */
        }
    }
    pthread_mutex_lock(&c->lock);
    atomic_fetch_add(&c->sleepers, 1);
    while (atomic_load(v) < target)
        pthread_cond_wait(&c->cond, &c->lock);
    atomic_fetch_sub(&c->sleepers, 1);
    pthread_mutex_unlock(&c->lock);
}

static void cpu_comm_barrier(cpu_comm *c, atomic_int *count, atomic_int *open)
{
    if (atomic_fetch_add(count, 1) == c->n - 1) {
        atomic_store(open, 1);
        cpu_comm_wake(c);
    } else {
        cpu_comm_wait(c, open, 1);
    }
}

/* ---- the job each stream runs ------------------------------------------------------------ */

static int type_index(tsr_type t)
{
    return t == TSR_TYPE_F32 ? 0 : t == TSR_TYPE_F16 ? 1 : t == TSR_TYPE_BF16 ? 2 : -1;
}

/* Sums elements [i0, i1) of every tensor in place. */
static void cpu_comm_sum(cpu_comm *c, const cpu_comm_slot *s, int64_t i0, int64_t i1)
{
    if (i1 <= i0)
        return;
    const size_t es = tsr_type_size(s->type);
    void *p[CPU_COMM_MAX];
    for (int j = 0; j < c->n; j++)
        p[j] = (char *)s->data[j] + (size_t)i0 * es;
    c->sum[type_index(s->type)](p, c->n, i1 - i0);
}

/* Small collectives: the last worker to arrive sums everything while the
 * others only wait for it, so no two workers need to be running at the same
 * time (streams share few cores). Large ones: rank r sums its share of
 * 64-byte lines (no two workers write one cache line), between two barriers. */
static tsr_status cpu_comm_job(void *arg)
{
    const cpu_comm_arg *a = arg;
    cpu_comm *c = a->comm;
    cpu_comm_slot *s = a->slot;
    const bool cancelled = atomic_load(&s->cancel);
    if ((size_t)s->ne * tsr_type_size(s->type) <= CPU_COMM_SOLO_BYTES) {
        if (atomic_fetch_add(&s->in, 1) == c->n - 1) {
            if (!cancelled)
                cpu_comm_sum(c, s, 0, s->ne);
            atomic_store(&s->open_out, 1);
            cpu_comm_wake(c);
        } else {
            cpu_comm_wait(c, &s->open_out, 1);
        }
    } else {
        cpu_comm_barrier(c, &s->in, &s->open_in);
        if (!atomic_load(&s->cancel)) {
            const int64_t unit = 64 / (int64_t)tsr_type_size(s->type);
            int64_t u0, u1;
            tsr__cpu_range((s->ne + unit - 1) / unit, a->rank, c->n, &u0, &u1);
            cpu_comm_sum(c, s, TSR_MIN(u0 * unit, s->ne), TSR_MIN(u1 * unit, s->ne));
        }
        cpu_comm_barrier(c, &s->out, &s->open_out);
    }
    /* The last touch of the slot: after this the enqueuer may reuse it. */
    if (atomic_fetch_add(&s->left, 1) == c->n - 1)
        cpu_comm_wake(c);
    return TSR_OK;
}

/* ---- portable kernels ---------------------------------------------------------------------- */

#define CPU_COMM_BLOCK 256

static void sum_f32_c(void *const *p, int m, int64_t ne)
{
    float acc[CPU_COMM_BLOCK];
    for (int64_t i = 0; i < ne; i += CPU_COMM_BLOCK) {
        const int64_t k = TSR_MIN(CPU_COMM_BLOCK, ne - i);
        const float *x0 = (const float *)p[0] + i;
        for (int64_t e = 0; e < k; e++)
            acc[e] = x0[e];
        for (int j = 1; j < m; j++) {
            const float *x = (const float *)p[j] + i;
            for (int64_t e = 0; e < k; e++)
                acc[e] += x[e];
        }
        for (int j = 0; j < m; j++)
            memcpy((float *)p[j] + i, acc, (size_t)k * sizeof(float));
    }
}

static void sum_f16_c(void *const *p, int m, int64_t ne)
{
    for (int64_t i = 0; i < ne; i++) {
        float s = tsr_fp16_to_f32(((const tsr_fp16 *)p[0])[i]);
        for (int j = 1; j < m; j++)
            s += tsr_fp16_to_f32(((const tsr_fp16 *)p[j])[i]);
        const tsr_fp16 h = tsr_f32_to_fp16(s);
        for (int j = 0; j < m; j++)
            ((tsr_fp16 *)p[j])[i] = h;
    }
}

static void sum_bf16_c(void *const *p, int m, int64_t ne)
{
    for (int64_t i = 0; i < ne; i++) {
        float s = tsr_bf16_to_f32(((const tsr_bf16 *)p[0])[i]);
        for (int j = 1; j < m; j++)
            s += tsr_bf16_to_f32(((const tsr_bf16 *)p[j])[i]);
        const tsr_bf16 h = tsr_f32_to_bf16(s);
        for (int j = 0; j < m; j++)
            ((tsr_bf16 *)p[j])[i] = h;
    }
}

/* ---- the protocol ------------------------------------------------------------------------ */

static void cpu_comm_release(cpu_comm *c)
{
    if (c->slots) {
        free(c->slots[0].data);
        free(c->slots[0].arg);
    }
    free(c->slots);
    free(c->streams);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

tsr_comm *tsr__cpu_comm_init(tsr_backend *const *backends, int n)
{
    if (!backends || n < 1 || n > CPU_COMM_MAX)
        return NULL;
    for (int j = 0; j < n; j++) {
        if (!tsr__cpu_backend_stream(backends[j]))
            return NULL;
        for (int k = 0; k < j; k++)
            if (backends[k] == backends[j])
                return NULL; /* one worker cannot meet itself */
    }
    cpu_comm *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->n = n;
    c->inline_sum = tsr__env_long("TSR_CPU_COMM_INLINE", 1) != 0;
    c->streams = calloc((size_t)n, sizeof(*c->streams));
    c->slots = aligned_alloc(64, CPU_COMM_SLOTS * sizeof(cpu_comm_slot));
    void **data = calloc((size_t)n * CPU_COMM_SLOTS, sizeof(void *));
    cpu_comm_arg *args = calloc((size_t)n * CPU_COMM_SLOTS, sizeof(cpu_comm_arg));
    if (!c->streams || !c->slots || !data || !args) {
        free(data);
        free(args);
        if (c->slots)
            memset(c->slots, 0, sizeof(cpu_comm_slot)); /* so release frees nothing twice */
        cpu_comm_release(c);
        return NULL;
    }
    memset(c->slots, 0, CPU_COMM_SLOTS * sizeof(cpu_comm_slot));
    for (int j = 0; j < n; j++)
        c->streams[j] = tsr__cpu_backend_stream(backends[j]);
    for (int s = 0; s < CPU_COMM_SLOTS; s++) {
        cpu_comm_slot *sl = &c->slots[s];
        sl->data = data + (size_t)s * (size_t)n;
        sl->arg = args + (size_t)s * (size_t)n;
        atomic_store(&sl->left, n); /* free */
        for (int j = 0; j < n; j++)
            sl->arg[j] = (cpu_comm_arg){.comm = c, .slot = sl, .rank = j};
    }
    c->sum[0] = sum_f32_c;
    c->sum[1] = sum_f16_c;
    c->sum[2] = sum_bf16_c;
#if defined(TSR_HAVE_AVX512)
    if (tsr__cpu_use_avx512()) {
        c->sum[0] = tsr__cpu_comm_sum_f32_avx512;
        c->sum[1] = tsr__cpu_comm_sum_f16_avx512;
        c->sum[2] = tsr__cpu_comm_sum_bf16_avx512;
    }
#endif
    return (tsr_comm *)c;
}

tsr_status tsr__cpu_comm_allreduce(tsr_comm *comm, tsr_tensor *const *tensors)
{
    cpu_comm *c = (cpu_comm *)comm;
    if (!c || !tensors || !tensors[0])
        return tsr__error(TSR_EINVAL, "cpu comm: NULL argument");
    const tsr_type type = tensors[0]->type;
    const int64_t ne = tsr_nelements(tensors[0]);
    if (type_index(type) < 0)
        return TSR_ENOTHANDLED;
    for (int j = 0; j < c->n; j++) {
        const tsr_tensor *t = tensors[j];
        if (!t || !t->buffer || t->type != type || tsr_nelements(t) != ne || !tsr_is_contiguous(t))
            return tsr__error(TSR_EINVAL,
                              "cpu comm: tensor %d is missing, unplaced, not contiguous or not "
                              "%s with %lld elements like tensor 0",
                              j, tsr_type_name(type), (long long)ne);
        if (!tsr_buf_is_host(t->buffer))
            return TSR_ENOTHANDLED;
    }
    if (c->n == 1 || ne == 0)
        return TSR_OK;
    /* Every stream idle and the tensors small: nothing can run before or
     * between the jobs, so the caller sums right here; later work on every
     * stream is enqueued after this returns, hence ordered after the sum. */
    if (c->inline_sum && (size_t)ne * tsr_type_size(type) <= CPU_COMM_INLINE_BYTES) {
        bool idle = true;
        for (int j = 0; j < c->n && idle; j++)
            idle = tsr__cpu_stream_idle(c->streams[j]);
        if (idle) {
            void *p[CPU_COMM_MAX];
            for (int j = 0; j < c->n; j++)
                p[j] = tensors[j]->data;
            c->sum[type_index(type)](p, c->n, ne);
            return TSR_OK;
        }
    }

    cpu_comm_slot *s = &c->slots[c->next % CPU_COMM_SLOTS];
    cpu_comm_wait(c, &s->left, c->n); /* the collective CPU_COMM_SLOTS ago is done */
    atomic_store(&s->in, 0);
    atomic_store(&s->open_in, 0);
    atomic_store(&s->out, 0);
    atomic_store(&s->open_out, 0);
    atomic_store(&s->cancel, false);
    s->type = type;
    s->ne = ne;
    for (int j = 0; j < c->n; j++)
        s->data[j] = tensors[j]->data;
    atomic_store(&s->left, 0);
    c->next++;
    for (int j = 0; j < c->n; j++) {
        tsr_status st = tsr__cpu_stream_push_fn(c->streams[j], cpu_comm_job, &s->arg[j]);
        if (st != TSR_OK) {
            /* The jobs already queued must not wait for the missing ones:
             * open both gates with the sum cancelled; nothing was summed. */
            atomic_store(&s->cancel, true);
            atomic_fetch_add(&s->left, c->n - j);
            atomic_store(&s->open_in, 1);
            atomic_store(&s->open_out, 1);
            cpu_comm_wake(c);
            return st;
        }
    }
    return TSR_OK;
}

void tsr__cpu_comm_free(tsr_comm *comm)
{
    cpu_comm *c = (cpu_comm *)comm;
    if (!c)
        return;
    for (int s = 0; s < CPU_COMM_SLOTS; s++)
        cpu_comm_wait(c, &c->slots[s].left, c->n);
    cpu_comm_release(c);
}
