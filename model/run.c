/* model/run.c — a model's life: setting up the devices for a split mode,
 * creating or freeing it, and evaluating tokens (prefill or one decode step).
 *
 * Not the graph (model/graph.c) nor sampling (model/sample.c). Split modes:
 * none runs one stage on one device; layer runs one stage per device over
 * consecutive layers (the KV cache follows its layer; the hidden state is
 * copied between stages with async copies, so stages only wait for their
 * input); tensor runs one stage on a meta device over all devices. Every
 * stage is enqueued before the host waits, once, for the logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"
#include "tessera/cpu.h"

static tsr_status set_threads(tsr_backend *be, int n)
{
    if (n <= 0)
        return TSR_OK;
    if (tsr_backend_is_cpu(be))
        return tsr_cpu_set_n_threads(be, n);
    for (int j = 0; tsr_meta_sub_backend(be, j); j++) {
        tsr_backend *sub = tsr_meta_sub_backend(be, j);
        if (tsr_backend_is_cpu(sub)) {
            tsr_status st = tsr_cpu_set_n_threads(sub, n);
            if (st != TSR_OK)
                return st;
        }
    }
    return TSR_OK;
}

/* Consecutive layers per device, in proportion to the ratios (each device
 * at least one layer). */
static tsr_status assign_layers(tsr_model *m)
{
    const int n = m->n_stages, L = m->hp.n_layer;
    if (n > L)
        return tsr__error(TSR_EINVAL,
                          "model: layer split over %d devices, but the model has %d layers", n, L);
    double total = 0;
    for (int j = 0; j < n; j++)
        total += m->cfg.tensor_split[j] > 0 ? m->cfg.tensor_split[j] : 0;
    double cum = 0;
    int l = 0;
    for (int j = 0; j < n; j++) {
        cum += total > 0 ? m->cfg.tensor_split[j] : 1.0;
        int end = j == n - 1 ? L : (int)lround((double)L * cum / (total > 0 ? total : n));
        end = TSR_MAX(end, l + 1);
        end = TSR_MIN(end, L - (n - 1 - j));
        m->st[j].l0 = l;
        m->st[j].l1 = end;
        l = end;
    }
    return TSR_OK;
}

static void warn_idle_devices(const tsr_model *m)
{
    if (m->cfg.quiet || m->cfg.split_mode != TSR_SPLIT_TENSOR ||
        m->cfg.n_devices <= m->hp.n_head_kv)
        return;
    fprintf(stderr,
            "tessera: warning: %d devices but %d KV heads: %d device(s) get no attention heads and "
            "sit idle in attention\n",
            m->cfg.n_devices, m->hp.n_head_kv, m->cfg.n_devices - m->hp.n_head_kv);
}

