#version 450
/* rms_norm.comp — RMS_NORM: y = x / sqrt(mean(x²) + eps) along ne[0].
 * a: F32 [C, R, B2, B3] (dense rows), dst contiguous. One workgroup per
 * row: strided partial sums, then a tree reduction in shared memory.
 */
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    float eps;
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
    const uint64_t y = pc.dst + uint64_t(row) * pc.ne[0] * 4u;
    const uint tid = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint i = tid; i < pc.ne[0]; i += WG) {
        const float v = RF32(x).v[i];
        s += v * v;
    }
    red[tid] = s;
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            red[tid] += red[tid + k];
        barrier();
    }
    const float scale = pc.ne[0] > 0u ? inversesqrt(red[0] / float(pc.ne[0]) + pc.eps) : 0.0;
    for (uint i = tid; i < pc.ne[0]; i += WG)
        RF32(y).v[i] = RF32(x).v[i] * scale;
}
