/* meta/infer.c — split inference: the split of every computed tensor from
 * its sources' splits, one rule per op, and a bounded cache of results.
 *
 * Not the view mapping (meta/view.c) nor the decision where to cut a graph
 * (meta/compute.c). Rules follow DESIGN.md §4.3. A partial source is kept
 * partial only by an op that is linear in it (mul by a mirrored factor, add
 * or sub of two partials, add_id with a stored-partial bias, scale without
 * bias, mul_mat with mirrored weights, layout ops): the sum over devices then
 * still gives the true value. Every other op sees its partial sources as
 * reduced (the graph is cut before it). An op or a combination without a rule
 * is an error naming the op, the tensor and the splits: never a guess.
 */
#include <stdio.h>
#include <string.h>

#include "meta/meta_impl.h"

/* ---- helpers ------------------------------------------------------------------------ */

static bool is_m(const tsr_split *s) { return s->axis == TSR_SPLIT_MIRRORED; }
static bool is_p(const tsr_split *s) { return s->axis == TSR_SPLIT_PARTIAL; }
static bool is_ax(const tsr_split *s) { return tsr_split_is_axis(s); }

/* Same axis and the same extent on every device. */
static bool same_extents(const tsr_split *a, const tsr_split *b)
{
    if (a->axis != b->axis || a->n_devices != b->n_devices)
        return false;
    for (int j = 0; j < a->n_devices; j++)
        if (tsr_split_extent(a, j) != tsr_split_extent(b, j))
            return false;
    return true;
}

/* x's extents are r times w's on every device (GQA-style broadcast). */
static bool proportional(const tsr_split *w, const tsr_split *x, int64_t r)
{
    for (int j = 0; j < w->n_devices; j++)
        if (tsr_split_extent(x, j) != r * tsr_split_extent(w, j))
            return false;
    return true;
}

/* Every device holds all of the split dim or none of it: the tensor lives
 * whole on a subset of devices, so any dim may be named its split axis
 * (e.g. one KV head on one of four devices). */
static bool all_or_nothing(const tsr_split *s, const tsr_tensor *t)
{
    if (!is_ax(s))
        return false;
    for (int j = 0; j < s->n_devices; j++) {
        const int64_t e = tsr_split_extent(s, j);
        if (e != 0 && e != t->ne[s->axis])
            return false;
    }
    return true;
}

/* s (all or nothing) named along `axis` of t instead. */
static tsr_split retarget(const tsr_split *s, const tsr_tensor *t, int axis)
{
    tsr_split r;
    memset(&r, 0, sizeof(r));
    r.axis = (tsr_split_axis)axis;
    r.n_devices = s->n_devices;
    r.n_segments = 1;
    r.nr[0] = 1;
    for (int j = 0; j < s->n_devices; j++)
        r.ne[0][j] = tsr_split_extent(s, j) ? t->ne[axis] : 0;
    return r;
}

/* Sources a (of tensor ta) and b (of tb) are split alike: same axis and
 * extents, or both all-or-nothing on the same devices (then b is named
 * along a's axis in *b_as_a). */
static bool alike(const tsr_split *a, const tsr_tensor *ta, const tsr_split *b,
                  const tsr_tensor *tb)
{
    if (same_extents(a, b))
        return true;
    if (!all_or_nothing(a, ta) || !all_or_nothing(b, tb))
        return false;
    for (int j = 0; j < a->n_devices; j++)
        if ((tsr_split_extent(a, j) != 0) != (tsr_split_extent(b, j) != 0))
            return false;
    return true;
}

static tsr_split with_axis(const tsr_split *s, tsr_split_axis axis)
{
    tsr_split r = *s;
    r.axis = axis;
    return r;
}

static const tsr_split *reduced(const tsr_split *s, tsr_split *tmp)
{
    if (s && is_p(s)) {
        *tmp = tsr_split_mirrored(s->n_devices);
        return tmp;
    }
    return s;
}

