/* meta/view.c — how a view of a split tensor splits, and where its slice
 * lies inside each device's slice of the root.
 *
 * A view (VIEW, RESHAPE, PERMUTE, TRANSPOSE) points into its root, a
 * contiguous tensor split along axis a. Within one index of the root's outer
 * dims, the axis spans `span` bytes made of units (one element of dim a, a
 * block for quantized dim 0). The view's dims that stride inside the span
 * must tile a dense byte range of whole units that starts and ends on block
 * boundaries of the split ledger; the outermost of them becomes the view's
 * split axis, and on device j it covers device j's part of those blocks.
 * Dims that stride over whole spans scale with the device's span. Anything
 * else (a view of one head of a split Q, every other element...) is refused:
 * its data lives on several devices in a way a single view cannot express.
 *
 * Not the rules of computing ops (meta/infer.c).
 */
#include <string.h>

#include "meta/meta_impl.h"

static tsr_status view_error(const tsr_tensor *v, const tsr_tensor *root, const tsr_split *rs,
                             const char *why)
{
    char sb[200], sh[64];
    return tsr__error(TSR_EUNSUPPORTED, "meta: %s '%s' %s of '%s' (split %s): %s",
                      tsr_op_name(v->op), v->name, tsr_shape_str(v, sh, sizeof(sh)), root->name,
                      tsr_split_str(rs, sb, sizeof(sb)), why);
}

/* Bytes → count of steps along view dim d (elements for a blocked dim 0). */
static bool bytes_to_steps(const tsr_tensor *v, int d, size_t bytes, int64_t *out)
{
    size_t step = v->nb[d];
    int64_t mult = 1;
    if (d == 0 && tsr_type_block_size(v->type) != 1) {
        step = tsr_type_size(v->type);
        mult = tsr_type_block_size(v->type);
    }
    if (step == 0 || bytes % step)
        return false;
    *out = (int64_t)(bytes / step) * mult;
    return true;
}

