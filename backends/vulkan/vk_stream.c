/* backends/vulkan/vk_stream.c — Vulkan streams: command batches on the
 * device's queue, a timeline semaphore per stream, the staging ring of
 * asynchronous transfers, and waits on other streams or backends.
 *
 * Not the kernels (vk_ops*.c), pipelines (vk_pipeline.c) nor the backend
 * entries built on this (vk_backend.c).
 *
 * Design. Work is recorded into the stream's current command buffer and
 * submitted as one batch at the end of a graph, at an event record, a
 * synchronize, or every VK_FLUSH_DISPATCHES dispatches; batch k signals the
 * stream's timeline semaphore with value k, so an event is (stream, k) and
 * waiting is a semaphore wait — on the GPU for another stream of the same
 * device, on the host otherwise. Within a batch a barrier is recorded only
 * where a dispatch or copy touches memory that earlier work of the batch
 * wrote (or writes memory earlier work read): the written and read address
 * ranges since the last barrier are tracked. Each batch starts with a
 * barrier against earlier submissions and ends with one that makes its
 * writes visible to the host.
 *
 * Transfers go through a ring of host-visible memory that is reused as
 * batches complete: an upload copies the caller's bytes into the ring at
 * once and records a GPU copy; a download records the copy and its host
 * copy runs when the batch is seen complete (synchronize, an event wait,
 * or the ring needing the space) — "retiring".
 *
 * Waits that the GPU cannot do (an event of another backend, or a value
 * not yet submitted) gate the stream: later batches, and host copies from
 * another backend's memory, go to a waiter thread that performs them in
 * order once the wait is over, so the queue itself never blocks and the
 * caller never waits. The gate lifts when that queue drains.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/vk_impl.h"

enum {
    VK_SLOTS = 8,              /* command buffers per stream */
    VK_MAX_WAITS = 16,         /* semaphore waits per batch */
    VK_HZ = 64,                /* tracked ranges per barrier interval */
    VK_FLUSH_DISPATCHES = 512, /* dispatches per batch at most */
    VK_RING_MIN = 4u << 20,    /* first ring */
    VK_RING_MAX = 64u << 20,   /* largest ring; bigger transfers go in pieces */
    VK_ERRBUF = 64,
    VK_POLL_NS = 30000, /* a wait polls the timeline this long before sleeping */
};

typedef struct {
    char *v;
    size_t head, n, cap, esz;
} vk_fifo;

typedef struct {
    uint64_t value;
    char *dst;
    const char *src;
    size_t n;
} vk_hostcopy;

typedef struct {
    size_t start, end;
    uint64_t value;
} vk_ring_rec;

typedef enum { VK_JOB_WAIT_EVENT, VK_JOB_WAIT_VK, VK_JOB_HOSTCOPY, VK_JOB_SUBMIT } vk_job_kind;

typedef struct {
    vk_job_kind kind;
    tsr_event *event; /* WAIT_EVENT */
    bool own_event;
    vk_stream *other; /* WAIT_VK */
    uint64_t value;   /* WAIT_VK: the value; SUBMIT: the value signalled */
    char *dst;        /* HOSTCOPY */
    const char *src;
    size_t n;
    int slot; /* SUBMIT: command buffer, -1 for none */
    int n_waits;
    VkSemaphore waits[VK_MAX_WAITS];
    uint64_t wait_values[VK_MAX_WAITS];
} vk_job;

struct vk_stream {
    vk_device *d;
    char name[48];
    pthread_mutex_t lock;
    VkSemaphore tl;
    uint64_t flushed;           /* value of the last batch formed */
    _Atomic uint64_t submitted; /* value of the last batch handed to the queue */
    uint64_t retired;           /* host side of the work done up to here */
    bool lost;                  /* the device failed: waits return at once */

    VkCommandPool pool;
    VkCommandBuffer cbs[VK_SLOTS];
    uint64_t slot_value[VK_SLOTS];
    int cur; /* slot being recorded, -1 when none */
    bool dirty;
    uint32_t n_dispatch;
    VkPipeline bound;
    int n_waits;
    VkSemaphore waits[VK_MAX_WAITS];
    uint64_t wait_values[VK_MAX_WAITS];
    vk_range hz_w[VK_HZ], hz_r[VK_HZ];
    int n_hw, n_hr;

    vk_mem ring;
    size_t ring_head;
    vk_fifo recs; /* vk_ring_rec */
    vk_fifo hc;   /* vk_hostcopy */

