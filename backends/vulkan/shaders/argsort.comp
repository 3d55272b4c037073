#version 450
/* argsort.comp — ARGSORT and TOP_K: F32 [C, ...] → I32 [k, ...]: per row,
 * the indices ordered by value (ascending or descending), ties in index
 * order — the stable order of the reference; TOP_K is the descending sort
 * cut after k. One workgroup per row sorts (value, index) pairs in shared
 * memory with a bitonic network over the next power of two P ≥ C
 * (P ≤ 4096); padding sorts last.
 *
 * TOP_K of longer rows (a vocabulary; k < MAXP - B) streams the row: the
 * first MAXP elements are sorted, then blocks of B elements are scanned and
 * only those that come before the current k-th (the threshold, which only
 * rises) are appended behind the first k slots; when the next block might
 * not fit, the slots are sorted again and the threshold updated. An element
 * dropped was behind k others already, so the result is the reference's,
 * ties included; on random data most blocks append nothing and the row
 * costs about two sorts.
 */
#include "common.glsl"
#define WG 256
#define MAXP 4096
#define B 1024u
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
/* While candidates are appended, the last index slot counts them: appends
 * stop short of it, and after a sort only the first k slots matter (the
 * 32 KiB of the two arrays are all the shared memory lavapipe has). */
#define NFILL si[MAXP - 1u]

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

#define PAD 0xffffffffu /* the index of padding: after every real element */

/* Sorts sv/si[0, P) into the output order (P a power of two). */
void sort_shared(uint P, uint C)
{
    const uint tid = gl_LocalInvocationID.x;
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
}

/* The streaming TOP_K of a row longer than MAXP (see the header). */
void top_k_long(uint64_t x, uint C, uint K)
{
    const uint tid = gl_LocalInvocationID.x;
    for (uint i = tid; i < MAXP; i += WG) {
        sv[i] = RF32(x).v[i];
        si[i] = i;
    }
    barrier();
    sort_shared(MAXP, C);
    float tv = sv[K - 1u];
    uint ti = si[K - 1u];
    barrier();
    if (tid == 0u)
        NFILL = 0u;
    barrier();
    for (uint b = MAXP; b < C; b += B) {
        const uint fill = NFILL;
        barrier();
        if (K + fill + B > MAXP - 1u) {
            for (uint i = K + fill + tid; i < MAXP; i += WG) {
                sv[i] = 0.0;
                si[i] = PAD;
            }
            barrier();
            sort_shared(MAXP, C);
            tv = sv[K - 1u];
            ti = si[K - 1u];
            barrier();
            if (tid == 0u)
                NFILL = 0u;
            barrier();
        }
        const uint end = min(b + B, C);
        for (uint g = b + tid; g < end; g += WG) {
            const float v = RF32(x).v[g];
            if (before(v, g, tv, ti, C)) {
                const uint slot = K + atomicAdd(NFILL, 1u);
                sv[slot] = v;
                si[slot] = g;
            }
        }
        barrier();
    }
    const uint fill = NFILL; /* read by all before the padding overwrites it */
    barrier();
    for (uint i = K + fill + tid; i < MAXP; i += WG) {
        sv[i] = 0.0;
        si[i] = PAD;
    }
    barrier();
    sort_shared(MAXP, C);
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
    const uint64_t y = pc.dst + uint64_t(row) * pc.k * 4u;
    if (C > MAXP) {
        top_k_long(x, C, pc.k);
        for (uint i = tid; i < pc.k; i += WG)
            RI32(y).v[i] = int(si[i]);
        return;
    }
    for (uint i = tid; i < P; i += WG) {
        sv[i] = i < C ? RF32(x).v[i] : 0.0;
        si[i] = i;
    }
    barrier();
    sort_shared(P, C);
    for (uint i = tid; i < pc.k; i += WG)
        RI32(y).v[i] = int(si[i]);
}
