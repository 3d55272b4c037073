/* backends/cpu/cpu_backend.c — the CPU registry, devices, buffer type,
 * buffers, streams and events: the common interface filled for host memory.
 *
 * Not the kernels (cpu_ops*.c, cpu_mm*.c) nor the queue (cpu_stream.c).
 * Every CPU device uses host memory, so a CPU stream can read any host
 * buffer, and copies between CPU devices are a memcpy queued on the
 * destination stream behind a wait on the source stream; copies from other
 * devices and waits on their events are in cpu_xcopy.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_comm.h"
#include "backends/cpu/cpu_impl.h"

#define CPU_MAX_DEVICES 64
#define CPU_ALIGN 64

typedef struct {
    char name[24];
    char desc[160];
    int index;
    int n_threads; /* default thread share */
} cpu_dev_ctx;

typedef struct {
    cpu_stream *stream;
    cpu_xpool *xpool; /* records of copies from other backends */
    char name[32];
} cpu_backend_ctx;

typedef struct {
    cpu_stream *stream; /* NULL: never recorded */
    uint64_t ticket;
} cpu_event_ctx;

static const struct tsr_dev_i cpu_dev_iface;
static const struct tsr_buft_i cpu_buft_iface;
static const struct tsr_buf_i cpu_buf_iface;
static const struct tsr_backend_i cpu_backend_iface;

static tsr_reg cpu_reg;
static tsr_dev cpu_devs[CPU_MAX_DEVICES];
static cpu_dev_ctx cpu_dev_ctxs[CPU_MAX_DEVICES];
static tsr_buft cpu_bufts[CPU_MAX_DEVICES];
static size_t cpu_n_devs;

/* ---- buffers ---------------------------------------------------------------------------- */

static void cpu_buf_free(tsr_buf *buf)
{
    free(buf->context);
    free(buf);
}

static void *cpu_buf_base(tsr_buf *buf) { return buf->context; }

static tsr_status cpu_buf_set(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                              size_t size)
{
    (void)buf;
    memcpy((char *)t->data + offset, data, size);
    return TSR_OK;
}

static tsr_status cpu_buf_get(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                              size_t size)
{
    (void)buf;
    memcpy(data, (const char *)t->data + offset, size);
    return TSR_OK;
}

static tsr_status cpu_buf_set_2d(tsr_buf *buf, tsr_tensor *t, const void *data, size_t offset,
                                 size_t row_size, size_t n_rows, size_t t_stride,
                                 size_t data_stride)
{
    (void)buf;
    for (size_t i = 0; i < n_rows; i++)
        memcpy((char *)t->data + offset + i * t_stride, (const char *)data + i * data_stride,
               row_size);
    return TSR_OK;
}

static tsr_status cpu_buf_get_2d(tsr_buf *buf, const tsr_tensor *t, void *data, size_t offset,
                                 size_t row_size, size_t n_rows, size_t t_stride,
                                 size_t data_stride)
{
    (void)buf;
    for (size_t i = 0; i < n_rows; i++)
        memcpy((char *)data + i * data_stride, (const char *)t->data + offset + i * t_stride,
               row_size);
    return TSR_OK;
}

static tsr_status cpu_buf_memset(tsr_buf *buf, tsr_tensor *t, uint8_t value, size_t offset,
                                 size_t size)
{
    (void)buf;
    memset((char *)t->data + offset, value, size);
    return TSR_OK;
}

static tsr_status cpu_buf_cpy(tsr_buf *buf, const tsr_tensor *src, tsr_tensor *dst)
{
    (void)buf;
    if (!tsr_buf_is_host(src->buffer))
        return TSR_ENOTHANDLED;
    memcpy(dst->data, src->data, tsr_nbytes(src));
    return TSR_OK;
}

static tsr_status cpu_buf_clear(tsr_buf *buf, uint8_t value)
{
    memset(buf->context, value, buf->size);
    return TSR_OK;
}

static const struct tsr_buf_i cpu_buf_iface = {
    .free = cpu_buf_free,
    .get_base = cpu_buf_base,
    .set_tensor = cpu_buf_set,
    .get_tensor = cpu_buf_get,
    .set_tensor_2d = cpu_buf_set_2d,
    .get_tensor_2d = cpu_buf_get_2d,
    .memset_tensor = cpu_buf_memset,
    .cpy_tensor = cpu_buf_cpy,
    .clear = cpu_buf_clear,
};

/* ---- buffer type ------------------------------------------------------------------------ */