    vk_mem errbuf; /* {flag, site, value} written by shaders */
    const tsr_tensor **sites;
    size_t n_sites, cap_sites;
    tsr_status err;
    char err_msg[512];

    vk_fifo jobs; /* vk_job */
    bool waiter_busy, has_waiter, quit;
    pthread_t waiter;
    pthread_cond_t cv, cv_done;
};

/* ---- small FIFOs ---------------------------------------------------------------------- */

static size_t fifo_size(const vk_fifo *f) { return f->n - f->head; }
static void *fifo_front(const vk_fifo *f)
{
    return f->n > f->head ? f->v + f->head * f->esz : NULL;
}
static void *fifo_at(const vk_fifo *f, size_t i) { return f->v + (f->head + i) * f->esz; }

static void fifo_pop(vk_fifo *f)
{
    if (++f->head == f->n)
        f->head = f->n = 0;
}

/* A new element at the back, or NULL when memory is exhausted. */
static void *fifo_push(vk_fifo *f)
{
    if (f->n == f->cap) {
        if (f->head > 0) {
            memmove(f->v, f->v + f->head * f->esz, (f->n - f->head) * f->esz);
            f->n -= f->head;
            f->head = 0;
        } else {
            const size_t cap = f->cap ? 2 * f->cap : 64;
            char *v = realloc(f->v, cap * f->esz);
            if (!v)
                return NULL;
            f->v = v;
            f->cap = cap;
        }
    }
    return f->v + f->n++ * f->esz;
}

/* ---- errors ---------------------------------------------------------------------------- */

static void fail_locked(vk_stream *s, tsr_status st, const char *msg)
{
    if (s->err == TSR_OK) {
        s->err = st;
        snprintf(s->err_msg, sizeof(s->err_msg), "%s", msg);
    }
}

static void fail_vk_locked(vk_stream *s, VkResult r, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "%s (%s): %s: %s", s->d->name, s->name, what, tsr__vk_result_str(r));
    fail_locked(s,
                r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                    ? TSR_ENOMEM
                    : TSR_EDEVICE,
                msg);
    if (r == VK_ERROR_DEVICE_LOST)
        s->lost = true;
}

static void oom_locked(vk_stream *s, const char *what)
{
    char msg[160];
    snprintf(msg, sizeof(msg), "%s (%s): out of host memory for %s", s->d->name, s->name, what);
    fail_locked(s, TSR_ENOMEM, msg);
}

/* ---- completion ----------------------------------------------------------------------- */

static uint64_t completed_locked(vk_stream *s)
{
    if (s->lost)
        return UINT64_MAX;
    uint64_t v = 0;
    VkResult r = VKF.vkGetSemaphoreCounterValue(s->d->dev, s->tl, &v);
    if (r != VK_SUCCESS) {
        fail_vk_locked(s, r, "vkGetSemaphoreCounterValue");
        s->lost = true;
        return UINT64_MAX;
    }
    return v;
}

/* Performs the host side of completed work: downloads' host copies, ring
 * space, command buffers. */
static void retire_locked(vk_stream *s)
{
    const uint64_t done = completed_locked(s);
    for (vk_hostcopy *h; (h = fifo_front(&s->hc)) && h->value <= done; fifo_pop(&s->hc))
        memcpy(h->dst, h->src, h->n);
    for (vk_ring_rec *r; (r = fifo_front(&s->recs)) && r->value <= done;)
        fifo_pop(&s->recs);
    if (fifo_size(&s->recs) == 0)
        s->ring_head = 0;
    s->retired = done;
}

/* Waits (the lock released meanwhile) until value v is complete, then
 * retires. v must have been flushed. */
static void wait_value_locked(vk_stream *s, uint64_t v)
{
    if (v == 0 || s->lost || s->retired >= v)
        return;
    if (completed_locked(s) < v) {
        /* Poll for a while before sleeping in the driver: the small batches
         * of a decode step finish within microseconds, and waking from
         * lavapipe's sleeping wait cost tens of µs (an all-reduce over CPU +
         * lavapipe of 4 KiB: 110 µs sleeping, 60-75 polling first). Each
         * poll yields, so the driver's own threads keep the cores. */
        pthread_mutex_unlock(&s->lock);
        const uint64_t t0 = tsr__time_ns();
        uint64_t cur = 0;
        while (VKF.vkGetSemaphoreCounterValue(s->d->dev, s->tl, &cur) == VK_SUCCESS && cur < v &&
               tsr__time_ns() - t0 < VK_POLL_NS)
            sched_yield();
        pthread_mutex_lock(&s->lock);
    }
    if (completed_locked(s) < v) {
        const VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                                        .semaphoreCount = 1,
                                        .pSemaphores = &s->tl,
                                        .pValues = &v};
        pthread_mutex_unlock(&s->lock);
        const VkResult r = VKF.vkWaitSemaphores(s->d->dev, &wi, UINT64_MAX);
        pthread_mutex_lock(&s->lock);
        if (r != VK_SUCCESS)
            fail_vk_locked(s, r, "vkWaitSemaphores");
        if (r == VK_ERROR_DEVICE_LOST)
            s->lost = true;
    }
    retire_locked(s);
}