tsr_status tsr__meta_rule_error(const tsr_tensor *n, const tsr_split *const *src, const char *why)
{
    char msg[600];
    size_t o = (size_t)snprintf(msg, sizeof(msg), "meta: %s '%s': ", tsr_op_name(n->op),
                                n->name[0] ? n->name : "(unnamed)");
    for (int k = 0; k < TSR_MAX_SRC && o < sizeof(msg); k++) {
        if (!n->src[k])
            continue;
        char sb[160];
        o += (size_t)snprintf(msg + o, sizeof(msg) - o, "%ssrc%d '%s' %s", k ? ", " : "", k,
                              n->src[k]->name[0] ? n->src[k]->name : tsr_op_name(n->src[k]->op),
                              src && src[k] ? tsr_split_str(src[k], sb, sizeof(sb)) : "?");
    }
    return tsr__error(TSR_EUNSUPPORTED, "%s: %s", msg, why);
}

void tsr__meta_simple_shape(const tsr_tensor *t, const tsr_split *s, int j, int64_t ne[4])
{
    memcpy(ne, t->ne, sizeof(t->ne));
    if (tsr_split_is_axis(s))
        ne[s->axis] = tsr_split_extent(s, j);
}

/* ---- rules ----------------------------------------------------------------------------- */

#define FAIL(why) return tsr__meta_rule_error(n, src, why)

/* Per-row ops: a row (dim 0) must not be cut. */
static tsr_status rule_per_row(const tsr_tensor *n, const tsr_split *const *src, const tsr_split *a,
                               tsr_split *out)
{
    if (a->axis == TSR_SPLIT_A0)
        FAIL("a per-row op cannot run on rows cut across devices (A0)");
    *out = *a;
    if (n->op == TSR_OP_ARGMAX && is_ax(a)) /* the row dim disappears */
        out->axis = (tsr_split_axis)(a->axis - 1);
    return TSR_OK;
}

static tsr_status rule_binary(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    const tsr_split *a = src[0], *b = src[1];
    /* Linear in partial operands: the sum over devices stays right. */
    if ((n->op == TSR_OP_ADD || n->op == TSR_OP_SUB) && is_p(a) && is_p(b)) {
        *out = *a;
        return TSR_OK;
    }
    if ((n->op == TSR_OP_MUL || n->op == TSR_OP_DIV) && is_p(a) && is_m(b)) {
        *out = *a;
        return TSR_OK;
    }
    if (n->op == TSR_OP_MUL && is_m(a) && is_p(b) && tsr_same_shape(n->src[0], n->src[1])) {
        *out = *b;
        return TSR_OK;
    }
    tsr_split ta, tb;
    a = reduced(a, &ta);
    b = reduced(b, &tb);
    if (is_m(a) && is_m(b)) {
        *out = *a;
        return TSR_OK;
    }
    if (is_ax(a) && is_m(b) && n->src[1]->ne[a->axis] == 1) {
        *out = *a;
        return TSR_OK;
    }
    if (is_ax(a) && alike(a, n->src[0], b, n->src[1]) &&
        n->src[1]->ne[a->axis] == n->src[0]->ne[a->axis]) {
        *out = *a;
        return TSR_OK;
    }
    FAIL("element-wise ops need both sources mirrored, split alike, or b mirrored and broadcast "
         "along a's split axis");
}

static tsr_status rule_mul_mat(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    const tsr_split *w = src[0], *x = src[1];
    tsr_split tw, tx;
    w = reduced(w, &tw);
    if (is_m(w) && is_p(x)) { /* linear in x */
        *out = *x;
        return TSR_OK;
    }
    x = reduced(x, &tx);
    if (is_m(w) && is_m(x)) {
        *out = *w;
        return TSR_OK;
    }
    if (w->axis == TSR_SPLIT_A1 && is_m(x)) { /* column parallel: output rows split */
        *out = with_axis(w, TSR_SPLIT_A0);
        return TSR_OK;
    }
    if (w->axis == TSR_SPLIT_A0 && x->axis == TSR_SPLIT_A0) { /* row parallel */
        if (!same_extents(w, x))
            FAIL("row-parallel product: w and x must cut K the same way on every device");
        *out = tsr_split_partial(w->n_devices, NULL);
        for (int j = 0; j < w->n_devices; j++)
            out->ne[0][j] = tsr_split_extent(w, j) != 0;
        return TSR_OK;
    }
    if (n->op == TSR_OP_MUL_MAT) {
        if (is_m(w) && x->axis == TSR_SPLIT_A1) { /* tokens split */
            *out = *x;
            return TSR_OK;
        }
        if (is_m(w) && (x->axis == TSR_SPLIT_A2 || x->axis == TSR_SPLIT_A3) &&
            n->src[0]->ne[x->axis] == 1) {
            *out = *x;
            return TSR_OK;
        }
        if ((w->axis == TSR_SPLIT_A2 || w->axis == TSR_SPLIT_A3) && x->axis == w->axis &&
            n->src[0]->ne[w->axis] > 0 &&
            proportional(w, x, n->src[1]->ne[w->axis] / n->src[0]->ne[w->axis])) {
            *out = *x;
            return TSR_OK;
        }
    }
    FAIL("matrix products need (M, M), (A1, M), (A0, A0), (M, A1), or batch splits that agree");
}

