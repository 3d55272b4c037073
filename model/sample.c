/* model/sample.c — picking the next token: greedy, temperature, top-k, top-p,
 * repetition penalty, seeded.
 *
 * Not the logits themselves (model/graph.c). Key design choice: the logits
 * stay where the output head left them, sliced by vocabulary over the
 * devices of a tensor split. Each device runs a three-node graph on its slice
 * (top_k of k + r candidates, their values, and the values of the r recent
 * tokens the penalty touches) and only those few numbers cross to the host,
 * which merges them. The merged set provably holds the k best penalized
 * logits: a token outside it trails k + r candidates of its slice, at least
 * k of which the penalty leaves alone. Sampling over the whole vocabulary
 * (temperature without top-k) or gather_logits copies the full logits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_impl.h"

typedef struct sample_dev {
    tsr_backend *be; /* not owned */
    tsr_gallocr *ga;
    tsr_ctx *ctx;
    tsr_graph *g;
    tsr_tensor slice; /* this device's logits, [n, 1] F32 */
    int64_t start;    /* its first token id */
    tsr_tensor *hidx; /* input: penalized token ids local to the slice */
    tsr_tensor *idx, *val, *hval;
    int k, r;
} sample_dev;

typedef struct cand {
    int32_t id;
    float logit;
} cand;

struct model_sampler {
    sample_dev d[TSR_META_MAX_DEVICES];
    uint64_t rng[4];
    uint64_t seed;
    bool seeded;
    /* Host scratch, grown as needed. */
    cand *cand;
    size_t cap_cand;
    int32_t *hist, *ibuf;
    float *fbuf;
    size_t cap_hist, cap_ibuf, cap_fbuf;
};

static void sampler_free_devs(struct model_sampler *s)
{
    for (int j = 0; j < TSR_META_MAX_DEVICES; j++) {
        tsr_gallocr_free(s->d[j].ga);
        tsr_graph_free(s->d[j].g);
        tsr_ctx_free(s->d[j].ctx);
    }
}

void tsr__model_sampler_free(struct model_sampler *s)
{
    if (!s)
        return;
    sampler_free_devs(s);
    free(s->cand);
    free(s->hist);
    free(s->ibuf);
    free(s->fbuf);
    free(s);
}

void tsr__model_sampler_reset(struct model_sampler *s)
{
    if (s)
        s->seeded = false;
}

/* ---- random numbers (xoshiro256**, seeded by splitmix64) ------------------------- */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(struct model_sampler *s, uint64_t seed)
{
    uint64_t z = seed;
    for (int i = 0; i < 4; i++) {
        z += 0x9e3779b97f4a7c15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        s->rng[i] = x ^ (x >> 31);
    }
    s->seed = seed;
    s->seeded = true;
}