/* ---- submission ------------------------------------------------------------------------ */

static void submit_locked(vk_stream *s, int slot, const VkSemaphore *waits,
                          const uint64_t *wait_values, int n_waits, uint64_t value)
{
    VkPipelineStageFlags stages[VK_MAX_WAITS];
    for (int i = 0; i < n_waits; i++)
        stages[i] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    const VkTimelineSemaphoreSubmitInfo ti = {.sType =
                                                  VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                              .waitSemaphoreValueCount = (uint32_t)n_waits,
                                              .pWaitSemaphoreValues = wait_values,
                                              .signalSemaphoreValueCount = 1,
                                              .pSignalSemaphoreValues = &value};
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .pNext = &ti,
                             .waitSemaphoreCount = (uint32_t)n_waits,
                             .pWaitSemaphores = waits,
                             .pWaitDstStageMask = stages,
                             .commandBufferCount = slot >= 0 ? 1u : 0u,
                             .pCommandBuffers = slot >= 0 ? &s->cbs[slot] : NULL,
                             .signalSemaphoreCount = 1,
                             .pSignalSemaphores = &s->tl};
    pthread_mutex_lock(&s->d->queue_lock);
    const VkResult r = VKF.vkQueueSubmit(s->d->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&s->d->queue_lock);
    if (r != VK_SUCCESS) {
        fail_vk_locked(s, r, "vkQueueSubmit");
        /* Nobody will signal this value: do it here so that waits end. */
        const VkSemaphoreSignalInfo sig = {
            .sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, .semaphore = s->tl, .value = value};
        if (VKF.vkSignalSemaphore(s->d->dev, &sig) != VK_SUCCESS)
            s->lost = true;
    }
    atomic_store(&s->submitted, value);
}

static bool gated_locked(const vk_stream *s) { return fifo_size(&s->jobs) > 0 || s->waiter_busy; }

static void *waiter_main(void *arg);

/* Queues a job for the waiter thread (started on first need). */
static void push_job_locked(vk_stream *s, const vk_job *job)
{
    vk_job *j = fifo_push(&s->jobs);
    if (!j) {
        oom_locked(s, "a queued wait");
        return;
    }
    *j = *job;
    s->dirty = true;
    if (!s->has_waiter) {
        if (pthread_create(&s->waiter, NULL, waiter_main, s) != 0) {
            fail_locked(s, TSR_EDEVICE, "vulkan: cannot start a stream's waiter thread");
            return;
        }
        s->has_waiter = true;
    }
    pthread_cond_signal(&s->cv);
}

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access)
{
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask =
                                    VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                .dstAccessMask = dst_access};
    VKF.vkCmdPipelineBarrier(cb,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             dst_stage, 0, 1, &mb, 0, NULL, 0, NULL);
}

static void device_barrier(VkCommandBuffer cb)
{
    barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                VK_ACCESS_TRANSFER_WRITE_BIT);
}