tsr_status tsr__model_setup(tsr_model *m, const tsr_model_config *cfg)
{
    m->cfg = *cfg;
    if (m->cfg.n_devices < 1) {
        m->cfg.devices[0] = tsr_reg_dev_get(tsr_cpu_reg(), 0);
        m->cfg.n_devices = 1;
    }
    if (m->cfg.n_ctx <= 0)
        m->cfg.n_ctx = 512;
    if (m->cfg.kv_type != TSR_TYPE_F16 && m->cfg.kv_type != TSR_TYPE_F32)
        return tsr__error(TSR_ETYPE, "model: KV cache type %s (f16 or f32)",
                          tsr_type_name(m->cfg.kv_type));
    tsr_status st = tsr_model_hparams_check(&m->hp);
    if (st != TSR_OK)
        return st;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof(*m->layers));
    if (!m->layers)
        return tsr__error(TSR_ENOMEM, "model: %d layers", m->hp.n_layer);
    switch (m->cfg.split_mode) {
    case TSR_SPLIT_NONE:
        m->n_stages = 1;
        m->st[0].dev = m->cfg.devices[0];
        m->st[0].l0 = 0;
        m->st[0].l1 = m->hp.n_layer;
        break;
    case TSR_SPLIT_LAYER:
        m->n_stages = m->cfg.n_devices;
        for (int j = 0; j < m->n_stages; j++)
            m->st[j].dev = m->cfg.devices[j];
        if ((st = assign_layers(m)) != TSR_OK)
            return st;
        break;
    case TSR_SPLIT_TENSOR:
        m->n_stages = 1;
        warn_idle_devices(m);
        st = tsr_meta_device_new(m->cfg.devices, m->cfg.n_devices, tsr_model_split, m, &m->meta);
        if (st != TSR_OK)
            return st;
        m->st[0].dev = m->meta;
        m->st[0].l0 = 0;
        m->st[0].l1 = m->hp.n_layer;
        break;
    default:
        return tsr__error(TSR_EINVAL, "model: split mode %d", (int)m->cfg.split_mode);
    }
    for (int s = 0; s < m->n_stages; s++) {
        model_stage *sg = &m->st[s];
        if ((st = tsr_backend_new(sg->dev, &sg->be)) != TSR_OK)
            return st;
        if ((st = set_threads(sg->be, m->cfg.n_threads)) != TSR_OK)
            return st;
        const size_t cap = (size_t)(sg->l1 - sg->l0) * 96 + 64;
        sg->ga = tsr_gallocr_new(tsr_dev_buft(sg->dev));
        sg->gctx = tsr_ctx_new(cap);
        sg->g = tsr_graph_new(cap);
        if (!sg->ga || !sg->gctx || !sg->g)
            return tsr__error(TSR_ENOMEM, "model: graph state for stage %d", s);
        if ((st = tsr__model_make_tensors(m, s)) != TSR_OK)
            return st;
    }
    return TSR_OK;
}

void tsr_model_free(tsr_model *m)
{
    if (!m)
        return;
    for (int s = 0; s < m->n_stages; s++)
        if (m->st[s].be)
            tsr_backend_synchronize(m->st[s].be);
    tsr__model_sampler_free(m->sampler);
    for (int s = 0; s < MODEL_MAX_STAGES; s++) {
        model_stage *sg = &m->st[s];
        tsr_gallocr_free(sg->ga);
        tsr_graph_free(sg->g);
        tsr_ctx_free(sg->gctx);
        tsr_buf_free(sg->wbuf);
        tsr_ctx_free(sg->wctx);
        tsr_backend_free(sg->be);
    }
    tsr_meta_device_free(m->meta);
    free(m->layers);
    free(m->pos_buf);
    free(m->mask_buf);
    free(m->history);
    free(m);
}

tsr_status tsr_model_generate(const tsr_model_hparams *hp, uint64_t seed,
                              const tsr_model_config *cfg, tsr_model **out)
{
    if (!hp || !cfg || !out)
        return tsr__error(TSR_EINVAL, "model_generate: NULL argument");
    *out = NULL;
    tsr_model *m = calloc(1, sizeof(*m));
    if (!m)
        return tsr__error(TSR_ENOMEM, "model: %zu bytes", sizeof(*m));
    m->hp = *hp;
    if (m->hp.n_rot == 0)
        m->hp.n_rot = m->hp.head_dim;
    tsr_status st = tsr__model_setup(m, cfg);
    for (int s = 0; s < m->n_stages && st == TSR_OK; s++) {
        st = tsr__model_alloc(m, s);
        if (st == TSR_OK)
            st = tsr__model_fill_random(m, s, seed);
    }
    if (st != TSR_OK) {
        tsr_model_free(m);
        return st;
    }
    *out = m;
    return TSR_OK;
}

const tsr_model_hparams *tsr_model_get_hparams(const tsr_model *m) { return &m->hp; }
int tsr_model_pos(const tsr_model *m) { return m->pos; }

void tsr_model_reset(tsr_model *m)
{
    tsr__model_finish(m);
    m->pos = 0;
    m->have_logits = false;
    m->n_history = 0;
    tsr__model_sampler_reset(m->sampler);
}