static tsr_status rule_glu(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    tsr_split ta, tb;
    const tsr_split *a = reduced(src[0], &ta), *b = reduced(src[1], &tb);
    if (b) {
        if ((is_ax(a) && alike(a, n->src[0], b, n->src[1])) || (is_m(a) && is_m(b))) {
            *out = *a;
            return TSR_OK;
        }
        FAIL("gate and up must be split alike");
    }
    if (a->axis != TSR_SPLIT_A0) {
        *out = *a;
        return TSR_OK;
    }
    /* A fused [gate | up] cut along its rows: every device must hold equal
     * halves, i.e. one segment repeated twice or two equal segments. */
    tsr_split r = *a;
    if (a->n_segments == 1 && a->nr[0] == 2) {
        r.nr[0] = 1;
    } else if (a->n_segments == 2 && a->nr[0] == 1 && a->nr[1] == 1 &&
               memcmp(a->ne[0], a->ne[1], sizeof(a->ne[0])) == 0) {
        r.n_segments = 1;
    } else {
        FAIL("a fused [gate | up] split along its rows needs two equal segments per device");
    }
    *out = r;
    return TSR_OK;
}

static tsr_status rule_flash_attn(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    tsr_split t[4];
    const tsr_split *q = reduced(src[0], &t[0]), *k = reduced(src[1], &t[1]),
                    *v = reduced(src[2], &t[2]), *m = reduced(src[3], &t[3]);
    if (m && !is_m(m))
        FAIL("the attention mask must be mirrored");
    if (is_m(q) && is_m(k) && is_m(v)) {
        *out = *q;
        return TSR_OK;
    }
    tsr_split rq, rk, rv;
    if (all_or_nothing(q, n->src[0]) && q->axis != TSR_SPLIT_A2) {
        rq = retarget(q, n->src[0], TSR_SPLIT_A2);
        q = &rq;
    }
    if (all_or_nothing(k, n->src[1]) && k->axis != TSR_SPLIT_A2) {
        rk = retarget(k, n->src[1], TSR_SPLIT_A2);
        k = &rk;
    }
    if (all_or_nothing(v, n->src[2]) && v->axis != TSR_SPLIT_A2) {
        rv = retarget(v, n->src[2], TSR_SPLIT_A2);
        v = &rv;
    }
    if (q->axis != TSR_SPLIT_A2)
        FAIL("attention splits q by heads (A2) with k, v by heads or mirrored");
    if (m && n->src[3]->ne[2] != 1)
        FAIL("a per-head mask cannot follow a head split");
    if (n->src[1]->ne[2] == 0)
        FAIL("no kv heads");
    const int64_t group = n->src[0]->ne[2] / n->src[1]->ne[2];
    if (k->axis == TSR_SPLIT_A2 && v->axis == TSR_SPLIT_A2) {
        if (!same_extents(k, v) || !proportional(k, q, group))
            FAIL("q heads on each device must be the GQA groups of its kv heads");
    } else if (is_m(k) && is_m(v)) {
        int64_t start = 0;
        for (int j = 0; j < q->n_devices; j++) {
            const int64_t e = tsr_split_extent(q, j);
            if (start % group || e % group)
                FAIL("with mirrored k, v each device's q heads must be whole GQA groups");
            start += e;
        }
    } else {
        FAIL("k and v must both be split by heads or both mirrored");
    }
    *out = with_axis(q, TSR_SPLIT_A1); /* out: [Dv, H, T, B] */
    return TSR_OK;
}