uint64_t tsr__vk_stream_flush_locked(vk_stream *s)
{
    if (!s->dirty)
        return s->flushed;
    const int slot = s->cur;
    if (slot >= 0) {
        barrier(s->cbs[slot], VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        const VkResult r = VKF.vkEndCommandBuffer(s->cbs[slot]);
        if (r != VK_SUCCESS)
            fail_vk_locked(s, r, "vkEndCommandBuffer");
    }
    const uint64_t value = ++s->flushed;
    if (slot >= 0)
        s->slot_value[slot] = value;
    s->cur = -1;
    s->dirty = false;
    if (gated_locked(s)) {
        vk_job j = {.kind = VK_JOB_SUBMIT, .slot = slot, .value = value, .n_waits = s->n_waits};
        memcpy(j.waits, s->waits, sizeof(s->waits));
        memcpy(j.wait_values, s->wait_values, sizeof(s->wait_values));
        push_job_locked(s, &j);
        s->dirty = false;
    } else {
        submit_locked(s, slot, s->waits, s->wait_values, s->n_waits, value);
    }
    s->n_waits = 0;
    return value;
}

/* The command buffer being recorded, begun when needed. */
static VkCommandBuffer cmd_locked(vk_stream *s)
{
    if (s->cur >= 0)
        return s->cbs[s->cur];
    int slot = -1;
    while (slot < 0) {
        retire_locked(s);
        int oldest = 0;
        for (int i = 0; i < VK_SLOTS; i++) {
            if (s->slot_value[i] <= s->retired) {
                slot = i;
                break;
            }
            if (s->slot_value[i] < s->slot_value[oldest])
                oldest = i;
        }
        if (slot < 0)
            wait_value_locked(s, s->slot_value[oldest]);
        if (slot < 0 && s->lost)
            slot = oldest;
    }
    VkCommandBuffer cb = s->cbs[slot];
    VKF.vkResetCommandBuffer(cb, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    const VkResult r = VKF.vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS)
        fail_vk_locked(s, r, "vkBeginCommandBuffer");
    /* Earlier batches of this stream may still run: order against them. */
    device_barrier(cb);
    s->cur = slot;
    s->slot_value[slot] = UINT64_MAX; /* in use until its batch is formed */
    s->dirty = true;
    s->n_dispatch = 0;
    s->bound = VK_NULL_HANDLE;
    s->n_hw = s->n_hr = 0;
    return cb;
}

/* ---- hazards ------------------------------------------------------------------------------ */

static bool overlaps(vk_range a, vk_range b) { return a.lo < b.hi && b.lo < a.hi; }

/* Records a barrier when the next command (reading `reads`, writing
 * `writes`) depends on memory that earlier commands since the last barrier
 * wrote or read. */
static void hazard_locked(vk_stream *s, VkCommandBuffer cb, const vk_range *reads, int n_reads,
                          const vk_range *writes, int n_writes)
{
    bool need = s->n_hr + n_reads > VK_HZ || s->n_hw + n_writes > VK_HZ;
    for (int i = 0; i < n_reads && !need; i++)
        for (int j = 0; j < s->n_hw && !need; j++)
            need = overlaps(reads[i], s->hz_w[j]);
    for (int i = 0; i < n_writes && !need; i++) {
        for (int j = 0; j < s->n_hw && !need; j++)
            need = overlaps(writes[i], s->hz_w[j]);
        for (int j = 0; j < s->n_hr && !need; j++)
            need = overlaps(writes[i], s->hz_r[j]);
    }
    if (need) {
        device_barrier(cb);
        s->n_hw = s->n_hr = 0;
    }
    for (int i = 0; i < n_reads; i++)
        if (reads[i].hi > reads[i].lo)
            s->hz_r[s->n_hr++] = reads[i];
    for (int i = 0; i < n_writes; i++)
        if (writes[i].hi > writes[i].lo)
            s->hz_w[s->n_hw++] = writes[i];
}

/* ---- the staging ring ---------------------------------------------------------------------- */

/* The largest piece a single ring allocation may take. */
static size_t ring_piece(const vk_stream *s)
{
    return (s->ring.size ? s->ring.size : VK_RING_MIN) / 2;
}

/* Makes sure the ring exists and, when it is smaller than the maximum,
 * grows it so that `want` bytes fit in one piece (after all its users are
 * done). */
static bool ring_ready_locked(vk_stream *s, size_t want)
{
    size_t size = s->ring.size ? s->ring.size : VK_RING_MIN;
    while (size / 2 < want && size < VK_RING_MAX)
        size *= 2;
    if (s->ring.buf && size == s->ring.size)
        return true;
    if (s->ring.buf) {
        wait_value_locked(s, tsr__vk_stream_flush_locked(s));
        tsr__vk_mem_free(s->d, &s->ring);
    }
    const tsr_status st = tsr__vk_mem_new(s->d, size, true, &s->ring);
    if (st != TSR_OK) {
        fail_locked(s, st, tsr_last_error());
        return false;
    }
    s->ring_head = 0;
    return true;
}

/* Reserves n bytes (n ≤ ring_piece) for the batch being recorded; returns
 * the offset in the ring. Waits for older batches to release space. */
static size_t ring_alloc_locked(vk_stream *s, size_t n)
{
    const size_t align = 64;
    for (;;) {
        const vk_ring_rec *old = fifo_front(&s->recs);
        size_t off = SIZE_MAX;
        if (!old) {
            off = 0;
        } else {
            const size_t tail = old->start;
            const size_t h = tsr__align_up(s->ring_head, align);
            if (s->ring_head >= tail) { /* used: [tail, head) */
                if (h + n <= s->ring.size)
                    off = h;
                else if (n < tail)
                    off = 0;
            } else if (h + n < tail) { /* used: [tail, end) and [0, head) */
                off = h;
            }
        }
        if (off != SIZE_MAX) {
            vk_ring_rec *r = fifo_push(&s->recs);
            if (r)
                *r = (vk_ring_rec){off, off + n, s->flushed + 1};
            else
                oom_locked(s, "ring records");
            s->ring_head = off + n;
            return off;
        }
        /* Wait for the oldest user; it may be the batch being recorded. */
        const uint64_t v = old->value;
        if (v > s->flushed)
            tsr__vk_stream_flush_locked(s);
        wait_value_locked(s, v);
        if (s->lost) { /* nothing will complete: reuse the ring blindly */
            while (fifo_size(&s->recs))
                fifo_pop(&s->recs);
            s->ring_head = 0;
        }
    }
}

/* ---- transfers ------------------------------------------------------------------------------ */

void tsr__vk_upload_locked(vk_stream *s, const vk_mem *dst, size_t off, const void *src, size_t n)
{
    const char *p = src;
    if (!ring_ready_locked(s, n))
        return;
    while (n > 0) {
        const size_t c = TSR_MIN(n, ring_piece(s));
        const size_t roff = ring_alloc_locked(s, c);
        memcpy((char *)s->ring.map + roff, p, c);
        VkCommandBuffer cb = cmd_locked(s);
        const vk_range w = {dst->addr + off, dst->addr + off + c};
        hazard_locked(s, cb, NULL, 0, &w, 1);
        const VkBufferCopy region = {roff, off, c};
        VKF.vkCmdCopyBuffer(cb, s->ring.buf, dst->buf, 1, &region);
        p += c;
        off += c;
        n -= c;
    }
}

void tsr__vk_download_locked(vk_stream *s, const vk_mem *src, size_t off, void *dst, size_t n)
{
    char *p = dst;
    if (!ring_ready_locked(s, n))
        return;
    while (n > 0) {
        const size_t c = TSR_MIN(n, ring_piece(s));
        const size_t roff = ring_alloc_locked(s, c);
        VkCommandBuffer cb = cmd_locked(s);
        const vk_range r = {src->addr + off, src->addr + off + c};
        hazard_locked(s, cb, &r, 1, NULL, 0);
        const VkBufferCopy region = {off, roff, c};
        VKF.vkCmdCopyBuffer(cb, src->buf, s->ring.buf, 1, &region);
        vk_hostcopy *h = fifo_push(&s->hc);
        if (h)
            *h = (vk_hostcopy){s->flushed + 1, p, (const char *)s->ring.map + roff, c};
        else
            oom_locked(s, "a download");
        p += c;
        off += c;
        n -= c;
    }
}

void tsr__vk_copy_locked(vk_stream *s, const vk_mem *src, size_t soff, const vk_mem *dst,
                         size_t doff, size_t n)
{
    VkCommandBuffer cb = cmd_locked(s);
    const vk_range r = {src->addr + soff, src->addr + soff + n};
    const vk_range w = {dst->addr + doff, dst->addr + doff + n};
    hazard_locked(s, cb, &r, 1, &w, 1);
    const VkBufferCopy region = {soff, doff, n};
    VKF.vkCmdCopyBuffer(cb, src->buf, dst->buf, 1, &region);
}

void tsr__vk_fill_locked(vk_stream *s, const vk_mem *dst, size_t off, size_t n, uint8_t value)
{
    /* vkCmdFillBuffer writes whole 4-byte words: the ragged ends (if any)
     * are uploaded. */
    size_t head = TSR_MIN(n, (4 - off % 4) % 4);
    const size_t body = (n - head) / 4 * 4;
    const size_t tail = n - head - body;
    const uint8_t bytes[4] = {value, value, value, value};
    if (head)
        tsr__vk_upload_locked(s, dst, off, bytes, head);
    if (body) {
        VkCommandBuffer cb = cmd_locked(s);
        const vk_range w = {dst->addr + off + head, dst->addr + off + head + body};
        hazard_locked(s, cb, NULL, 0, &w, 1);
        VKF.vkCmdFillBuffer(cb, dst->buf, off + head, body, value * 0x01010101u);
    }
    if (tail)
        tsr__vk_upload_locked(s, dst, off + head + body, bytes, tail);
}

/* ---- dispatches --------------------------------------------------------------------------- */

void tsr__vk_dispatch_locked(vk_stream *s, tsr__vk_shader_id id, const void *pc, size_t pc_size,
                             uint32_t gx, uint32_t gy, uint32_t gz, const vk_range *reads,
                             int n_reads, vk_range write, const VkDescriptorSet *texel_sets)
{
    if (gx == 0 || gy == 0 || gz == 0)
        return;
    VkCommandBuffer cb = cmd_locked(s);
    hazard_locked(s, cb, reads, n_reads, &write, 1);
    const VkPipeline p = s->d->pipes[id];
    if (s->bound != p) {
        VKF.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
        s->bound = p;
    }
    const VkPipelineLayout layout = texel_sets ? s->d->texel_layout : s->d->layout;
    if (texel_sets)
        VKF.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 2, texel_sets, 0,
                                    NULL);
    VKF.vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           (uint32_t)tsr__align_up(pc_size, 4), pc);
    VKF.vkCmdDispatch(cb, gx, gy, gz);
    if (++s->n_dispatch >= VK_FLUSH_DISPATCHES)
        tsr__vk_stream_flush_locked(s);
}