/* Positions pos0.. and the causal mask [n_kv, T] in host scratch. */
static tsr_status make_inputs(tsr_model *m, int T)
{
    const int n_kv = m->pos + T;
    /* Grown, never shrunk: a decode step allocates nothing. */
    if (T > m->pos_cap) {
        free(m->pos_buf);
        m->pos_cap = T;
        m->pos_buf = malloc((size_t)T * sizeof(int32_t));
    }
    if ((size_t)n_kv * (size_t)T > m->mask_cap) {
        free(m->mask_buf);
        m->mask_cap = TSR_MAX((size_t)n_kv * (size_t)T, (size_t)m->cfg.n_ctx);
        m->mask_buf = malloc(m->mask_cap * sizeof(uint16_t));
    }
    if (!m->pos_buf || !m->mask_buf)
        return tsr__error(TSR_ENOMEM, "model: inputs of %d tokens", T);
    const uint16_t zero = tsr_f32_to_fp16(0.0f), minf = tsr_f32_to_fp16(-INFINITY);
    for (int t = 0; t < T; t++) {
        m->pos_buf[t] = m->pos + t;
        for (int s = 0; s < n_kv; s++)
            m->mask_buf[(size_t)t * (size_t)n_kv + (size_t)s] = s <= m->pos + t ? zero : minf;
    }
    return TSR_OK;
}

static tsr_status run_stage(tsr_model *m, int s, const int32_t *tokens, int T)
{
    model_stage *sg = &m->st[s];
    tsr_status st = tsr__model_build(m, s, T, m->pos);
    if (st == TSR_OK && m->meta)
        st = tsr_meta_check_graph(m->meta, sg->g);
    if (st == TSR_OK)
        st = tsr_gallocr_alloc_graph(sg->ga, sg->g);
    if (st != TSR_OK)
        return st;
    if (sg->in_tokens)
        st = tsr_backend_set_async(sg->be, sg->in_tokens, tokens, 0, (size_t)T * sizeof(int32_t));
    if (st == TSR_OK)
        st = tsr_backend_set_async(sg->be, sg->in_pos, m->pos_buf, 0, (size_t)T * sizeof(int32_t));
    if (st == TSR_OK)
        st = tsr_backend_set_async(sg->be, sg->in_mask, m->mask_buf, 0, tsr_nbytes(sg->in_mask));
    if (st == TSR_OK && sg->in_h) /* the previous stage's hidden state */
        st = tsr_backend_copy_async(m->st[s - 1].be, sg->be, m->st[s - 1].out, sg->in_h);
    if (st == TSR_OK)
        st = tsr_backend_graph_compute_async(sg->be, sg->g);
    return st;
}

static tsr_status remember(tsr_model *m, const int32_t *tokens, int n)
{
    if (m->n_history + n > m->cap_history) {
        const int cap = TSR_MAX(m->cap_history * 2, m->n_history + n + 64);
        int32_t *h = realloc(m->history, (size_t)cap * sizeof(int32_t));
        if (!h)
            return tsr__error(TSR_ENOMEM, "model: token history");
        m->history = h;
        m->cap_history = cap;
    }
    memcpy(m->history + m->n_history, tokens, (size_t)n * sizeof(int32_t));
    m->n_history += n;
    return TSR_OK;
}

tsr_status tsr__model_finish(tsr_model *m)
{
    if (!m->pending)
        return TSR_OK;
    m->pending = false;
    tsr_status st = TSR_OK;
    for (int s = 0; s < m->n_stages; s++) {
        tsr_status ss = tsr_backend_synchronize(m->st[s].be);
        if (st == TSR_OK && ss != TSR_OK)
            st = tsr__error(ss, "model: stage %d on %s: %s", s, tsr_dev_name(m->st[s].dev),
                            tsr_last_error());
    }
    if (st != TSR_OK)
        return st;
    const double dt = (double)(tsr__time_ns() - m->pending_t0) * 1e-9;
    if (m->pending_n > 1) {
        m->stats.prefill_s = dt;
        m->stats.prefill_tokens = m->pending_n;
    } else {
        m->stats.decode_s += dt;
        m->stats.decode_tokens++;
    }
    return TSR_OK;
}

