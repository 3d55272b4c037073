/* comm/allreduce.c — the all-reduce engine of tessera/comm.h: argument
 * checks, the choice of path (the backend's native collective, else the
 * generic butterfly or ring of comm/ar_paths.c), the temporaries, and the
 * per-call state that lets collectives be enqueued back to back.
 *
 * Not the algorithms themselves (ar_paths.c) nor any backend's collective
 * (those are found through the registry, e.g. backends/cpu/cpu_comm.c).
 * Key design choice: nothing is allocated per call once warm. Temporaries
 * are one buffer per device, grown to the largest need seen; the tensor
 * metadata and one-node graphs of a call live in one of AR_SLOTS slots that
 * are reset, not freed, and a slot is reused only after the events recorded
 * at the end of its previous call have fired, so up to AR_SLOTS generic
 * collectives can be in flight before an enqueue waits.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/ar_impl.h"

/* Auto, no native path: butterfly below these sizes, ring at or above.
 * Crossovers measured by bench_comm on CPU streams (2-core machine, one
 * worker thread per device), butterfly vs ring latency in µs.
 * Direct mode (the two-shot ring, two synchronization points):
 *   2 streams:   4 KiB  4.9 vs 5.3     16 KiB  5.5 vs 5.3
 *   3 streams:   4 KiB  8.5 vs 7.1     16 KiB 12.9 vs 7.3
 *   4 streams:   4 KiB 14.4 vs 16.5    16 KiB 18.6 vs 16.5
 * Copies only (TSR_ALLREDUCE_DIRECT=0; the stepwise ring):
 *   2 streams:  64 KiB  9.3 vs 12.0   256 KiB 21.5 vs 21.2    1 MiB  67 vs 46
 *   3 streams: 256 KiB 36.7 vs 41.1     1 MiB  177 vs 126
 *   4 streams: 256 KiB 56.8 vs 113      1 MiB  537 vs 241
 * Beyond 4 streams (not measured here: more devices than cores) the
 * 4-stream thresholds are kept. */
static size_t ar_ring_threshold(int n, bool direct)
{
    if (direct)
        return (size_t)16 << 10;
    return n <= 2 ? (size_t)256 << 10 : (size_t)512 << 10;
}

const char *tsr_allreduce_path_name(tsr_allreduce_path path)
{
    switch (path) {
    case TSR_ALLREDUCE_AUTO:
        return "auto";
    case TSR_ALLREDUCE_NATIVE:
        return "native";
    case TSR_ALLREDUCE_BUTTERFLY:
        return "butterfly";
    case TSR_ALLREDUCE_RING:
        return "ring";
    }
    return "?";
}

/* TSR_ALLREDUCE=auto|native|butterfly|ring ("nccl" and "internal", the CUDA
 * names of DESIGN.md, mean native). */
static tsr_allreduce_path ar_env_path(void)
{
    const char *v = getenv("TSR_ALLREDUCE");
    if (!v || !*v || strcasecmp(v, "auto") == 0)
        return TSR_ALLREDUCE_AUTO;
    if (strcasecmp(v, "native") == 0 || strcasecmp(v, "nccl") == 0 ||
        strcasecmp(v, "internal") == 0)
        return TSR_ALLREDUCE_NATIVE;
    if (strcasecmp(v, "butterfly") == 0)
        return TSR_ALLREDUCE_BUTTERFLY;
    if (strcasecmp(v, "ring") == 0)
        return TSR_ALLREDUCE_RING;
    TSR_LOG_W("TSR_ALLREDUCE=%s is not auto|native|butterfly|ring; using auto", v);
    return TSR_ALLREDUCE_AUTO;
}

/* ---- slots ------------------------------------------------------------------------------- */

static void ar_slot_release(ar_slot *s)
{
    tsr_ctx_free(s->ctx);
    for (size_t i = 0; s->graphs && i < s->n_graphs; i++)
        tsr_graph_free(s->graphs[i]);
    free(s->graphs);
    for (int j = 0; j < AR_MAX; j++) {
        tsr_event_free(s->ev_step[j]);
        tsr_event_free(s->ev_end[j]);
        tsr_event_free(s->ev_done[j]);
    }
    memset(s, 0, sizeof(*s));
}