uint32_t tsr__vk_error_site_locked(vk_stream *s, const tsr_tensor *node, uint64_t *err_addr)
{
    *err_addr = s->errbuf.addr;
    /* Sites are forgotten once all work is done and no error is pending. */
    if (s->n_sites > 0 && completed_locked(s) >= s->flushed && s->cur < 0 &&
        ((volatile uint32_t *)s->errbuf.map)[0] == 0)
        s->n_sites = 0;
    if (s->n_sites == s->cap_sites) {
        const size_t cap = s->cap_sites ? 2 * s->cap_sites : 64;
        const tsr_tensor **v = realloc(s->sites, cap * sizeof(*v));
        if (!v) {
            oom_locked(s, "error sites");
            return 0;
        }
        s->sites = v;
        s->cap_sites = cap;
    }
    s->sites[s->n_sites++] = node;
    return (uint32_t)s->n_sites;
}

/* The message of a run-time error a shader reported for `node`. */
static void site_message(const tsr_tensor *n, int value, char *out, size_t size)
{
    long long limit = 0;
    const char *what = "index";
    switch (n->op) {
    case TSR_OP_GET_ROWS:
        limit = n->src[0]->ne[1];
        break;
    case TSR_OP_SET_ROWS:
        limit = n->ne[1];
        break;
    case TSR_OP_MUL_MAT_ID:
        limit = n->src[0]->ne[2];
        what = "expert";
        break;
    case TSR_OP_ADD_ID:
        limit = n->src[1]->ne[1];
        what = "expert";
        break;
    default:
        break;
    }
    snprintf(out, size, "%s '%s': %s %d outside [0, %lld)", tsr_op_name(n->op), n->name, what,
             value, limit);
}