tsr_status tsr_model_eval_async(tsr_model *m, const int32_t *tokens, int n)
{
    if (!m || !tokens || n < 1)
        return tsr__error(TSR_EINVAL, "model_eval: %s", n < 1 ? "no tokens" : "NULL argument");
    if (m->pos + n > m->cfg.n_ctx)
        return tsr__error(TSR_ERANGE,
                          "model_eval: %d tokens at position %d exceed the context of %d", n,
                          m->pos, m->cfg.n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return tsr__error(TSR_ERANGE,
                              "model_eval: token %d at %d is outside the vocabulary (%d)",
                              tokens[i], i, m->hp.n_vocab);
    tsr_status st = tsr__model_finish(m);
    if (st != TSR_OK)
        return st;
    const uint64_t t0 = tsr__time_ns();
    st = make_inputs(m, n);
    for (int s = 0; s < m->n_stages && st == TSR_OK; s++)
        st = run_stage(m, s, tokens, n);
    if (st != TSR_OK) {
        for (int s = 0; s < m->n_stages; s++) /* nothing is left running */
            tsr_backend_synchronize(m->st[s].be);
        return st;
    }
    m->pending = true;
    m->pending_t0 = t0;
    m->pending_n = n;
    if (m->meta) {
        tsr_meta_stats ms;
        if (tsr_meta_stats_get(m->st[0].be, &ms) == TSR_OK) {
            m->stats.allreduce_per_token = ms.n_allreduce;
            m->stats.path = ms.path;
        }
    }
    m->pos += n;
    m->have_logits = true;
    return remember(m, tokens, n);
}

tsr_status tsr_model_eval(tsr_model *m, const int32_t *tokens, int n)
{
    tsr_status st = tsr_model_eval_async(m, tokens, n);
    return st == TSR_OK ? tsr__model_finish(m) : st;
}

tsr_status tsr_model_logits(tsr_model *m, float *out)
{
    if (!m || !out)
        return tsr__error(TSR_EINVAL, "model_logits: NULL argument");
    if (!m->have_logits)
        return tsr__error(TSR_EINVAL, "model_logits: nothing evaluated yet");
    const tsr_status st = tsr__model_finish(m);
    if (st != TSR_OK)
        return st;
    const tsr_tensor *l = m->st[m->n_stages - 1].out;
    return tsr_tensor_get(l, out, 0, (size_t)m->hp.n_vocab * sizeof(float));
}

void tsr_model_stats_get(const tsr_model *m, tsr_model_stats *out)
{
    *out = m->stats;
    memset(out->device_bytes, 0, sizeof(out->device_bytes));
    out->weight_bytes = out->decode_read_bytes = 0;
    for (int s = 0; s < m->n_stages; s++) {
        const model_stage *sg = &m->st[s];
        tsr_buf *cb = tsr_gallocr_buffer(sg->ga);
        const int lanes = sg->wbuf ? tsr_buf_n_lanes(sg->wbuf) : 0;
        for (int j = 0; j < lanes && s + j < TSR_META_MAX_DEVICES; j++)
            out->device_bytes[s + j] +=
                tsr_buf_lane_size(sg->wbuf, j) + (cb ? tsr_buf_lane_size(cb, j) : 0);
        for (size_t i = 0; sg->wctx && i < tsr_ctx_n_tensors(sg->wctx); i++) {
            const tsr_tensor *t = tsr_ctx_tensor(sg->wctx, i);
            if (!(t->flags & TSR_TENSOR_FLAG_PARAM))
                continue;
            out->weight_bytes += tsr_nbytes(t);
            /* The embedding table is read one row per token, unless it is
             * also the output head. */
            if (t != m->st[0].tok_embd || t == m->st[m->n_stages - 1].output)
                out->decode_read_bytes += tsr_nbytes(t);
        }
    }
}

/* Seconds for reps rounds of: a one-node graph on every device, then (with
 * ar) an all-reduce. */
static tsr_status time_rounds(tsr_backend **subs, tsr_graph **g, int n, tsr_allreduce *ar,
                              tsr_tensor **t, tsr_allreduce_path path, int reps, double *out)
{
    tsr_status st = TSR_OK;
    const uint64_t t0 = tsr__time_ns();
    for (int r = 0; r < reps && st == TSR_OK; r++) {
        for (int j = 0; j < n && st == TSR_OK; j++)
            st = tsr_backend_graph_compute_async(subs[j], g[j]);
        if (st == TSR_OK && ar)
            st = tsr_allreduce_run_path(ar, t, path);
    }
    for (int j = 0; j < n && st == TSR_OK; j++)
        st = tsr_backend_synchronize(subs[j]);
    *out = (double)(tsr__time_ns() - t0) * 1e-9;
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

tsr_status tsr_model_allreduce_time(tsr_model *m, int reps, double *seconds)
{
    if (!m || !seconds || reps < 1)
        return tsr__error(TSR_EINVAL, "model_allreduce_time: bad argument");
    *seconds = 0;
    if (!m->meta)
        return TSR_OK;
    const int n = m->cfg.n_devices;
    tsr_backend *subs[TSR_META_MAX_DEVICES];
    tsr_tensor *t[TSR_META_MAX_DEVICES];
    tsr_graph *g[TSR_META_MAX_DEVICES] = {0};
    tsr_buf *buf[TSR_META_MAX_DEVICES] = {0};
    tsr_allreduce *ar = NULL;
    tsr_ctx *c = tsr_ctx_new((size_t)n * 2);
    tsr_status st = c ? TSR_OK : tsr__error(TSR_ENOMEM, "model_allreduce_time");
    /* Per device: the hidden state h and a node after which the all-reduce
     * runs, as in a graph (a scale of h into u, on a busy stream). */
    for (int j = 0; j < n && st == TSR_OK; j++) {
        subs[j] = tsr_meta_sub_backend(m->st[0].be, j);
        t[j] = tsr_new_tensor_1d(c, TSR_TYPE_F32, m->hp.n_embd);
        tsr_tensor *u = tsr_scale(c, t[j], 1.0f);
        g[j] = tsr_graph_new(4);
        if (!t[j] || !u || !g[j]) {
            st = tsr__error(TSR_ENOMEM, "model_allreduce_time: %s", tsr_ctx_error(c));
            break;
        }
        tsr_buft *bt = tsr_dev_buft(tsr_backend_dev(subs[j]));
        const size_t al = tsr_buft_alignment(bt), a = tsr_buft_alloc_size(bt, t[j]);
        const size_t off = (a + al - 1) / al * al;
        st = tsr_buft_alloc(bt, off + tsr_buft_alloc_size(bt, u), &buf[j]);
        if (st == TSR_OK)
            st = tsr_buf_place_tensor(buf[j], t[j], 0);
        if (st == TSR_OK)
            st = tsr_buf_place_tensor(buf[j], u, off);
        if (st == TSR_OK)
            st = tsr_tensor_memset(t[j], 0, 0, tsr_nbytes(t[j]));
        if (st == TSR_OK)
            st = tsr_graph_build(g[j], u);
    }
    if (st == TSR_OK)
        st = tsr_allreduce_new(subs, n, &ar);
    /* The all-reduce's share: rounds with it minus rounds without, in
     * alternating trials; the median difference. */
    double with = 0, without = 0, diff[7];
    if (st == TSR_OK)
        st = time_rounds(subs, g, n, ar, t, m->stats.path, 2, &with); /* warm-up */
    for (int k = 0; k < 7 && st == TSR_OK; k++) {
        st = time_rounds(subs, g, n, NULL, t, m->stats.path, reps, &without);
        if (st == TSR_OK)
            st = time_rounds(subs, g, n, ar, t, m->stats.path, reps, &with);
        diff[k] = (with - without) / reps;
    }
    if (st == TSR_OK) {
        qsort(diff, 7, sizeof(double), cmp_double);
        *seconds = TSR_MAX(0.0, diff[3]);
    }
    tsr_allreduce_free(ar);
    for (int j = 0; j < n; j++) {
        tsr_buf_free(buf[j]);
        tsr_graph_free(g[j]);
    }
    tsr_ctx_free(c);
    return st;
}