static const char *cpu_buft_name(tsr_buft *buft)
{
    return ((cpu_dev_ctx *)buft->dev->context)->name;
}

static tsr_status cpu_buft_alloc(tsr_buft *buft, size_t size, tsr_buf **out)
{
    void *mem = NULL;
    size_t rounded = tsr__align_up(size, CPU_ALIGN);
    if (rounded < size || posix_memalign(&mem, CPU_ALIGN, rounded) != 0)
        return tsr__error(TSR_ENOMEM, "%s: cannot allocate %zu bytes", cpu_buft_name(buft), size);
    tsr_buf *buf = calloc(1, sizeof(*buf));
    if (!buf) {
        free(mem);
        return tsr__error(TSR_ENOMEM, "%s: buffer object", cpu_buft_name(buft));
    }
    buf->iface = &cpu_buf_iface;
    buf->context = mem;
    *out = buf;
    return TSR_OK;
}

static size_t cpu_buft_alignment(tsr_buft *buft)
{
    (void)buft;
    return CPU_ALIGN;
}

static bool cpu_buft_is_host(tsr_buft *buft)
{
    (void)buft;
    return true;
}

static const struct tsr_buft_i cpu_buft_iface = {
    .get_name = cpu_buft_name,
    .alloc = cpu_buft_alloc,
    .get_alignment = cpu_buft_alignment,
    .is_host = cpu_buft_is_host,
};

/* ---- streams ---------------------------------------------------------------------------- */

static cpu_stream *stream_of(tsr_backend *b) { return ((cpu_backend_ctx *)b->context)->stream; }

bool tsr_backend_is_cpu(tsr_backend *backend)
{
    return backend && backend->iface == &cpu_backend_iface;
}

cpu_stream *tsr__cpu_backend_stream(tsr_backend *backend)
{
    return tsr_backend_is_cpu(backend) ? stream_of(backend) : NULL;
}

static const char *cpu_backend_name(tsr_backend *b)
{
    return ((cpu_backend_ctx *)b->context)->name;
}

static void cpu_backend_free(tsr_backend *b)
{
    cpu_backend_ctx *bc = b->context;
    tsr__cpu_stream_free(bc->stream); /* runs every queued copy first */
    tsr__cpu_xpool_free(bc->xpool);
    free(b->context);
    free(b);
}

static tsr_status push_copy(tsr_backend *b, char *dst, const char *src, size_t row_size,
                            size_t n_rows, size_t dst_stride, size_t src_stride)
{
    cpu_job job = {.kind = CPU_JOB_COPY};
    job.u.copy.dst = dst;
    job.u.copy.src = src;
    job.u.copy.row_size = row_size;
    job.u.copy.n_rows = n_rows;
    job.u.copy.dst_stride = dst_stride;
    job.u.copy.src_stride = src_stride;
    return tsr__cpu_stream_push(stream_of(b), &job);
}

/* Async entries on a CPU stream need the tensor in host memory. */
static bool host_tensor(const tsr_tensor *t) { return tsr_buf_is_host(t->buffer); }

static tsr_status cpu_set_async(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                                size_t size)
{
    if (!host_tensor(t))
        return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in host memory",
                          cpu_backend_name(b), t->name);
    return push_copy(b, (char *)t->data + offset, data, size, 1, size, size);
}

static tsr_status cpu_get_async(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                                size_t size)
{
    if (!host_tensor(t))
        return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in host memory",
                          cpu_backend_name(b), t->name);
    return push_copy(b, data, (const char *)t->data + offset, size, 1, size, size);
}

static tsr_status cpu_set_2d_async(tsr_backend *b, tsr_tensor *t, const void *data, size_t offset,
                                   size_t row_size, size_t n_rows, size_t t_stride,
                                   size_t data_stride)
{
    if (!host_tensor(t))
        return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in host memory",
                          cpu_backend_name(b), t->name);
    return push_copy(b, (char *)t->data + offset, data, row_size, n_rows, t_stride, data_stride);
}

static tsr_status cpu_get_2d_async(tsr_backend *b, const tsr_tensor *t, void *data, size_t offset,
                                   size_t row_size, size_t n_rows, size_t t_stride,
                                   size_t data_stride)
{
    if (!host_tensor(t))
        return tsr__error(TSR_EUNSUPPORTED, "%s: tensor '%s' is not in host memory",
                          cpu_backend_name(b), t->name);
    return push_copy(b, data, (const char *)t->data + offset, row_size, n_rows, data_stride,
                     t_stride);
}

