/* tests/testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

tsr_status tu_fill_uniform(tsr_tensor *t, tu_rng *r, float lo, float hi)
{
    const int64_t n = tsr_nelements(t);
    if (n == 0)
        return TSR_OK;
    /* Generate in logical order as F32, convert row by row, write rows
     * through their strides. */
    const int64_t ne0 = t->ne[0];
    float *row = malloc((size_t)ne0 * sizeof(float));
    void *conv = malloc(tsr_row_size(t->type, ne0) + sizeof(int32_t) * (size_t)ne0);
    tsr_status st = (row && conv) ? TSR_OK : TSR_ENOMEM;
    for (int64_t i3 = 0; i3 < t->ne[3] && st == TSR_OK; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2] && st == TSR_OK; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1] && st == TSR_OK; i1++) {
                const size_t off =
                    (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
                if (t->type == TSR_TYPE_I32) {
                    int32_t *ip = conv;
                    for (int64_t i = 0; i < ne0; i++)
                        ip[i] = (int32_t)floorf(tu_uniform(r, lo, hi));
                } else {
                    for (int64_t i = 0; i < ne0; i++)
                        row[i] = tu_uniform(r, lo, hi);
                    st = tsr_row_from_f32(t->type, row, conv, ne0);
                }
                if (st != TSR_OK)
                    break;
                if (tsr_is_contiguous_rows(t)) {
                    st = tsr_tensor_set(t, conv, off, tsr_row_size(t->type, ne0));
                } else {
                    const size_t es = tsr_type_size(t->type);
                    for (int64_t i = 0; i < ne0 && st == TSR_OK; i++)
                        st = tsr_tensor_set(t, (char *)conv + (size_t)i * es,
                                            off + (size_t)i * t->nb[0], es);
                }
            }
    free(row);
    free(conv);
    return st;
}

tsr_status tu_read_f32(const tsr_tensor *t, float *out)
{
    const int64_t ne0 = t->ne[0];
    if (tsr_nelements(t) == 0)
        return TSR_OK;
    const size_t rs = tsr_row_size(t->type, ne0);
    char *raw = malloc(rs ? rs : 1);
    if (!raw)
        return TSR_ENOMEM;
    tsr_status st = TSR_OK;
    int64_t o = 0;
    for (int64_t i3 = 0; i3 < t->ne[3] && st == TSR_OK; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2] && st == TSR_OK; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1] && st == TSR_OK; i1++) {
                const size_t off =
                    (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
                if (tsr_is_contiguous_rows(t)) {
                    st = tsr_tensor_get(t, raw, off, rs);
                } else {
                    const size_t es = tsr_type_size(t->type);
                    for (int64_t i = 0; i < ne0 && st == TSR_OK; i++)
                        st =
                            tsr_tensor_get(t, raw + (size_t)i * es, off + (size_t)i * t->nb[0], es);
                }
                if (st == TSR_OK)
                    st = tsr_row_to_f32(t->type, raw, out + o, ne0);
                o += ne0;
            }
    free(raw);
    return st;
}

double tu_nmse(const float *got, const float *want, int64_t n)
{
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)want[i];
        err += d * d;
        ref += (double)want[i] * want[i];
    }
    if (ref == 0.0)
        return err == 0.0 ? 0.0 : INFINITY;
    return err / ref;
}

size_t tu_devices(tsr_dev **out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < tsr_dev_count() && n < max; i++) {
        tsr_dev *d = tsr_dev_get(i);
        if (tsr_dev_get_type(d) != TSR_DEV_META)
            out[n++] = d;
    }
    /* With two CPU devices or more, a meta device over them joins (every
     * tensor mirrored: the meta plumbing under every op). */
    static tsr_dev *meta;
    tsr_reg *cpu = tsr_cpu_reg();
    if (!meta && tsr_reg_dev_count(cpu) >= 2) {
        tsr_dev *subs[2] = {tsr_reg_dev_get(cpu, 0), tsr_reg_dev_get(cpu, 1)};
        if (tsr_meta_device_new(subs, 2, NULL, NULL, &meta) != TSR_OK)
            meta = NULL;
    }
    if (meta && n < max)
        out[n++] = meta;
    return n;
}

tsr_backend *tu_reference_backend(void)
{
    tsr_backend *b = NULL;
    tsr_dev *cpu = tsr_reg_dev_get(tsr_cpu_reg(), 0);
    if (!cpu || tsr_backend_new(cpu, &b) != TSR_OK)
        return NULL;
    tsr_cpu_set_reference(b, true);
    tsr_cpu_set_n_threads(b, 2);
    return b;
}

const char *tu_shape(const tsr_tensor *t)
{
    static _Thread_local char buf[96];
    return tsr_shape_str(t, buf, sizeof(buf));
}
