#version 450
/* sum_rows.comp — SUM_ROWS: F32 [C, R, B2, B3] → F32 [1, R, B2, B3].
 * One workgroup per row, tree reduction in shared memory.
 */
#include "common.glsl"
#define WG 256
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
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
    const uint tid = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint i = tid; i < pc.ne[0]; i += WG)
        s += RF32(x).v[i];
    red[tid] = s;
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            red[tid] += red[tid + k];
        barrier();
    }
    if (tid == 0u)
        RF32(pc.dst).v[row] = red[0];
}