/* CPU → CPU: the destination stream waits for the source stream's queued
 * work, then copies. Another backend's device → host memory: cpu_xcopy.c.
 * Anything else goes through core's fallback. */
static tsr_status cpu_cpy_async(tsr_backend *src_b, tsr_backend *dst_b, const tsr_tensor *src,
                                tsr_tensor *dst)
{
    if (!host_tensor(dst))
        return TSR_ENOTHANDLED;
    if (!tsr_backend_is_cpu(src_b)) {
        if (host_tensor(src) || !tsr__cpu_xcopy_handles(src_b, src))
            return TSR_ENOTHANDLED;
        cpu_backend_ctx *bc = dst_b->context;
        return tsr__cpu_xcopy_push(bc->xpool, bc->stream, src_b, src, dst->data, tsr_nbytes(src));
    }
    if (!host_tensor(src))
        return TSR_ENOTHANDLED;
    tsr_status st;
    if (src_b != dst_b) {
        cpu_job wait = {.kind = CPU_JOB_WAIT_STREAM};
        wait.u.wait.stream = stream_of(src_b);
        wait.u.wait.ticket = tsr__cpu_stream_ticket(stream_of(src_b));
        if ((st = tsr__cpu_stream_push(stream_of(dst_b), &wait)) != TSR_OK)
            return st;
    }
    const size_t n = tsr_nbytes(src);
    return push_copy(dst_b, dst->data, src->data, n, 1, n, n);
}

static tsr_status cpu_graph_compute(tsr_backend *b, tsr_graph *g)
{
    for (size_t i = 0; i < tsr_graph_n_nodes(g); i++) {
        const tsr_tensor *n = tsr_graph_node(g, i);
        if (n->buffer && !host_tensor(n))
            return tsr__error(TSR_EUNSUPPORTED, "%s: node '%s' is not in host memory",
                              cpu_backend_name(b), n->name);
    }
    cpu_job job = {.kind = CPU_JOB_GRAPH};
    job.u.graph = g;
    return tsr__cpu_stream_push(stream_of(b), &job);
}

static tsr_status cpu_synchronize(tsr_backend *b) { return tsr__cpu_stream_sync(stream_of(b)); }

static tsr_status cpu_event_record(tsr_backend *b, tsr_event *e)
{
    cpu_event_ctx *ec = e->context;
    ec->stream = stream_of(b);
    ec->ticket = tsr__cpu_stream_ticket(ec->stream);
    return TSR_OK;
}

static bool is_cpu_event(const tsr_event *e) { return e->dev->iface == &cpu_dev_iface; }

static tsr_status cpu_event_wait(tsr_backend *b, tsr_event *e)
{
    cpu_job job;
    if (is_cpu_event(e)) {
        const cpu_event_ctx *ec = e->context;
        if (!ec->stream)
            return TSR_OK;
        job.kind = CPU_JOB_WAIT_STREAM;
        job.u.wait.stream = ec->stream;
        job.u.wait.ticket = ec->ticket;
    } else {
        /* A copy of the event's mark, so re-recording it later does not
         * move this wait; devices that cannot copy marks are waited on
         * through the event itself. */
        cpu_backend_ctx *bc = b->context;
        tsr_status st = tsr__cpu_xwait_push(bc->xpool, bc->stream, e);
        if (st != TSR_ENOTHANDLED)
            return st;
        job.kind = CPU_JOB_WAIT_EVENT;
        job.u.event = e;
    }
    return tsr__cpu_stream_push(stream_of(b), &job);
}

static const struct tsr_backend_i cpu_backend_iface = {
    .get_name = cpu_backend_name,
    .free = cpu_backend_free,
    .set_tensor_async = cpu_set_async,
    .get_tensor_async = cpu_get_async,
    .set_tensor_2d_async = cpu_set_2d_async,
    .get_tensor_2d_async = cpu_get_2d_async,
    .cpy_tensor_async = cpu_cpy_async,
    .graph_compute = cpu_graph_compute,
    .synchronize = cpu_synchronize,
    .event_record = cpu_event_record,
    .event_wait = cpu_event_wait,
};

/* ---- devices ------------------------------------------------------------------------------ */

static const char *cpu_dev_name(tsr_dev *d) { return ((cpu_dev_ctx *)d->context)->name; }
static const char *cpu_dev_desc(tsr_dev *d) { return ((cpu_dev_ctx *)d->context)->desc; }

static tsr_dev_type cpu_dev_type(tsr_dev *d)
{
    (void)d;
    return TSR_DEV_CPU;
}

