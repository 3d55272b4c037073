#version 450
/* flash_attn.comp — FLASH_ATTN_EXT: q: F32 [D, T, H, B], k: [D, S, Hk, B],
 * v: [Dv, S, Hk, B] (F32, or F16 with KV_F16=1), mask (optional): F32/F16
 * [S, T' ≥ T, M2, M3] additive → out: F32 [Dv, H, T, B] contiguous:
 * out[:, h, t, b] = Σ_s softmax_s(score)·v[:, s, h / (H/Hk), b],
 * score = softcap(scale·q·k) + mask (softcap c > 0: c·tanh(x/c)).
 * One workgroup per query row (h, t, b): keys go by tiles of WG, each
 * thread scoring one key; an online softmax (running max m, sum l) rescales
 * the accumulator, each thread owning dims tid, tid+WG, ... of the output.
 * A row whose every score is -inf gives zeros. D, Dv ≤ MAXD.
 */
#include "common.glsl"
#define WG 64
#define MAXD 256
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t q;
    uint64_t k;
    uint64_t v;
    uint64_t mask;
    uint64_t dst;
    uint qnb[3];
    uint knb[3];
    uint vnb[3];
    uint mnb[3];
    uint D, Dv, S, H, Hk, T;
    uint mflags; /* mask ne[2] | ne[3] << 15 | type << 30; 0: no mask */
    float scale;
    float softcap;
} pc;

shared float sq[MAXD];
shared float sp[WG];
shared float red[WG];

#if KV_F16
float kv_load(uint64_t row, uint d) { return unpackHalf2x16(uint(RU16(row).v[d])).x; }
#else
float kv_load(uint64_t row, uint d) { return RF32(row).v[d]; }
#endif

void main()
{
    const uint row = group_id();
    const uint h = row % pc.H, t = (row / pc.H) % pc.T, b = row / (pc.H * pc.T);
    const uint hk = h / (pc.H / pc.Hk);
    const uint tid = gl_LocalInvocationID.x;
    const uint64_t qrow = pc.q + uint64_t(t) * pc.qnb[0] + uint64_t(h) * pc.qnb[1] +
                          uint64_t(b) * pc.qnb[2];
    for (uint d = tid; d < pc.D; d += WG)
        sq[d] = RF32(qrow).v[d];
    const uint64_t kb = pc.k + uint64_t(hk) * pc.knb[1] + uint64_t(b) * pc.knb[2];
    const uint64_t vb = pc.v + uint64_t(hk) * pc.vnb[1] + uint64_t(b) * pc.vnb[2];
    const bool has_mask = pc.mflags != 0u;
    const uint mne2 = pc.mflags & 0x7fffu, mne3 = (pc.mflags >> 15) & 0x7fffu;
    const uint mtype = pc.mflags >> 30;
    const uint64_t mrow = pc.mask + uint64_t(t) * pc.mnb[0] +
                          uint64_t(has_mask ? h % mne2 : 0u) * pc.mnb[1] +
                          uint64_t(has_mask ? b % mne3 : 0u) * pc.mnb[2];
    const float NEG_INF = uintBitsToFloat(0xff800000u);
    float m = NEG_INF, l = 0.0;
    float acc[MAXD / WG];
    for (uint j = 0u; j < MAXD / WG; j++)
        acc[j] = 0.0;
    barrier();
    for (uint s0 = 0u; s0 < pc.S; s0 += WG) {
        const uint s = s0 + tid;
        float sc = NEG_INF;
        if (s < pc.S) {
            const uint64_t krow = kb + uint64_t(s) * pc.knb[0];
            float dot = 0.0;
            for (uint d = 0u; d < pc.D; d++)
                dot += sq[d] * kv_load(krow, d);
            sc = dot * pc.scale;
            if (pc.softcap > 0.0)
                sc = pc.softcap * tanh(clamp(sc / pc.softcap, -15.0, 15.0));
            if (has_mask)
                sc += ld(mtype, mrow + uint64_t(s) * esize(mtype));
        }
        red[tid] = sc;
        barrier();
        for (uint r = WG / 2u; r > 0u; r >>= 1) {
            if (tid < r)
                red[tid] = max(red[tid], red[tid + r]);
            barrier();
        }
        const float m_new = max(m, red[0]);
        barrier();
        if (isinf(m_new) && m_new < 0.0)
            continue; /* everything so far is masked (the same for all threads) */
        const float alpha = exp(m - m_new);
        const float p = (isinf(sc) && sc < 0.0) ? 0.0 : exp(sc - m_new);
        sp[tid] = p;
        red[tid] = p;
        barrier();
        for (uint r = WG / 2u; r > 0u; r >>= 1) {
            if (tid < r)
                red[tid] += red[tid + r];
            barrier();
        }
        l = l * alpha + red[0];
        const uint n_s = min(uint(WG), pc.S - s0);
        for (uint j = 0u; j < MAXD / WG; j++) {
            const uint d = tid + j * WG;
            if (d >= pc.Dv)
                break;
            float a = acc[j] * alpha;
            for (uint jj = 0u; jj < n_s; jj++)
                a += sp[jj] * kv_load(vb + uint64_t(s0 + jj) * pc.vnb[0], d);
            acc[j] = a;
        }
        m = m_new;
        barrier();
    }
    const uint64_t orow = pc.dst + (uint64_t(b) * pc.T * pc.H + uint64_t(t) * pc.H + h) * pc.Dv * 4u;
    const bool empty = isinf(m) && m < 0.0;
    for (uint j = 0u; j < MAXD / WG; j++) {
        const uint d = tid + j * WG;
        if (d < pc.Dv)
            RF32(orow).v[d] = empty ? 0.0 : acc[j] / l;
    }
}