/* ---- the waiter thread --------------------------------------------------------------------- */

static void *waiter_main(void *arg)
{
    vk_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (fifo_size(&s->jobs) == 0 && !s->quit)
            pthread_cond_wait(&s->cv, &s->lock);
        if (fifo_size(&s->jobs) == 0)
            break;
        const vk_job job = *(vk_job *)fifo_front(&s->jobs);
        fifo_pop(&s->jobs);
        s->waiter_busy = true;
        switch (job.kind) {
        case VK_JOB_SUBMIT:
            submit_locked(s, job.slot, job.waits, job.wait_values, job.n_waits, job.value);
            break;
        case VK_JOB_WAIT_EVENT: {
            pthread_mutex_unlock(&s->lock);
            const tsr_status st = tsr_event_synchronize(job.event);
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", st == TSR_OK ? "" : tsr_last_error());
            if (job.own_event)
                tsr_event_free(job.event);
            pthread_mutex_lock(&s->lock);
            if (st != TSR_OK)
                fail_locked(s, st, msg);
            break;
        }
        case VK_JOB_WAIT_VK:
            pthread_mutex_unlock(&s->lock);
            pthread_mutex_lock(&job.other->lock);
            wait_value_locked(job.other, job.value);
            pthread_mutex_unlock(&job.other->lock);
            pthread_mutex_lock(&s->lock);
            break;
        case VK_JOB_HOSTCOPY:
            pthread_mutex_unlock(&s->lock);
            memcpy(job.dst, job.src, job.n);
            pthread_mutex_lock(&s->lock);
            break;
        }
        s->waiter_busy = false;
        pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- streams ------------------------------------------------------------------------------ */

void tsr__vk_stream_lock(vk_stream *s) { pthread_mutex_lock(&s->lock); }
void tsr__vk_stream_unlock(vk_stream *s) { pthread_mutex_unlock(&s->lock); }

static void stream_destroy(vk_stream *s)
{
    vk_device *d = s->d;
    if (s->has_waiter) {
        pthread_mutex_lock(&s->lock);
        s->quit = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->waiter, NULL);
    }
    if (s->pool)
        VKF.vkDestroyCommandPool(d->dev, s->pool, NULL);
    if (s->tl)
        VKF.vkDestroySemaphore(d->dev, s->tl, NULL);
    tsr__vk_mem_free(d, &s->ring);
    tsr__vk_mem_free(d, &s->errbuf);
    free(s->recs.v);
    free(s->hc.v);
    free(s->jobs.v);
    free(s->sites);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->cv_done);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

