#version 450
/* argmax.comp — ARGMAX: F32 [C, R, B2, B3] → I32 [R, B2, B3], the index of
 * the first maximum, NaN counting as larger than any number (the
 * reference's total order). One workgroup per row; (value, index) pairs
 * are reduced in shared memory.
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

shared float rv[WG];
shared uint ri[WG];

bool val_less(float x, float y)
{
    if (isnan(y))
        return !isnan(x);
    return !isnan(x) && x < y;
}

/* Whether candidate (v2, i2) beats (v1, i1). */
bool better(float v1, uint i1, float v2, uint i2)
{
    return val_less(v1, v2) || (!val_less(v2, v1) && i2 < i1);
}

void main()
{
    const uint row = group_id();
    if (row >= pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    const uvec3 rc = row_coords(row, pc.ne[1], pc.ne[2]);
    const uint64_t x = pc.a + uint64_t(rc.x) * pc.anb[0] + uint64_t(rc.y) * pc.anb[1] +
                       uint64_t(rc.z) * pc.anb[2];
    const uint tid = gl_LocalInvocationID.x;
    float bv = 0.0;
    uint bi = 0xffffffffu;
    for (uint i = tid; i < pc.ne[0]; i += WG) {
        const float v = RF32(x).v[i];
        if (bi == 0xffffffffu || val_less(bv, v)) {
            bv = v;
            bi = i;
        }
    }
    rv[tid] = bv;
    ri[tid] = bi;
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k && ri[tid + k] != 0xffffffffu &&
            (ri[tid] == 0xffffffffu || better(rv[tid], ri[tid], rv[tid + k], ri[tid + k]))) {
            rv[tid] = rv[tid + k];
            ri[tid] = ri[tid + k];
        }
        barrier();
    }
    if (tid == 0u)
        RI32(pc.dst).v[row] = int(ri[0]);
}