tsr_status tsr__meta_view(const tsr_tensor *v, const tsr_tensor *root, const tsr_split *rs, int j,
                          tsr_split *out, int64_t *ne_j, size_t *nb_j, size_t *offs_j)
{
    if (!tsr_split_is_axis(rs)) {
        *out = *rs;
        if (ne_j)
            memcpy(ne_j, v->ne, sizeof(v->ne));
        if (nb_j)
            memcpy(nb_j, v->nb, sizeof(v->nb));
        if (offs_j)
            *offs_j = v->view_offs;
        return TSR_OK;
    }
    const int a = (int)rs->axis;
    if (!tsr_is_contiguous(root))
        return view_error(v, root, rs, "the root is not contiguous");
    const int64_t ublk = a == 0 ? tsr_type_block_size(root->type) : 1;  /* elements per unit */
    const size_t ub = a == 0 ? tsr_type_size(root->type) : root->nb[a]; /* bytes per unit */
    const size_t span = (size_t)(root->ne[a] / ublk) * ub;
    const size_t span_j = (size_t)(tsr_split_extent(rs, j) / ublk) * ub;
    if (span == 0)
        return view_error(v, root, rs, "the split axis is empty");

    const size_t outer_idx = v->view_offs / span, rem = v->view_offs % span;
    if (rem % ub)
        return view_error(v, root, rs, "the view starts inside one element of the split axis");
    const int64_t c_u = (int64_t)(rem / ub);

    /* Dims inside the span, sorted by stride, must tile a dense range. */
    int in[4], n_in = 0;
    for (int d = 0; d < 4; d++) {
        if (v->ne[d] <= 1)
            continue;
        if (v->nb[d] < span) {
            int k = n_in++;
            while (k > 0 && v->nb[in[k - 1]] > v->nb[d]) {
                in[k] = in[k - 1];
                k--;
            }
            in[k] = d;
        } else if (v->nb[d] % span) {
            return view_error(v, root, rs, "a dim strides across the split axis unevenly");
        }
    }
    if (n_in == 0)
        return view_error(v, root, rs, "the view takes a single element of the split axis");
    size_t cover = tsr_type_size(v->type);
    if (v->nb[in[0]] != cover)
        return view_error(v, root, rs, "the view skips elements of the split axis");
    for (int k = 0; k < n_in; k++) {
        const int d = in[k];
        if (v->nb[d] != cover)
            return view_error(v, root, rs, "the view's dims do not tile the split axis densely");
        const int64_t steps = d == 0 ? v->ne[0] / tsr_type_block_size(v->type) : v->ne[d];
        cover *= (size_t)steps;
    }
    if (cover % ub)
        return view_error(v, root, rs, "the view covers part of one element of the split axis");
    const int64_t L_u = (int64_t)(cover / ub);
    /* The split axis of the view: the finest dim (by stride) that the device
     * slices actually cut — every slice a whole number of its steps, not
     * all a whole number of the dim. A size-1 dim counts when it continues
     * the tiling. When nothing is cut (each device holds all or nothing),
     * the coarsest dim of size > 1 is used; the rules accept such
     * all-or-nothing splits on any axis. */
    size_t covers[5];
    covers[0] = tsr_type_size(v->type);
    for (int k = 0; k < n_in; k++)
        covers[k + 1] = covers[k] * (size_t)(in[k] == 0 ? v->ne[0] / tsr_type_block_size(v->type)
                                                        : v->ne[in[k]]);
    /* Only the segments the view covers constrain its axis (a view of the
     * Q part of a fused QKV need not step evenly through V's slices). */
    int s_lo = rs->n_segments, s_hi = 0;
    int64_t p = 0;
    for (int s = 0; s < rs->n_segments; s++) {
        int64_t bsize = 0;
        for (int d = 0; d < rs->n_devices; d++)
            bsize += rs->ne[s][d] / ublk;
        const int64_t len = bsize * rs->nr[s];
        if (len > 0 && p < c_u + L_u && p + len > c_u) {
            s_lo = TSR_MIN(s_lo, s);
            s_hi = s + 1;
        }
        p += len;
    }
    int dstar = -1, fallback = in[n_in - 1];
    size_t best = SIZE_MAX;
    for (int d = 0; d < 4; d++) {
        bool candidate = v->ne[d] > 1 && v->nb[d] < span;
        for (int k = 0; k <= n_in && v->ne[d] == 1 && !candidate; k++)
            candidate = v->nb[d] == covers[k];
        if (!candidate || v->nb[d] >= best)
            continue;
        const size_t whole =
            v->nb[d] * (size_t)(d == 0 ? v->ne[0] / tsr_type_block_size(v->type) : v->ne[d]);
        bool divides = true, cut = false;
        for (int k = s_lo; k < s_hi && divides; k++)
            for (int j2 = 0; j2 < rs->n_devices && divides; j2++) {
                const size_t bytes = (size_t)(rs->ne[k][j2] / ublk) * ub;
                int64_t steps;
                divides = bytes_to_steps(v, d, bytes, &steps);
                cut |= whole == 0 || bytes % whole != 0;
            }
        if (divides && cut) {
            dstar = d;
            best = v->nb[d];
        }
    }
    if (dstar < 0) {
        bool divides = true;
        for (int k = s_lo; k < s_hi && divides; k++)
            for (int j2 = 0; j2 < rs->n_devices && divides; j2++) {
                int64_t steps;
                divides = bytes_to_steps(v, fallback, (size_t)(rs->ne[k][j2] / ublk) * ub, &steps);
            }
        if (divides)
            dstar = fallback;
    }
    if (dstar < 0)
        return view_error(v, root, rs,
                          "no dim of the view steps evenly through every device's "
                          "slice (check the split granularity)");

    /* Walk the blocks of the ledger: [c_u, c_u + L_u) must be whole blocks. */
    tsr_split r;
    memset(&r, 0, sizeof(r));
    r.axis = (tsr_split_axis)dstar;
    r.n_devices = rs->n_devices;
    int64_t pos = 0, before_j = 0, inside_j = 0;
    bool started = false, ended = L_u == 0;
    int last_seg = -1;
    for (int s = 0; s < rs->n_segments && !ended; s++) {
        int64_t bsize = 0;
        for (int d = 0; d < rs->n_devices; d++)
            bsize += rs->ne[s][d] / ublk;
        for (int rep = 0; rep < rs->nr[s] && !ended; rep++) {
            if (!started && pos == c_u)
                started = true;
            if (!started) {
                if (pos + bsize > c_u)
                    return view_error(v, root, rs, "the view starts inside a split segment");
                before_j += rs->ne[s][j] / ublk;
                pos += bsize;
                continue;
            }
            if (pos + bsize > c_u + L_u)
                return view_error(v, root, rs, "the view ends inside a split segment");
            if (last_seg != s) {
                if (r.n_segments == TSR_SPLIT_MAX_SEGMENTS)
                    return view_error(v, root, rs, "too many segments");
                const int k = r.n_segments++;
                for (int d = 0; d < rs->n_devices; d++) {
                    int64_t steps;
                    if (!bytes_to_steps(v, dstar, (size_t)(rs->ne[s][d] / ublk) * ub, &steps))
                        return view_error(v, root, rs,
                                          "a device's slice is not a whole number of the view's "
                                          "steps (check the split granularity)");
                    r.ne[k][d] = steps;
                }
                last_seg = s;
            }
            r.nr[r.n_segments - 1]++;
            inside_j += rs->ne[s][j] / ublk;
            pos += bsize;
            if (pos == c_u + L_u)
                ended = true;
        }
    }
    if (!ended)
        return view_error(v, root, rs, "the view runs past the split segments");
    *out = r;
    if (ne_j) {
        memcpy(ne_j, v->ne, sizeof(v->ne));
        int64_t steps = 0;
        bytes_to_steps(v, dstar, (size_t)inside_j * ub, &steps);
        ne_j[dstar] = steps;
    }
    if (nb_j) {
        for (int d = 0; d < 4; d++)
            nb_j[d] =
                v->nb[d] >= span && v->nb[d] % span == 0 ? v->nb[d] / span * span_j : v->nb[d];
    }
    if (offs_j)
        *offs_j = outer_idx * span_j + (size_t)before_j * ub;
    return TSR_OK;
}