static tsr_status rule_rows_table(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    tsr_split t[3];
    if (n->op == TSR_OP_GET_ROWS) {
        const tsr_split *a = reduced(src[0], &t[0]), *ids = reduced(src[1], &t[1]);
        if (!is_m(ids))
            FAIL("row ids must be mirrored");
        if (is_m(a) || a->axis == TSR_SPLIT_A0) {
            *out = *a;
            return TSR_OK;
        }
        FAIL("get_rows needs the table mirrored or split along its rows' elements (A0)");
    }
    /* SET_ROWS {src, ids, dst}: the result is dst's memory. */
    const tsr_split *s = reduced(src[0], &t[0]), *ids = reduced(src[1], &t[1]), *d = src[2];
    if (!is_m(ids))
        FAIL("row ids must be mirrored");
    if (is_m(d) && is_m(s)) {
        *out = *d;
        return TSR_OK;
    }
    if (is_ax(d) && d->axis != TSR_SPLIT_A1 && alike(d, n->src[2], s, n->src[0])) {
        *out = *d;
        return TSR_OK;
    }
    FAIL("set_rows needs src split like dst (not along the rows dst is indexed by)");
}

static tsr_status rule_cpy(const tsr_tensor *n, const tsr_split *const *src, tsr_split *out)
{
    const tsr_split *a = src[0], *d = src[1];
    if (is_p(a) && is_m(d)) { /* copying is linear: the destination holds partials */
        *out = *a;
        return TSR_OK;
    }
    tsr_split ta;
    a = reduced(a, &ta);
    if (is_m(a) && is_m(d)) {
        *out = *d;
        return TSR_OK;
    }
    if (is_ax(a) && alike(a, n->src[0], d, n->src[1]) && tsr_same_shape(n->src[0], n->src[1])) {
        *out = *d;
        return TSR_OK;
    }
    FAIL("cpy needs source and destination split alike");
}

tsr_status tsr__meta_rule(meta_dev *md, const tsr_tensor *n, const tsr_split *const *src,
                          tsr_split *out)
{
    (void)md;
    tsr_split t0, t1, t2;
    switch (n->op) {
    case TSR_OP_VIEW:
    case TSR_OP_RESHAPE:
    case TSR_OP_PERMUTE:
    case TSR_OP_TRANSPOSE:
        /* src[0] holds the split of the root (n->view_src). */
        return tsr__meta_view(n, n->view_src, src[0], 0, out, NULL, NULL, NULL);
    case TSR_OP_CONT:
        *out = *src[0]; /* linear; a permuted split keeps its axis */
        return TSR_OK;
    case TSR_OP_CPY:
        return rule_cpy(n, src, out);
    case TSR_OP_GET_ROWS:
    case TSR_OP_SET_ROWS:
        return rule_rows_table(n, src, out);
    case TSR_OP_MUL_MAT:
    case TSR_OP_MUL_MAT_ID:
        if (n->op == TSR_OP_MUL_MAT_ID && !is_m(reduced(src[2], &t2)))
            FAIL("expert ids must be mirrored");
        return rule_mul_mat(n, src, out);
    case TSR_OP_ADD:
    case TSR_OP_SUB:
    case TSR_OP_MUL:
    case TSR_OP_DIV:
        return rule_binary(n, src, out);
    case TSR_OP_ADD_ID: {
        if (!is_m(reduced(src[2], &t2)))
            FAIL("expert ids must be mirrored");
        if (is_p(src[0]) && is_p(src[1])) { /* a stored-partial bias joins the sum */
            *out = *src[0];
            return TSR_OK;
        }
        if (is_p(src[1]))
            FAIL("a partial bias can only be added to a partial sum");
        const tsr_split *a = reduced(src[0], &t0), *b = src[1];
        if ((is_m(a) && is_m(b)) ||
            (a->axis == TSR_SPLIT_A0 && alike(a, n->src[0], b, n->src[1]))) {
            *out = *a;
            return TSR_OK;
        }
        FAIL("add_id needs a and b mirrored or both split along dim 0 alike");
    }
    case TSR_OP_SCALE:
        if (is_p(src[0]) && tsr_get_op_param_f32(n, 1) == 0.0f) {
            *out = *src[0];
            return TSR_OK;
        }
        *out = *reduced(src[0], &t0);
        return TSR_OK;
    case TSR_OP_FILL:
    case TSR_OP_SILU:
    case TSR_OP_GELU:
        *out = *reduced(src[0], &t0);
        return TSR_OK;
    case TSR_OP_GLU:
        return rule_glu(n, src, out);
    case TSR_OP_RMS_NORM:
    case TSR_OP_SUM_ROWS:
    case TSR_OP_ARGMAX:
    case TSR_OP_ARGSORT:
    case TSR_OP_TOP_K:
        return rule_per_row(n, src, reduced(src[0], &t0), out);
    case TSR_OP_SOFT_MAX: {
        const tsr_split *a = reduced(src[0], &t0), *m = reduced(src[1], &t1);
        if (m && !is_m(m))
            FAIL("the soft_max mask must be mirrored");
        if (m && is_ax(a) && (a->axis == TSR_SPLIT_A1 || n->src[1]->ne[a->axis] != 1))
            FAIL("a mask cannot follow a split of the rows it masks");
        return rule_per_row(n, src, a, out);
    }
    case TSR_OP_ROPE: {
        const tsr_split *a = reduced(src[0], &t0), *pos = reduced(src[1], &t1);
        if (!is_m(pos))
            FAIL("positions must be mirrored");
        if (is_m(a) || a->axis == TSR_SPLIT_A1 || a->axis == TSR_SPLIT_A3) {
            *out = *a;
            return TSR_OK;
        }
        if (all_or_nothing(a, n->src[0])) {
            *out = retarget(a, n->src[0], TSR_SPLIT_A1);
            return TSR_OK;
        }
        FAIL("rope needs whole heads on each device (split by heads, A1)");
    }
    case TSR_OP_FLASH_ATTN_EXT:
        return rule_flash_attn(n, src, out);
    case TSR_OP_CONCAT: {
        const tsr_split *a = reduced(src[0], &t0), *b = reduced(src[1], &t1);
        const int dim = n->op_params[0];
        if (is_m(a) && is_m(b)) {
            *out = *a;
            return TSR_OK;
        }
        if (is_ax(a) && (int)a->axis != dim && alike(a, n->src[0], b, n->src[1])) {
            *out = *a;
            return TSR_OK;
        }
        FAIL("concat needs both sources mirrored or split alike away from the joined dim");
    }
    default:
        break;
    }
    FAIL("the meta device has no split rule for this op");
}