/* Room for the largest call of any path over n streams: the copy-based ring
 * makes n(n-1) ADD graphs and 6 tensors per (step, device); the direct ring
 * n graphs of up to AR_BLOCKS(n) blocks of 3n - 2 tensors and 2(n - 1)
 * nodes; the butterfly fewer. */
static tsr_status ar_slot_init(tsr_allreduce *ar, ar_slot *s)
{
    const size_t n = (size_t)ar->n, blocks = (size_t)AR_BLOCKS(ar->n);
    s->ctx = tsr_ctx_new(6 * n * n + n * blocks * (3 * n) + 8 * n + 16);
    s->n_graphs = TSR_MAX(n * (n - 1), n * 4);
    s->graphs = calloc(s->n_graphs, sizeof(*s->graphs));
    if (!s->ctx || !s->graphs)
        return tsr__error(TSR_ENOMEM, "allreduce: per-call state for %zu streams", n);
    for (size_t i = 0; i < s->n_graphs; i++)
        if (!(s->graphs[i] = tsr_graph_new(2 * n * blocks + 4))) /* direct ring's */
            return tsr__error(TSR_ENOMEM, "allreduce: ADD graphs");
    for (int j = 0; j < ar->n; j++) {
        tsr_status st;
        if ((st = tsr_event_new(ar->dev[j], &s->ev_step[j])) != TSR_OK ||
            (st = tsr_event_new(ar->dev[j], &s->ev_end[j])) != TSR_OK ||
            (st = tsr_event_new(ar->dev[j], &s->ev_done[j])) != TSR_OK)
            return st;
    }
    return TSR_OK;
}

/* Waits until the slot's previous call has run on every stream. */
static tsr_status ar_slot_wait(tsr_allreduce *ar, ar_slot *s)
{
    if (!s->pending)
        return TSR_OK;
    for (int j = 0; j < ar->n; j++) {
        tsr_status st = tsr_event_synchronize(s->ev_done[j]);
        if (st != TSR_OK)
            return st;
    }
    s->pending = false;
    return TSR_OK;
}

static tsr_status ar_wait_all(tsr_allreduce *ar)
{
    for (int i = 0; i < AR_SLOTS; i++) {
        tsr_status st = ar_slot_wait(ar, &ar->slots[i]);
        if (st != TSR_OK)
            return st;
    }
    return TSR_OK;
}

/* ---- engine -------------------------------------------------------------------------------- */

void tsr_allreduce_free(tsr_allreduce *ar)
{
    if (!ar)
        return;
    ar_wait_all(ar);
    if (ar->comm)
        ar->native_free(ar->comm);
    for (int j = 0; j < ar->n; j++)
        tsr_buf_free(ar->tmp[j]);
    for (int i = 0; i < AR_SLOTS; i++)
        ar_slot_release(&ar->slots[i]);
    free(ar);
}

/* Asks the first stream's registry for a collective over these streams. */
static void ar_find_native(tsr_allreduce *ar)
{
    tsr_reg *reg = tsr_dev_reg(ar->dev[0]);
    tsr_comm_init_fn init = (tsr_comm_init_fn)tsr_reg_get_proc(reg, "tsr_comm_init");
    if (!init)
        return;
    tsr_comm *comm = init(ar->b, ar->n);
    if (!comm)
        return;
    tsr_comm_allreduce_fn run = (tsr_comm_allreduce_fn)tsr_reg_get_proc(reg, "tsr_comm_allreduce");
    tsr_comm_free_fn fr = (tsr_comm_free_fn)tsr_reg_get_proc(reg, "tsr_comm_free");
    if (!run || !fr) {
        TSR_LOG_W("allreduce: registry %s has tsr_comm_init but not tsr_comm_allreduce / "
                  "tsr_comm_free; its collective is not used",
                  tsr_reg_name(reg));
        if (fr)
            fr(comm);
        return;
    }
    ar->comm = comm;
    ar->native = run;
    ar->native_free = fr;
}

