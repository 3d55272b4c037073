#version 450
/* argsort.comp — ARGSORT and TOP_K: F32 [C, ...] → I32 [k, ...]: per row,
 * the indices ordered by value (ascending or descending), ties in index
 * order — the stable order of the reference; TOP_K is the descending sort
 * cut after k. One workgroup per row sorts (value, index) pairs in shared
 * memory with a bitonic network over the next power of two P ≥ C
 * (P ≤ 4096); padding sorts last.
 */
#include "common.glsl"
#define WG 256
#define MAXP 4096
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    uint desc;
    uint k; /* indices written per row */
    uint P;
} pc;

shared float sv[MAXP];
shared uint si[MAXP];

bool val_less(float x, float y)
{
    if (isnan(y))
        return !isnan(x);
    return !isnan(x) && x < y;
}

/* Whether element (va, ia) comes before (vb, ib) in the output order. */
bool before(float va, uint ia, float vb, uint ib, uint C)
{
    if (ia >= C || ib >= C)
        return ia < ib; /* padding (index >= C) goes last */
    const bool lt = pc.desc != 0u ? val_less(vb, va) : val_less(va, vb);
    const bool gt = pc.desc != 0u ? val_less(va, vb) : val_less(vb, va);
    return lt || (!gt && ia < ib);
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
    const uint C = pc.ne[0], P = pc.P;
    for (uint i = tid; i < P; i += WG) {
        sv[i] = i < C ? RF32(x).v[i] : 0.0;
        si[i] = i;
    }
    barrier();
    for (uint size = 2u; size <= P; size <<= 1) {
        for (uint stride = size >> 1; stride > 0u; stride >>= 1) {
            for (uint i = tid; i < P; i += WG) {
                const uint j = i ^ stride;
                if (j > i) {
                    const bool up = (i & size) == 0u;
                    const bool swap = up ? before(sv[j], si[j], sv[i], si[i], C)
                                         : before(sv[i], si[i], sv[j], si[j], C);
                    if (swap) {
                        const float tv = sv[i];
                        const uint ti = si[i];
                        sv[i] = sv[j];
                        si[i] = si[j];
                        sv[j] = tv;
                        si[j] = ti;
                    }
                }
            }
            barrier();
        }
    }
    const uint64_t y = pc.dst + uint64_t(row) * pc.k * 4u;
    for (uint i = tid; i < pc.k; i += WG)
        RI32(y).v[i] = int(si[i]);
}