#undef FAIL

/* ---- the split of a tensor on its own, with a bounded cache -------------------- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* Everything the split of t depends on that could change when a context
 * slot is reused for another tensor. */
static uint64_t signature(const tsr_tensor *t)
{
    uint64_t h = mix(0, (uint64_t)(uintptr_t)t);
    h = mix(h, (uint64_t)t->op);
    h = mix(h, (uint64_t)t->type);
    for (int i = 0; i < 4; i++) {
        h = mix(h, (uint64_t)t->ne[i]);
        h = mix(h, (uint64_t)t->nb[i]);
    }
    h = mix(h, (uint64_t)(uintptr_t)t->view_src);
    h = mix(h, (uint64_t)t->view_offs);
    for (int k = 0; k < TSR_MAX_SRC; k++)
        h = mix(h, (uint64_t)(uintptr_t)t->src[k]);
    for (int k = 0; k < TSR_MAX_OP_PARAMS; k++)
        h = mix(h, (uint64_t)(uint32_t)t->op_params[k]);
    for (const char *c = t->name; *c; c++)
        h = mix(h, (uint64_t)(unsigned char)*c);
    return h;
}

static meta_cache_entry *cache_slot(meta_dev *md, const tsr_tensor *t)
{
    uintptr_t h = (uintptr_t)t;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return &md->cache[(h >> 11) % META_CACHE_SIZE];
}