tsr_status tsr__vk_stream_new(vk_device *d, const char *name, vk_stream **out)
{
    tsr_status st = tsr__vk_device_ready(d);
    if (st != TSR_OK)
        return st;
    vk_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return tsr__error(TSR_ENOMEM, "%s: stream object", d->name);
    s->d = d;
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->cur = -1;
    s->recs.esz = sizeof(vk_ring_rec);
    s->hc.esz = sizeof(vk_hostcopy);
    s->jobs.esz = sizeof(vk_job);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    const VkSemaphoreTypeCreateInfo sti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                           .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
    const VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                                       .pNext = &sti};
    VkResult r = VKF.vkCreateSemaphore(d->dev, &sci, NULL, &s->tl);
    if (r == VK_SUCCESS) {
        const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                             .flags =
                                                 VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                             .queueFamilyIndex = d->queue_family};
        r = VKF.vkCreateCommandPool(d->dev, &pci, NULL, &s->pool);
    }
    if (r == VK_SUCCESS) {
        const VkCommandBufferAllocateInfo cai = {.sType =
                                                     VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                                 .commandPool = s->pool,
                                                 .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                                 .commandBufferCount = VK_SLOTS};
        r = VKF.vkAllocateCommandBuffers(d->dev, &cai, s->cbs);
    }
    st = r == VK_SUCCESS ? TSR_OK : tsr__vk_fail(d, r, "creating stream '%s'", name);
    if (st == TSR_OK)
        st = tsr__vk_mem_new(d, VK_ERRBUF, true, &s->errbuf);
    if (st == TSR_OK) {
        memset(s->errbuf.map, 0, VK_ERRBUF);
        st = tsr__vk_validation_check();
    }
    pthread_mutex_lock(&d->streams_lock);
    if (st == TSR_OK && d->n_streams == d->cap_streams) {
        const size_t cap = d->cap_streams ? 2 * d->cap_streams : 16;
        vk_stream **v = realloc(d->streams, cap * sizeof(*v));
        if (v) {
            d->streams = v;
            d->cap_streams = cap;
        } else {
            st = tsr__error(TSR_ENOMEM, "%s: stream list", d->name);
        }
    }
    if (st == TSR_OK)
        d->streams[d->n_streams++] = s;
    pthread_mutex_unlock(&d->streams_lock);
    if (st != TSR_OK) {
        stream_destroy(s);
        return st;
    }
    *out = s;
    return TSR_OK;
}

tsr_status tsr__vk_stream_sync(vk_stream *s)
{
    pthread_mutex_lock(&s->lock);
    wait_value_locked(s, tsr__vk_stream_flush_locked(s));
    /* The waiter may still be running host copies of finished waits. */
    while (gated_locked(s))
        pthread_cond_wait(&s->cv_done, &s->lock);
    retire_locked(s);
    volatile uint32_t *e = s->errbuf.map;
    if (e[0] != 0) {
        const uint32_t site = e[1];
        char msg[256] = "a shader reported an error";
        if (site >= 1 && site <= s->n_sites)
            site_message(s->sites[site - 1], (int)e[2], msg, sizeof(msg));
        fail_locked(s, TSR_ERANGE, msg);
        e[0] = 0;
    }
    s->n_sites = 0;
    tsr_status st = s->err;
    if (st != TSR_OK) {
        tsr__error(st, "%s", s->err_msg);
        s->err = TSR_OK;
    }
    pthread_mutex_unlock(&s->lock);
    if (st == TSR_OK)
        st = tsr__vk_validation_check();
    return st;
}

