#version 450
/* soft_max.comp — SOFT_MAX: y = softmax(x·scale + mask) along ne[0].
 * a: F32 [C, R, B2, B3]; mask (optional): F32/F16 [C, R' ≥ R, M2, M3]
 * broadcast over dims 2, 3. A row whose every input is -inf gives zeros.
 * One workgroup per row: y first holds the scores, then max and sum are
 * reduced in shared memory.
 */
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t mask;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    uint mnb[3];
    uint mne[2]; /* mask ne[2], ne[3] */
    uint mtype;
    uint has_mask;
    float scale;
} pc;

shared float red[WG];

void main()
{
    const uint row = group_id();
    if (row >= pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    const uvec3 rc = row_coords(row, pc.ne[1], pc.ne[2]);
    const uint64_t x = pc.a + uint64_t(rc.x) * pc.anb[0] + uint64_t(rc.y) * pc.anb[1] +
                       uint64_t(rc.z) * pc.anb[2];
    const uint64_t m = pc.mask + uint64_t(rc.x) * pc.mnb[0] + uint64_t(rc.y % pc.mne[0]) * pc.mnb[1] +
                       uint64_t(rc.z % pc.mne[1]) * pc.mnb[2];
    const uint64_t y = pc.dst + uint64_t(row) * pc.ne[0] * 4u;
    const uint tid = gl_LocalInvocationID.x;
    const uint C = pc.ne[0];
    float mx = uintBitsToFloat(0xff800000u); /* -inf */
    for (uint i = tid; i < C; i += WG) {
        float v = RF32(x).v[i] * pc.scale;
        if (pc.has_mask != 0u)
            v += ld(pc.mtype, m + uint64_t(i) * esize(pc.mtype));
        RF32(y).v[i] = v;
        mx = max(mx, v);
    }
    red[tid] = mx;
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            red[tid] = max(red[tid], red[tid + k]);
        barrier();
    }
    mx = red[0];
    barrier();
    if (isinf(mx) && mx < 0.0) {
        for (uint i = tid; i < C; i += WG)
            RF32(y).v[i] = 0.0;
        return;
    }
    float s = 0.0;
    for (uint i = tid; i < C; i += WG)
        s += exp(RF32(y).v[i] - mx);
    red[tid] = s;
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            red[tid] += red[tid + k];
        barrier();
    }
    const float inv = 1.0 / red[0];
    for (uint i = tid; i < C; i += WG)
        RF32(y).v[i] = exp(RF32(y).v[i] - mx) * inv;
}