/* Checks a split from the application against the tensor it is for. */
static tsr_status check_static(meta_dev *md, const tsr_tensor *t, const tsr_split *s)
{
    char sb[256];
    if (s->n_devices != md->n)
        return tsr__error(TSR_EINVAL,
                          "meta: split of '%s' is for %d devices; the meta device has %d", t->name,
                          s->n_devices, md->n);
    if (is_m(s) || is_p(s))
        return TSR_OK;
    if (!is_ax(s) || s->n_segments < 1 || s->n_segments > TSR_SPLIT_MAX_SEGMENTS)
        return tsr__error(TSR_EINVAL, "meta: split of '%s' is malformed (%s)", t->name,
                          tsr_split_str(s, sb, sizeof(sb)));
    for (int k = 0; k < s->n_segments; k++) {
        if (s->nr[k] < 1)
            return tsr__error(TSR_EINVAL, "meta: split of '%s': segment %d repeats %d times",
                              t->name, k, s->nr[k]);
        for (int j = 0; j < md->n; j++)
            if (s->ne[k][j] < 0)
                return tsr__error(TSR_EINVAL, "meta: split of '%s': negative extent", t->name);
    }
    if (tsr_split_total(s) != t->ne[s->axis])
        return tsr__error(TSR_ESHAPE,
                          "meta: split of '%s' %s covers %lld elements of dim %d; the "
                          "tensor has %lld",
                          t->name, tsr_split_str(s, sb, sizeof(sb)), (long long)tsr_split_total(s),
                          (int)s->axis, (long long)t->ne[s->axis]);
    if (s->axis == TSR_SPLIT_A0) {
        const int64_t blk = tsr_type_block_size(t->type);
        for (int k = 0; k < s->n_segments; k++)
            for (int j = 0; j < md->n; j++)
                if (s->ne[k][j] % blk)
                    return tsr__error(TSR_EINVAL,
                                      "meta: split of '%s' cuts a %s block on device %d", t->name,
                                      tsr_type_name(t->type), j);
    }
    return TSR_OK;
}

static tsr_status split_static(meta_dev *md, const tsr_tensor *t, tsr_split *out)
{
    if (t->buffer && !tsr__meta_is_buf(t->buffer)) {
        *out = tsr_split_mirrored(md->n); /* e.g. host memory every device reads */
        return TSR_OK;
    }
    if (!md->split_fn) {
        *out = tsr_split_mirrored(md->n);
        return TSR_OK;
    }
    memset(out, 0, sizeof(*out));
    tsr_status st = md->split_fn(t, md->n, out, md->userdata);
    if (st != TSR_OK)
        return st;
    return check_static(md, t, out);
}

#define META_MAX_DEPTH 512

static tsr_status split_rec(meta_dev *md, const tsr_tensor *t, tsr_split *out, int depth);

static tsr_status split_compute(meta_dev *md, const tsr_tensor *t, tsr_split *out, int depth)
{
    if (t->view_src) {
        if (!tsr_op_is_view(t->op) && t->op != TSR_OP_CPY && t->op != TSR_OP_SET_ROWS)
            return tsr__error(TSR_EUNSUPPORTED, "meta: '%s' (%s) is a view of an unexpected kind",
                              t->name, tsr_op_name(t->op));
    }
    if (t->op == TSR_OP_NONE)
        return split_static(md, t, out);
    tsr_split srcs[TSR_MAX_SRC];
    const tsr_split *sp[TSR_MAX_SRC] = {0};
    for (int k = 0; k < TSR_MAX_SRC; k++) {
        const tsr_tensor *s = t->src[k];
        if (tsr_op_is_view(t->op)) /* views map from their root */
            s = k == 0 ? t->view_src : NULL;
        if (!s)
            continue;
        tsr_status st = split_rec(md, s, &srcs[k], depth + 1);
        if (st != TSR_OK)
            return st;
        sp[k] = &srcs[k];
    }
    return tsr__meta_rule(md, t, sp, out);
}

static tsr_status split_rec(meta_dev *md, const tsr_tensor *t, tsr_split *out, int depth)
{
    if (t->buffer && tsr__meta_is_buf(t->buffer) && !t->view_src && t->extra) {
        *out = ((const meta_tensor *)t->extra)->split; /* placed: its record */
        return TSR_OK;
    }
    if (depth > META_MAX_DEPTH)
        return tsr__error(TSR_ERANGE,
                          "meta: '%s' is more than %d ops from a placed tensor; allocate "
                          "or check the graph in order",
                          t->name, META_MAX_DEPTH);
    const uint64_t sig = signature(t);
    meta_cache_entry *e = cache_slot(md, t);
    if (e->t == t && e->sig == sig) {
        *out = e->split;
        return TSR_OK;
    }
    tsr_status st = split_compute(md, t, out, depth);
    if (st != TSR_OK)
        return st;
    e = cache_slot(md, t); /* recursion may have reused the slot */
    e->t = t;
    e->sig = sig;
    e->split = *out;
    return TSR_OK;
}

tsr_status tsr__meta_split(meta_dev *md, const tsr_tensor *t, tsr_split *out)
{
    pthread_mutex_lock(&md->cache_lock);
    tsr_status st = split_rec(md, t, out, 0);
    pthread_mutex_unlock(&md->cache_lock);
    return st;
}
