/* meta/split.c — the split ledger: building splits (even, by ratios, with a
 * granularity and segments), extents, and printing.
 *
 * Not the rules that derive the split of a computed tensor (meta/infer.c).
 * Cuts are computed per segment in units of the granularity, walking the
 * devices from `rotation`: cumulative ratios rounded down, so the device
 * visited last takes whatever rounding left over.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "tessera/meta.h"

bool tsr_split_is_axis(const tsr_split *s)
{
    return s->axis >= TSR_SPLIT_A0 && s->axis <= TSR_SPLIT_A3;
}

int64_t tsr_split_extent(const tsr_split *s, int j)
{
    if (!tsr_split_is_axis(s))
        return 0;
    int64_t e = 0;
    for (int k = 0; k < s->n_segments; k++)
        e += s->ne[k][j] * s->nr[k];
    return e;
}

int64_t tsr_split_total(const tsr_split *s)
{
    int64_t e = 0;
    for (int j = 0; j < s->n_devices; j++)
        e += tsr_split_extent(s, j);
    return e;
}

const char *tsr_split_axis_name(tsr_split_axis axis)
{
    switch (axis) {
    case TSR_SPLIT_A0:
        return "A0";
    case TSR_SPLIT_A1:
        return "A1";
    case TSR_SPLIT_A2:
        return "A2";
    case TSR_SPLIT_A3:
        return "A3";
    case TSR_SPLIT_MIRRORED:
        return "M";
    case TSR_SPLIT_PARTIAL:
        return "P";
    }
    return "?";
}

const char *tsr_split_str(const tsr_split *s, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "%s", tsr_split_axis_name(s->axis));
    if (!tsr_split_is_axis(s))
        return buf;
    for (int k = 0; k < s->n_segments && o < size; k++) {
        o += (size_t)snprintf(buf + o, size - o, k ? " |" : " {");
        if (s->nr[k] != 1 && o < size)
            o += (size_t)snprintf(buf + o, size - o, " x%d:", s->nr[k]);
        for (int j = 0; j < s->n_devices && o < size; j++)
            o += (size_t)snprintf(buf + o, size - o, "%s%lld", j ? "," : " ",
                                  (long long)s->ne[k][j]);
    }
    if (o < size)
        snprintf(buf + o, size - o, " }");
    return buf;
}

tsr_split tsr_split_mirrored(int n_devices)
{
    tsr_split s;
    memset(&s, 0, sizeof(s));
    s.axis = TSR_SPLIT_MIRRORED;
    s.n_devices = n_devices;
    return s;
}

tsr_split tsr_split_partial(int n_devices, const bool *contributors)
{
    tsr_split s;
    memset(&s, 0, sizeof(s));
    s.axis = TSR_SPLIT_PARTIAL;
    s.n_devices = n_devices;
    s.n_segments = 1;
    s.nr[0] = 1;
    for (int j = 0; j < n_devices && j < TSR_META_MAX_DEVICES; j++)
        s.ne[0][j] = !contributors || contributors[j] ? 1 : 0;
    return s;
}

tsr_status tsr_split_make(tsr_split *out, tsr_split_axis axis, int n, const tsr_split_segment *segs,
                          int n_segments, const float *ratios, int rotation)
{
    if (!out || !segs)
        return tsr__error(TSR_EINVAL, "split_make: NULL argument");
    if (axis < TSR_SPLIT_A0 || axis > TSR_SPLIT_A3)
        return tsr__error(TSR_EINVAL, "split_make: axis %d is not A0..A3", (int)axis);
    if (n < 1 || n > TSR_META_MAX_DEVICES)
        return tsr__error(TSR_EINVAL, "split_make: %d devices (1..%d)", n, TSR_META_MAX_DEVICES);
    if (n_segments < 1 || n_segments > TSR_SPLIT_MAX_SEGMENTS)
        return tsr__error(TSR_EINVAL, "split_make: %d segments (1..%d)", n_segments,
                          TSR_SPLIT_MAX_SEGMENTS);
    double r[TSR_META_MAX_DEVICES], total = 0.0;
    for (int j = 0; j < n; j++) {
        r[j] = ratios ? (double)ratios[j] : 0.0;
        if (!(r[j] >= 0.0) || !isfinite(r[j]))
            return tsr__error(TSR_EINVAL, "split_make: ratio %g of device %d", r[j], j);
        total += r[j];
    }
    if (total == 0.0) {
        for (int j = 0; j < n; j++)
            r[j] = 1.0;
        total = n;
    }
    rotation = ((rotation % n) + n) % n;
    tsr_split s;
    memset(&s, 0, sizeof(s));
    s.axis = axis;
    s.n_devices = n;
    s.n_segments = n_segments;
    for (int k = 0; k < n_segments; k++) {
        const int64_t g = segs[k].granularity > 0 ? segs[k].granularity : 1;
        if (segs[k].size < 0 || segs[k].size % g != 0)
            return tsr__error(TSR_EINVAL,
                              "split_make: segment %d of %lld elements is not a multiple "
                              "of its granularity %lld",
                              k, (long long)segs[k].size, (long long)g);
        s.nr[k] = segs[k].repeat > 0 ? segs[k].repeat : 1;
        const int64_t units = segs[k].size / g;
        double cum = 0.0;
        int64_t low = 0;
        for (int v = 0; v < n; v++) {
            const int d = (rotation + v) % n;
            cum += r[d];
            const int64_t high = v == n - 1 ? units : (int64_t)floor((double)units * cum / total);
            s.ne[k][d] = (TSR_MAX(high, low) - low) * g;
            low = TSR_MAX(high, low);
        }
    }
    *out = s;
    return TSR_OK;
}

tsr_status tsr_split_simple(tsr_split *out, tsr_split_axis axis, int n, int64_t size,
                            int64_t granularity, const float *ratios, int rotation)
{
    const tsr_split_segment seg = {.size = size, .repeat = 1, .granularity = granularity};
    return tsr_split_make(out, axis, n, &seg, 1, ratios, rotation);
}