tsr_status tsr_allreduce_new(tsr_backend *const *backends, int n, tsr_allreduce **out)
{
    if (!out)
        return tsr__error(TSR_EINVAL, "allreduce_new: NULL output");
    *out = NULL;
    if (!backends)
        return tsr__error(TSR_EINVAL, "allreduce_new: NULL stream list");
    if (n < 1 || n > AR_MAX)
        return tsr__error(TSR_EINVAL, "allreduce_new: %d streams (1..%d allowed)", n, AR_MAX);
    for (int j = 0; j < n; j++)
        if (!backends[j])
            return tsr__error(TSR_EINVAL, "allreduce_new: stream %d is NULL", j);
    tsr_allreduce *ar = calloc(1, sizeof(*ar));
    if (!ar)
        return tsr__error(TSR_ENOMEM, "allreduce_new: %zu bytes", sizeof(*ar));
    ar->n = n;
    for (int j = 0; j < n; j++) {
        ar->b[j] = backends[j];
        ar->dev[j] = tsr_backend_dev(backends[j]);
    }
    ar->forced = ar_env_path();
    ar->last = TSR_ALLREDUCE_AUTO;
    ar->direct = tsr__env_long("TSR_ALLREDUCE_DIRECT", 1) != 0;
    if (n > 1) {
        ar_find_native(ar);
        for (int i = 0; i < AR_SLOTS; i++) {
            tsr_status st = ar_slot_init(ar, &ar->slots[i]);
            if (st != TSR_OK) {
                tsr_allreduce_free(ar);
                return st;
            }
        }
    }
    if (ar->forced == TSR_ALLREDUCE_NATIVE && !ar->comm && n > 1) {
        TSR_LOG_W("TSR_ALLREDUCE=native, but %s offers no collective for these %d streams; "
                  "using auto",
                  tsr_reg_name(tsr_dev_reg(ar->dev[0])), n);
        ar->forced = TSR_ALLREDUCE_AUTO;
    }
    TSR_LOG_D("allreduce: engine over %d streams: native %s, path %s", n,
              ar->comm ? "offered" : "none", tsr_allreduce_path_name(ar->forced));
    *out = ar;
    return TSR_OK;
}

bool tsr_allreduce_has_native(const tsr_allreduce *ar) { return ar && ar->comm; }

tsr_allreduce_path tsr_allreduce_last_path(const tsr_allreduce *ar)
{
    return ar ? ar->last : TSR_ALLREDUCE_AUTO;
}

/* ---- argument checks ------------------------------------------------------------------------ */

static tsr_status ar_check(tsr_allreduce *ar, tsr_tensor *const *t)
{
    if (!t)
        return tsr__error(TSR_EINVAL, "allreduce: NULL tensor list");
    char s0[64], s1[64];
    for (int j = 0; j < ar->n; j++) {
        const char *dev = tsr_dev_name(ar->dev[j]);
        if (!t[j])
            return tsr__error(TSR_EINVAL, "allreduce: tensor %d (on %s) is NULL", j, dev);
        if (!t[j]->buffer)
            return tsr__error(TSR_EINVAL, "allreduce: tensor %d '%s' on %s is not allocated", j,
                              t[j]->name, dev);
        if (t[j]->type != TSR_TYPE_F32 && t[j]->type != TSR_TYPE_F16 && t[j]->type != TSR_TYPE_BF16)
            return tsr__error(TSR_ETYPE,
                              "allreduce: tensor %d '%s' on %s has type %s; F32, F16 or BF16 "
                              "needed",
                              j, t[j]->name, dev, tsr_type_name(t[j]->type));
        if (j > 0 && t[j]->type != t[0]->type)
            return tsr__error(TSR_ETYPE, "allreduce: tensor %d '%s' on %s is %s but tensor 0 is %s",
                              j, t[j]->name, dev, tsr_type_name(t[j]->type),
                              tsr_type_name(t[0]->type));
        if (j > 0 && !tsr_same_shape(t[j], t[0]))
            return tsr__error(TSR_ESHAPE,
                              "allreduce: tensor %d '%s' on %s is %s but tensor 0 is %s", j,
                              t[j]->name, dev, tsr_shape_str(t[j], s1, sizeof(s1)),
                              tsr_shape_str(t[0], s0, sizeof(s0)));
        if (!tsr_is_contiguous(t[j]))
            return tsr__error(TSR_EINVAL, "allreduce: tensor %d '%s' %s on %s is not contiguous", j,
                              t[j]->name, tsr_shape_str(t[j], s0, sizeof(s0)), dev);
        if (!tsr_dev_supports_buft(ar->dev[j], tsr_buf_buft(t[j]->buffer)))
            return tsr__error(TSR_EINVAL,
                              "allreduce: tensor %d '%s' lives in %s memory, which %s cannot use",
                              j, t[j]->name, tsr_buft_name(tsr_buf_buft(t[j]->buffer)), dev);
        const char *d0 = t[j]->data;
        for (int k = 0; k < j; k++) {
            const char *d1 = t[k]->data;
            if (t[k]->buffer == t[j]->buffer && d0 < d1 + tsr_nbytes(t[k]) &&
                d1 < d0 + tsr_nbytes(t[j]))
                return tsr__error(TSR_EINVAL, "allreduce: tensors %d '%s' and %d '%s' share memory",
                                  k, t[k]->name, j, t[j]->name);
        }
    }
    return TSR_OK;
}