/* Uniform in [0, 1). */
static double rng_uniform(struct model_sampler *s)
{
    uint64_t *r = s->rng;
    const uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- host side: penalty, ordering, the draw ------------------------------------ */

static tsr_status grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return TSR_OK;
    const size_t n = TSR_MAX(need, *cap * 2);
    void *q = realloc(*p, n * elem);
    if (!q)
        return tsr__error(TSR_ENOMEM, "sampler: %zu bytes of scratch", n * elem);
    *p = q;
    *cap = n;
    return TSR_OK;
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_cand_id(const void *a, const void *b)
{
    return cmp_i32(&((const cand *)a)->id, &((const cand *)b)->id);
}

/* Best first: larger logit, then lower id (the order of the top_k op). */
static int cmp_cand_best(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The distinct tokens of the penalty window, sorted, into s->hist. */
static tsr_status penalty_window(const tsr_model *m, const tsr_sampler_params *sp,
                                 struct model_sampler *s, int *n_out)
{
    *n_out = 0;
    if (sp->repeat_penalty == 1.0f || sp->repeat_last_n <= 0 || m->n_history == 0)
        return TSR_OK;
    const int n = TSR_MIN(sp->repeat_last_n, m->n_history);
    tsr_status st = grow((void **)&s->hist, &s->cap_hist, (size_t)n, sizeof(int32_t));
    if (st != TSR_OK)
        return st;
    memcpy(s->hist, m->history + m->n_history - n, (size_t)n * sizeof(int32_t));
    qsort(s->hist, (size_t)n, sizeof(int32_t), cmp_i32);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (u == 0 || s->hist[u - 1] != s->hist[i])
            s->hist[u++] = s->hist[i];
    *n_out = u;
    return TSR_OK;
}

static bool in_window(const struct model_sampler *s, int n_hist, int32_t id)
{
    return n_hist > 0 && bsearch(&id, s->hist, (size_t)n_hist, sizeof(int32_t), cmp_i32) != NULL;
}

/* Picks from n candidates (any order, ids possibly repeated): penalty, best
 * first, top-k, temperature, top-p, the seeded draw. */
static int32_t pick(struct model_sampler *s, const tsr_sampler_params *sp, cand *c, size_t n,
                    int n_hist)
{
    qsort(c, n, sizeof(cand), cmp_cand_id);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || c[u - 1].id != c[i].id)
            c[u++] = c[i];
    n = u;
    if (n_hist > 0)
        for (size_t i = 0; i < n; i++)
            if (in_window(s, n_hist, c[i].id))
                c[i].logit = c[i].logit > 0 ? c[i].logit / sp->repeat_penalty
                                            : c[i].logit * sp->repeat_penalty;
    qsort(c, n, sizeof(cand), cmp_cand_best);
    if (sp->temperature <= 0.0f)
        return c[0].id;
    if (sp->top_k > 0 && (size_t)sp->top_k < n)
        n = (size_t)sp->top_k;
    /* Softmax at the temperature, in place (logit becomes probability). */
    const float top = c[0].logit;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        c[i].logit = expf((c[i].logit - top) / sp->temperature);
        sum += c[i].logit;
    }
    if (sp->top_p > 0.0f && sp->top_p < 1.0f) {
        double cum = 0;
        size_t keep = n;
        for (size_t i = 0; i < n; i++) {
            cum += c[i].logit / sum;
            if (cum >= sp->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += c[i].logit;
    }
    double x = rng_uniform(s) * sum;
    for (size_t i = 0; i < n; i++) {
        x -= c[i].logit;
        if (x < 0)
            return c[i].id;
    }
    return c[n - 1].id;
}

/* ---- device side: candidates per slice ----------------------------------------- */

/* A copy of a computed tensor that graphs see as a leaf (its data only). */
static void as_leaf(tsr_tensor *t)
{
    t->op = TSR_OP_NONE;
    memset(t->src, 0, sizeof(t->src));
    memset(t->op_params, 0, sizeof(t->op_params));
    t->flags = 0;
}

/* The slices of the last logits: one per device of a vocab-split meta
 * tensor, else the whole tensor. Returns 0 when the candidates cannot be
 * computed in place (then the caller gathers). */
static int find_slices(tsr_model *m, struct model_sampler *s)
{
    const model_stage *last = &m->st[m->n_stages - 1];
    tsr_tensor *l = last->out;
    if (!m->meta) {
        s->d[0].be = last->be;
        s->d[0].slice = *l;
        s->d[0].start = 0;
        as_leaf(&s->d[0].slice);
        return 1;
    }
    tsr_split sp;
    if (tsr_meta_split_of(m->meta, l, &sp) != TSR_OK)
        return 0;
    const int n = tsr_split_is_axis(&sp) ? m->cfg.n_devices : sp.axis == TSR_SPLIT_MIRRORED ? 1 : 0;
    for (int j = 0; j < n; j++) {
        s->d[j].be = tsr_meta_sub_backend(last->be, j);
        if (!s->d[j].be || tsr_meta_slice(l, j, &s->d[j].slice, &s->d[j].start) != TSR_OK)
            return 0;
        as_leaf(&s->d[j].slice);
    }
    return n;
}

/* Builds and enqueues device j's candidate graph (k best of its slice and
 * the values of its r penalized tokens, ids at hid) and the reads of its
 * results into ids[0..k) / vals[0..k + r): one wait per device in all. */
static tsr_status dev_enqueue(struct model_sampler *s, int j, int k, int r, const int32_t *hid,
                              int32_t *ids, float *vals)
{
    sample_dev *d = &s->d[j];
    const int64_t n = d->slice.ne[0];
    d->k = (int)TSR_MIN((int64_t)k, n);
    d->r = r;
    if (!d->ctx) {
        d->ctx = tsr_ctx_new(16);
        d->g = tsr_graph_new(16);
        d->ga = tsr_gallocr_new(tsr_dev_buft(tsr_backend_dev(d->be)));
        if (!d->ctx || !d->g || !d->ga)
            return tsr__error(TSR_ENOMEM, "sampler: graph state for device %d", j);
    }
    tsr_ctx_reset(d->ctx);
    tsr_graph_reset(d->g);
    tsr_ctx *c = d->ctx;
    tsr_tensor *rows = tsr_reshape_2d(c, &d->slice, 1, n);
    d->idx = d->k > 0 ? tsr_top_k(c, &d->slice, d->k) : NULL;
    d->val = d->idx ? tsr_get_rows(c, rows, d->idx) : NULL;
    d->hidx = r > 0 ? tsr_new_tensor_1d(c, TSR_TYPE_I32, r) : NULL;
    if (d->hidx)
        d->hidx->flags |= TSR_TENSOR_FLAG_INPUT;
    d->hval = d->hidx ? tsr_get_rows(c, rows, d->hidx) : NULL;
    if (tsr_ctx_status(c) != TSR_OK)
        return tsr__error(tsr_ctx_status(c), "sampler: %s", tsr_ctx_error(c));
    tsr_status st = TSR_OK;
    if (d->val && !tsr_dev_supports_op(tsr_backend_dev(d->be), d->idx))
        return TSR_EUNSUPPORTED; /* the caller gathers instead */
    if (d->val)                  /* idx is read back too: an output, never reused */
        st = tsr_graph_build(d->g, d->idx);
    if (st == TSR_OK && d->val)
        st = tsr_graph_build(d->g, d->val);
    if (st == TSR_OK && d->hval)
        st = tsr_graph_build(d->g, d->hval);
    if (st != TSR_OK || tsr_graph_n_nodes(d->g) == 0)
        return st;
    if ((st = tsr_gallocr_alloc_graph(d->ga, d->g)) != TSR_OK)
        return st;
    if (d->hidx)
        st = tsr_backend_set_async(d->be, d->hidx, hid, 0, (size_t)r * sizeof(int32_t));
    if (st == TSR_OK)
        st = tsr_backend_graph_compute_async(d->be, d->g);
    if (st == TSR_OK && d->k > 0)
        st = tsr_backend_get_async(d->be, d->idx, ids, 0, (size_t)d->k * sizeof(int32_t));
    if (st == TSR_OK && d->k > 0)
        st = tsr_backend_get_async(d->be, d->val, vals, 0, (size_t)d->k * sizeof(float));
    if (st == TSR_OK && r > 0)
        st = tsr_backend_get_async(d->be, d->hval, vals + d->k, 0, (size_t)r * sizeof(float));
    return st;
}

/* Candidates from every slice into s->cand; *n_out of them. */
static tsr_status distributed_candidates(const tsr_sampler_params *sp, struct model_sampler *s,
                                         int n_dev, int n_hist, size_t *n_out)
{
    const int want = (sp->temperature <= 0.0f ? 1 : sp->top_k) + n_hist;
    /* s->ibuf: the penalized ids per device, local to its slice (n_hist at
     * most), then want ids per device; s->fbuf: want + n_hist values per
     * device. */
    const size_t per = (size_t)want + (size_t)n_hist;
    tsr_status st = grow((void **)&s->ibuf, &s->cap_ibuf,
                         (size_t)n_hist + (size_t)want * (size_t)n_dev, sizeof(int32_t));
    if (st == TSR_OK)
        st = grow((void **)&s->fbuf, &s->cap_fbuf, per * (size_t)n_dev, sizeof(float));
    if (st != TSR_OK)
        return st;
    int off[TSR_META_MAX_DEVICES + 1] = {0};
    for (int j = 0; j < n_dev; j++) {
        const sample_dev *d = &s->d[j];
        off[j + 1] = off[j];
        for (int i = 0; i < n_hist; i++)
            if (s->hist[i] >= d->start && s->hist[i] < d->start + d->slice.ne[0])
                s->ibuf[off[j + 1]++] = s->hist[i] - (int32_t)d->start;
    }
    int32_t *ids = s->ibuf + n_hist;
    for (int j = 0; j < n_dev && st == TSR_OK; j++)
        st = dev_enqueue(s, j, want, off[j + 1] - off[j], s->ibuf + off[j], ids + (size_t)j * want,
                         s->fbuf + (size_t)j * per);
    for (int j = 0; j < n_dev; j++) {
        const tsr_status ss = tsr_backend_synchronize(s->d[j].be);
        if (st == TSR_OK)
            st = ss;
    }
    if (st != TSR_OK)
        return st;
    size_t total = 0;
    for (int j = 0; j < n_dev; j++)
        total += (size_t)s->d[j].k + (size_t)s->d[j].r;
    if ((st = grow((void **)&s->cand, &s->cap_cand, total, sizeof(cand))) != TSR_OK)
        return st;
    size_t n = 0;
    for (int j = 0; j < n_dev; j++) {
        const sample_dev *d = &s->d[j];
        const int32_t *dj = ids + (size_t)j * want;
        const float *vj = s->fbuf + (size_t)j * per;
        for (int i = 0; i < d->k; i++)
            s->cand[n++] = (cand){(int32_t)d->start + dj[i], vj[i]};
        for (int i = 0; i < d->r; i++)
            s->cand[n++] = (cand){(int32_t)d->start + s->ibuf[off[j] + i], vj[d->k + i]};
    }
    *n_out = n;
    return TSR_OK;
}

static tsr_status gathered_candidates(tsr_model *m, struct model_sampler *s, size_t *n_out)
{
    const size_t V = (size_t)m->hp.n_vocab;
    tsr_status st = grow((void **)&s->cand, &s->cap_cand, V, sizeof(cand));
    if (st == TSR_OK)
        st = grow((void **)&s->fbuf, &s->cap_fbuf, V, sizeof(float));
    if (st == TSR_OK)
        st = tsr_model_logits(m, s->fbuf);
    if (st != TSR_OK)
        return st;
    for (size_t i = 0; i < V; i++)
        s->cand[i] = (cand){(int32_t)i, s->fbuf[i]};
    *n_out = V;
    return TSR_OK;
}

tsr_status tsr_model_sample(tsr_model *m, const tsr_sampler_params *sp, int32_t *token)
{
    if (!m || !sp || !token)
        return tsr__error(TSR_EINVAL, "model_sample: NULL argument");
    if (!m->have_logits)
        return tsr__error(TSR_EINVAL, "model_sample: nothing evaluated yet");
    if (sp->top_k < 0 || sp->top_p < 0.0f || sp->top_p > 1.0f || !(sp->repeat_penalty > 0.0f) ||
        isnan(sp->temperature))
        return tsr__error(TSR_EINVAL,
                          "model_sample: top_k %d (>= 0), top_p %g (0..1), repeat_penalty %g (> 0)",
                          sp->top_k, (double)sp->top_p, (double)sp->repeat_penalty);
    if (!m->sampler && !(m->sampler = calloc(1, sizeof(*m->sampler))))
        return tsr__error(TSR_ENOMEM, "model_sample: sampler state");
    struct model_sampler *s = m->sampler;
    if (!s->seeded || s->seed != sp->seed)
        rng_seed(s, sp->seed);
    int n_hist = 0;
    tsr_status st = penalty_window(m, sp, s, &n_hist);
    if (st != TSR_OK)
        return st;
    /* Candidates in place when only the best few can win. */
    const bool few = sp->temperature <= 0.0f || sp->top_k > 0;
    const int n_dev = few && !sp->gather_logits ? find_slices(m, s) : 0;
    size_t n = 0;
    st = n_dev > 0 ? distributed_candidates(sp, s, n_dev, n_hist, &n) : TSR_EUNSUPPORTED;
    if (st == TSR_EUNSUPPORTED)
        st = gathered_candidates(m, s, &n);
    /* The evaluation's own wait: the slices' streams are idle by now, so on
     * remote devices this costs no further round trip. */
    const tsr_status fs = tsr__model_finish(m);
    if (st == TSR_OK)
        st = fs;
    if (st != TSR_OK)
        return st;
    *token = pick(s, sp, s->cand, n, n_hist);
    return TSR_OK;
}