void tsr__vk_stream_free(vk_stream *s)
{
    if (!s)
        return;
    tsr__vk_stream_sync(s);
    vk_device *d = s->d;
    pthread_mutex_lock(&d->streams_lock);
    for (size_t i = 0; i < d->n_streams; i++)
        if (d->streams[i] == s) {
            d->streams[i] = d->streams[--d->n_streams];
            break;
        }
    pthread_mutex_unlock(&d->streams_lock);
    stream_destroy(s);
}

tsr_status tsr__vk_device_drain(vk_device *d)
{
    pthread_mutex_lock(&d->streams_lock);
    for (size_t i = 0; i < d->n_streams; i++) {
        vk_stream *s = d->streams[i];
        pthread_mutex_lock(&s->lock);
        wait_value_locked(s, tsr__vk_stream_flush_locked(s));
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&d->streams_lock);
    return TSR_OK;
}

/* ---- waits and deferred uploads (for vk_backend.c) ---------------------------------------- */

vk_device *tsr__vk_stream_device(const vk_stream *s) { return s->d; }
const char *tsr__vk_stream_name(const vk_stream *s) { return s->name; }

void tsr__vk_settle_host_locked(vk_stream *s, const void *ptr, size_t n)
{
    const char *p = ptr;
    uint64_t need = 0;
    for (size_t i = 0; i < fifo_size(&s->hc); i++) {
        const vk_hostcopy *h = fifo_at(&s->hc, i);
        if (h->dst < p + n && p < h->dst + h->n)
            need = TSR_MAX(need, h->value);
    }
    if (need) {
        if (need > s->flushed)
            tsr__vk_stream_flush_locked(s);
        wait_value_locked(s, need);
        while (gated_locked(s))
            pthread_cond_wait(&s->cv_done, &s->lock);
    }
}

void tsr__vk_wait_stream_locked(vk_stream *s, vk_stream *o, uint64_t v)
{
    if (o == s || v == 0)
        return;
    if (o->d == s->d && atomic_load(&o->submitted) >= v) {
        for (int i = 0; i < s->n_waits; i++)
            if (s->waits[i] == o->tl) {
                s->wait_values[i] = TSR_MAX(s->wait_values[i], v);
                s->dirty = true;
                return;
            }
        if (s->n_waits == VK_MAX_WAITS)
            tsr__vk_stream_flush_locked(s);
        s->waits[s->n_waits] = o->tl;
        s->wait_values[s->n_waits++] = v;
        s->dirty = true;
        return;
    }
    const vk_job j = {.kind = VK_JOB_WAIT_VK, .other = o, .value = v};
    push_job_locked(s, &j);
}

void tsr__vk_wait_event_locked(vk_stream *s, tsr_event *e, bool own)
{
    const vk_job j = {.kind = VK_JOB_WAIT_EVENT, .event = e, .own_event = own};
    push_job_locked(s, &j);
}

void tsr__vk_upload_deferred_locked(vk_stream *s, const vk_mem *dst, size_t off, const void *src,
                                    size_t n)
{
    const char *p = src;
    if (!ring_ready_locked(s, n))
        return;
    while (n > 0) {
        const size_t c = TSR_MIN(n, ring_piece(s));
        const size_t roff = ring_alloc_locked(s, c);
        const vk_job hc = {
            .kind = VK_JOB_HOSTCOPY, .dst = (char *)s->ring.map + roff, .src = p, .n = c};
        push_job_locked(s, &hc);
        VkCommandBuffer cb = cmd_locked(s);
        const vk_range w = {dst->addr + off, dst->addr + off + c};
        hazard_locked(s, cb, NULL, 0, &w, 1);
        const VkBufferCopy region = {roff, off, c};
        VKF.vkCmdCopyBuffer(cb, s->ring.buf, dst->buf, 1, &region);
        p += c;
        off += c;
        n -= c;
    }
}

tsr_status tsr__vk_stream_wait(vk_stream *s, uint64_t v)
{
    pthread_mutex_lock(&s->lock);
    wait_value_locked(s, v);
    const bool lost = s->lost;
    pthread_mutex_unlock(&s->lock);
    if (lost)
        return tsr__error(TSR_EDEVICE, "%s: the device was lost", s->d->name);
    return TSR_OK;
}