/* ---- generic paths ----------------------------------------------------------------------- */

static size_t ar_alignment(tsr_allreduce *ar, tsr_tensor *const *t)
{
    size_t align = 1;
    for (int j = 0; j < ar->n; j++) {
        align = TSR_MAX(align, tsr_buft_alignment(tsr_buf_buft(t[j]->buffer)));
        align = TSR_MAX(align, tsr_buft_alignment(tsr_dev_buft(ar->dev[j])));
    }
    return align;
}

/* Direct mode: every device can use every tensor's memory and every other
 * device's temporaries (where a staged W lives). */
static bool ar_direct(const tsr_allreduce *ar, tsr_tensor *const *t)
{
    if (!ar->direct)
        return false;
    for (int k = 0; k < ar->n; k++)
        for (int j = 0; j < ar->n; j++)
            if (!tsr_dev_supports_buft(ar->dev[j], tsr_buf_buft(t[k]->buffer)) ||
                !tsr_dev_supports_buft(ar->dev[j], tsr_dev_buft(ar->dev[k])))
                return false;
    return true;
}

/* Grows device j's temporary buffer to `need` bytes. The old buffer may be
 * in use by queued calls: wait for them first (rare: sizes only grow). */
static tsr_status ar_grow(tsr_allreduce *ar, int j, size_t need)
{
    if (ar->tmp[j] && tsr_buf_size(ar->tmp[j]) >= need)
        return TSR_OK;
    tsr_status st = ar_wait_all(ar);
    if (st != TSR_OK)
        return st;
    tsr_buf *nb;
    if ((st = tsr_buft_alloc(tsr_dev_buft(ar->dev[j]), need, &nb)) != TSR_OK)
        return st;
    tsr_buf_free(ar->tmp[j]);
    ar->tmp[j] = nb;
    TSR_LOG_D("allreduce: %s temporaries grown to %zu bytes", tsr_dev_name(ar->dev[j]), need);
    return TSR_OK;
}

static tsr_status ar_generic(tsr_allreduce *ar, tsr_tensor *const *t, tsr_allreduce_path path)
{
    ar_call c = {.ar = ar, .t = t, .type = t[0]->type};
    c.es = tsr_type_size(c.type);
    c.ne = tsr_nelements(t[0]);
    const size_t align = ar_alignment(ar, t), nbytes = tsr_nbytes(t[0]);
    c.unit = align > c.es ? (int64_t)(align / c.es) : 1;

    /* Everything that can be refused is decided before anything is enqueued:
     * where W_j lives, and the temporaries. */
    for (int j = 0; j < ar->n; j++) {
        tsr_buf *buf = t[j]->buffer;
        const size_t off = (size_t)((char *)t[j]->data - (char *)tsr_buf_base(buf));
        c.staged[j] = off % align != 0 || tsr_buft_alloc_size(tsr_buf_buft(buf), t[j]) != nbytes;
    }
    c.direct = ar_direct(ar, t);
    for (int j = 0; j < ar->n; j++) {
        tsr_buf *buf = t[j]->buffer;
        const size_t need = tsr__ar_temp_layout(&c, path, j, c.staged[j], c.roff[j]);
        tsr_status st = ar_grow(ar, j, need);
        if (st != TSR_OK)
            return st;
        c.wbuf[j] = c.staged[j] ? ar->tmp[j] : buf;
        c.woff[j] = c.staged[j] ? 0 : (size_t)((char *)t[j]->data - (char *)tsr_buf_base(buf));
    }
    ar_slot *s = &ar->slots[ar->calls % AR_SLOTS];
    tsr_status st = ar_slot_wait(ar, s);
    if (st != TSR_OK)
        return st;
    tsr_ctx_reset(s->ctx);
    s->used_graphs = 0;
    c.slot = s;
    for (int j = 0; j < ar->n && st == TSR_OK; j++) {
        if (!c.staged[j])
            continue;
        c.stage[j] = tsr_new_tensor(s->ctx, c.type, TSR_MAX_DIMS, t[j]->ne);
        st = c.stage[j] ? tsr_buf_place_tensor(ar->tmp[j], c.stage[j], 0) : TSR_EINTERNAL;
    }
    if (st == TSR_OK)
        st = path == TSR_ALLREDUCE_RING ? tsr__ar_ring(&c) : tsr__ar_butterfly(&c);
    /* Even after a failed enqueue, what was enqueued references the slot:
     * mark its end so the slot is reused only after it ran. */
    for (int j = 0; j < ar->n; j++) {
        tsr_status rs = tsr_event_record(s->ev_done[j], ar->b[j]);
        if (st == TSR_OK)
            st = rs;
    }
    s->pending = true;
    ar->calls++;
    return st;
}