/* MemAvailable / MemTotal from /proc/meminfo, shared out among the devices. */
static void cpu_dev_memory(tsr_dev *d, size_t *free_bytes, size_t *total_bytes)
{
    (void)d;
    unsigned long long total_kb = 0, avail_kb = 0, v;
    char key[64];
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fscanf(f, "%63s %llu kB", key, &v) == 2) {
            if (strcmp(key, "MemTotal:") == 0)
                total_kb = v;
            else if (strcmp(key, "MemAvailable:") == 0)
                avail_kb = v;
        }
        fclose(f);
    }
    const size_t n = cpu_n_devs ? cpu_n_devs : 1;
    *total_bytes = (size_t)(total_kb * 1024 / n);
    *free_bytes = (size_t)(avail_kb * 1024 / n);
}

static tsr_dev_caps cpu_dev_caps(tsr_dev *d)
{
    (void)d;
    return (tsr_dev_caps){.async = true, .events = true, .host_buffer = false};
}

static tsr_buft *cpu_dev_buft(tsr_dev *d) { return &cpu_bufts[((cpu_dev_ctx *)d->context)->index]; }

static bool cpu_dev_supports_op(tsr_dev *d, const tsr_tensor *op)
{
    (void)d;
    /* Every op the constructors accept has a CPU kernel. */
    return (int)op->op > TSR_OP_NONE && op->op < TSR_OP_COUNT;
}

static bool cpu_dev_supports_buft(tsr_dev *d, tsr_buft *buft)
{
    (void)d;
    return tsr_buft_is_host(buft);
}

static tsr_status cpu_dev_backend_new(tsr_dev *d, tsr_backend **out)
{
    cpu_dev_ctx *dc = d->context;
    tsr_backend *b = calloc(1, sizeof(*b));
    cpu_backend_ctx *bc = calloc(1, sizeof(*bc));
    if (!b || !bc) {
        free(b);
        free(bc);
        return tsr__error(TSR_ENOMEM, "%s: stream objects", dc->name);
    }
    snprintf(bc->name, sizeof(bc->name), "%s", dc->name);
    tsr_status st = tsr__cpu_xpool_new(&bc->xpool);
    if (st == TSR_OK && (st = tsr__cpu_stream_new(dc->name, dc->n_threads, &bc->stream)) != TSR_OK)
        tsr__cpu_xpool_free(bc->xpool);
    if (st != TSR_OK) {
        free(b);
        free(bc);
        return st;
    }
    b->iface = &cpu_backend_iface;
    b->dev = d;
    b->context = bc;
    *out = b;
    return TSR_OK;
}

static tsr_status cpu_dev_event_new(tsr_dev *d, tsr_event **out)
{
    tsr_event *e = calloc(1, sizeof(*e));
    cpu_event_ctx *ec = calloc(1, sizeof(*ec));
    if (!e || !ec) {
        free(e);
        free(ec);
        return tsr__error(TSR_ENOMEM, "%s: event", cpu_dev_name(d));
    }
    e->dev = d;
    e->context = ec;
    *out = e;
    return TSR_OK;
}

static void cpu_dev_event_free(tsr_dev *d, tsr_event *e)
{
    (void)d;
    free(e->context);
    free(e);
}

static tsr_status cpu_dev_event_sync(tsr_dev *d, tsr_event *e)
{
    (void)d;
    const cpu_event_ctx *ec = e->context;
    if (ec->stream)
        tsr__cpu_stream_wait(ec->stream, ec->ticket);
    return TSR_OK;
}

static tsr_status cpu_dev_event_copy(tsr_dev *d, tsr_event *dst, const tsr_event *src)
{
    (void)d;
    *(cpu_event_ctx *)dst->context = *(const cpu_event_ctx *)src->context;
    return TSR_OK;
}

static const struct tsr_dev_i cpu_dev_iface = {
    .get_name = cpu_dev_name,
    .get_description = cpu_dev_desc,
    .get_type = cpu_dev_type,
    .get_memory = cpu_dev_memory,
    .get_caps = cpu_dev_caps,
    .get_buft = cpu_dev_buft,
    .supports_op = cpu_dev_supports_op,
    .supports_buft = cpu_dev_supports_buft,
    .backend_new = cpu_dev_backend_new,
    .event_new = cpu_dev_event_new,
    .event_free = cpu_dev_event_free,
    .event_synchronize = cpu_dev_event_sync,
    .event_copy = cpu_dev_event_copy,
};

