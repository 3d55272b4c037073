/* backends/cpu/cpu_fa.c — the fast flash-attention kernel of the CPU backend.
 *
 * out[:, h, t, b] = Σ_s softmax_s(score) · v[:, s, hk, b], score =
 * softcap(scale · q[:, t, h, b] · k[:, s, hk, b]) + mask[s, t], hk = h / (H/Hk);
 * shapes q: [D, T, H, B], k: [D, S, Hk, B], v: [Dv, S, Hk, B].
 *
 * One pass over the keys per query row with an online softmax (running
 * maximum and sum, the accumulator rescaled when the maximum grows), so
 * memory is O(Dv) per thread whatever S is. Masked (−inf) keys are skipped
 * before their dot product: a causal prefill does half the work. Rows are
 * ordered tokens-fastest so consecutive rows reuse the same K/V head from
 * cache. Not the reference (cpu_ops_ref.c, in double precision).
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/cpu_vec.h"

static inline float mask_at(const tsr_tensor *m, int64_t s, int64_t t, int64_t h, int64_t b)
{
    const char *p = (const char *)m->data + s * m->nb[0] + t * m->nb[1] +
                    (h % m->ne[2]) * m->nb[2] + (b % m->ne[3]) * m->nb[3];
    return m->type == TSR_TYPE_F16 ? tsr_fp16_to_f32(*(const tsr_fp16 *)p) : *(const float *)p;
}

size_t tsr__cpu_fa_work_size(const tsr_tensor *n, int nth)
{
    return (size_t)nth * tsr__align_up((size_t)n->src[2]->ne[0] * sizeof(float), 64);
}

bool tsr__cpu_flash_attn(const tsr__cpu_params *p, tsr_tensor *n)
{
    const tsr_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *mask = n->src[3];
    if (q->type != TSR_TYPE_F32 || (k->type != TSR_TYPE_F32 && k->type != TSR_TYPE_F16))
        return false;
    const tsr__vec_ops *vo = tsr__vec();
    const float scale = tsr_get_op_param_f32(n, 0), softcap = tsr_get_op_param_f32(n, 1);
    const int64_t D = q->ne[0], Dv = v->ne[0], S = k->ne[1], T = q->ne[1], H = q->ne[2];
    const int64_t group = H / k->ne[2];
    const bool f16 = k->type == TSR_TYPE_F16;
    float *acc =
        (float *)((char *)p->work + (size_t)p->ith * tsr__align_up((size_t)Dv * sizeof(float), 64));

    int64_t j0, j1;
    tsr__cpu_range(T * H * q->ne[3], p->ith, p->nth, &j0, &j1);
    for (int64_t j = j0; j < j1; j++) {
        const int64_t t = j % T, h = (j / T) % H, b = j / (T * H), hk = h / group;
        const float *qr =
            (const float *)((const char *)q->data + t * q->nb[1] + h * q->nb[2] + b * q->nb[3]);
        const char *kb = (const char *)k->data + hk * k->nb[2] + b * k->nb[3];
        const char *vb = (const char *)v->data + hk * v->nb[2] + b * v->nb[3];
        float mx = -INFINITY, sum = 0.0f;
        memset(acc, 0, (size_t)Dv * sizeof(float));
        for (int64_t s = 0; s < S; s++) {
            const float mv = mask ? mask_at(mask, s, t, h, b) : 0.0f;
            if (mv == -INFINITY)
                continue;
            const void *kr = kb + s * k->nb[1];
            float sc = (f16 ? vo->dot_f16(qr, kr, D) : vo->dot_f32(qr, kr, D)) * scale;
            if (softcap > 0.0f)
                sc = softcap * tanhf(sc / softcap);
            sc += mv;
            float keep = 1.0f, w = 1.0f;
            if (sc > mx) {
                keep = mx == -INFINITY ? 0.0f : expf(mx - sc);
                mx = sc;
            } else {
                w = expf(sc - mx);
            }
            sum = sum * keep + w;
            const void *vr = vb + s * v->nb[1];
            if (f16)
                vo->scale_axpy_f16(acc, keep, w, vr, Dv);
            else
                vo->scale_axpy_f32(acc, keep, w, vr, Dv);
        }
        float *out = (float *)((char *)n->data + h * n->nb[1] + t * n->nb[2] + b * n->nb[3]);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t d = 0; d < Dv; d++)
            out[d] = acc[d] * inv;
    }
    return true;
}