/* ---- running ------------------------------------------------------------------------------ */

static void ar_log_call(const tsr_allreduce *ar, tsr_tensor *const *t, tsr_allreduce_path path,
                        const char *why)
{
    if (!tsr__log_enabled(TSR_LOG_DEBUG))
        return;
    char shape[64];
    TSR_LOG_D("allreduce: %s over %d streams, %s %s (%zu bytes)%s", tsr_allreduce_path_name(path),
              ar->n, tsr_type_name(t[0]->type), tsr_shape_str(t[0], shape, sizeof(shape)),
              tsr_nbytes(t[0]), why);
}

tsr_status tsr_allreduce_run_path(tsr_allreduce *ar, tsr_tensor *const *tensors,
                                  tsr_allreduce_path path)
{
    if (!ar)
        return tsr__error(TSR_EINVAL, "allreduce: NULL engine");
    if ((int)path < TSR_ALLREDUCE_AUTO || path > TSR_ALLREDUCE_RING)
        return tsr__error(TSR_EINVAL, "allreduce: unknown path %d", (int)path);
    ar->last = TSR_ALLREDUCE_AUTO; /* nothing ran (yet) */
    tsr_status st = ar_check(ar, tensors);
    if (st != TSR_OK)
        return st;
    if (ar->n == 1 || tsr_nelements(tensors[0]) == 0)
        return TSR_OK;

    tsr_allreduce_path want = path == TSR_ALLREDUCE_AUTO ? ar->forced : path;
    if (want == TSR_ALLREDUCE_NATIVE && !ar->comm)
        return tsr__error(TSR_EUNSUPPORTED,
                          "allreduce: native path asked, but %s offers no collective for these %d "
                          "streams",
                          tsr_reg_name(tsr_dev_reg(ar->dev[0])), ar->n);
    if (want == TSR_ALLREDUCE_AUTO && ar->comm)
        want = TSR_ALLREDUCE_NATIVE;
    const char *why = "";
    if (want == TSR_ALLREDUCE_NATIVE) {
        st = ar->native(ar->comm, tensors);
        if (st != TSR_ENOTHANDLED) {
            if (st == TSR_OK) {
                ar->last = TSR_ALLREDUCE_NATIVE;
                ar_log_call(ar, tensors, TSR_ALLREDUCE_NATIVE, "");
            }
            return st;
        }
        why = " (native declined this call)";
        want = TSR_ALLREDUCE_AUTO;
    }
    if (want == TSR_ALLREDUCE_AUTO)
        want = tsr_nbytes(tensors[0]) < ar_ring_threshold(ar->n, ar_direct(ar, tensors))
                   ? TSR_ALLREDUCE_BUTTERFLY
                   : TSR_ALLREDUCE_RING;
    st = ar_generic(ar, tensors, want);
    if (st == TSR_OK) {
        ar->last = want;
        ar_log_call(ar, tensors, want, why);
    }
    return st;
}

tsr_status tsr_allreduce_run(tsr_allreduce *ar, tsr_tensor *const *tensors)
{
    return tsr_allreduce_run_path(ar, tensors, TSR_ALLREDUCE_AUTO);
}