/* ---- registry ------------------------------------------------------------------------------ */

static const char *cpu_reg_name(tsr_reg *r)
{
    (void)r;
    return "cpu";
}

static size_t cpu_reg_dev_count(tsr_reg *r)
{
    (void)r;
    return cpu_n_devs;
}

static tsr_dev *cpu_reg_dev(tsr_reg *r, size_t i)
{
    (void)r;
    return &cpu_devs[i];
}

static void *cpu_reg_get_proc(tsr_reg *r, const char *name)
{
    (void)r;
    if (strcmp(name, "tsr_cpu_set_n_threads") == 0)
        return (void *)(tsr_cpu_set_n_threads_fn)tsr_cpu_set_n_threads;
    if (strcmp(name, "tsr_cpu_set_reference") == 0)
        return (void *)(tsr_cpu_set_reference_fn)tsr_cpu_set_reference;
    /* The native all-reduce (cpu_comm.c). */
    if (strcmp(name, "tsr_comm_init") == 0)
        return (void *)(tsr_comm_init_fn)tsr__cpu_comm_init;
    if (strcmp(name, "tsr_comm_allreduce") == 0)
        return (void *)(tsr_comm_allreduce_fn)tsr__cpu_comm_allreduce;
    if (strcmp(name, "tsr_comm_free") == 0)
        return (void *)(tsr_comm_free_fn)tsr__cpu_comm_free;
    return NULL;
}

static const struct tsr_reg_i cpu_reg_iface = {
    .get_name = cpu_reg_name,
    .get_dev_count = cpu_reg_dev_count,
    .get_dev = cpu_reg_dev,
    .get_proc = cpu_reg_get_proc,
};

static void cpu_model_name(char *out, size_t size)
{
    snprintf(out, size, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                snprintf(out, size, "%s", colon + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_reg_init(void)
{
    long want = tsr__env_long("TSR_CPU_DEVICES", 1);
    if (want < 1 || want > CPU_MAX_DEVICES) {
        TSR_LOG_W("TSR_CPU_DEVICES=%ld is outside 1..%d; using 1", want, CPU_MAX_DEVICES);
        want = 1;
    }
    const int cores = tsr__n_cores();
    char model[96];
    cpu_model_name(model, sizeof(model));
    cpu_n_devs = (size_t)want;
    for (size_t i = 0; i < cpu_n_devs; i++) {
        cpu_dev_ctx *c = &cpu_dev_ctxs[i];
        c->index = (int)i;
        /* Even share; the first (cores % n) devices take one extra core. */
        c->n_threads = cores / (int)want + ((int)i < cores % (int)want ? 1 : 0);
        if (c->n_threads < 1)
            c->n_threads = 1;
        snprintf(c->name, sizeof(c->name), "cpu%zu", i);
        snprintf(c->desc, sizeof(c->desc), "%s (%d of %d cores)", model, c->n_threads, cores);
        cpu_devs[i] = (tsr_dev){.iface = &cpu_dev_iface, .reg = &cpu_reg, .context = c};
        cpu_bufts[i] = (tsr_buft){.iface = &cpu_buft_iface, .dev = &cpu_devs[i]};
    }
    cpu_reg = (tsr_reg){.iface = &cpu_reg_iface};
}

tsr_reg *tsr_cpu_reg(void)
{
    pthread_once(&cpu_once, cpu_reg_init);
    return &cpu_reg;
}

/* ---- extensions ------------------------------------------------------------------------------ */

tsr_status tsr_cpu_set_n_threads(tsr_backend *backend, int n_threads)
{
    if (!tsr_backend_is_cpu(backend))
        return tsr__error(TSR_EINVAL, "cpu_set_n_threads: not a CPU stream");
    if (n_threads < 1 || n_threads > 256)
        return tsr__error(TSR_EINVAL, "cpu_set_n_threads: %d threads (1..256 allowed)", n_threads);
    return tsr__cpu_stream_set_threads(stream_of(backend), n_threads);
}

int tsr_cpu_get_n_threads(tsr_backend *backend)
{
    return tsr_backend_is_cpu(backend) ? tsr__cpu_stream_threads(stream_of(backend)) : 0;
}

tsr_status tsr_cpu_set_reference(tsr_backend *backend, bool reference)
{
    if (!tsr_backend_is_cpu(backend))
        return tsr__error(TSR_EINVAL, "cpu_set_reference: not a CPU stream");
    tsr__cpu_stream_set_reference(stream_of(backend), reference);
    return TSR_OK;
}
