#version 450
/* mul_mat_id.comp — MUL_MAT_ID: W: [K, N, E] experts (type WTYPE),
 * X: F32 [K, U or 1, T], ids: I32 [U, T] → Y: F32 [N, U, T],
 * y[:, u, t] = W[:, :, ids[u, t]]ᵀ · x[:, u (or 0), t]. A workgroup
 * computes ROWS rows of one slot (u, t); an expert outside [0, E) writes
 * zeros and is reported.
 */
#include "common.glsl"
#include "weights.glsl"
#define WG 64
#define ROWS 4
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t w;
    uint64_t x;
    uint64_t ids;
    uint64_t y;
    uint64_t err;
    uint K, N, E, U;
    uint x_shared; /* x.ne[1] == 1 */
    uint wnb[2];
    uint xnb[2];
    uint inb1;
    uint site;
} pc;

shared float red[ROWS][WG];

void main()
{
    const uint n0 = gl_WorkGroupID.x * ROWS;
    const uint slot = gl_WorkGroupID.y; /* u + U·t */
    const uint u = slot % pc.U, t = slot / pc.U;
    const uint tid = gl_LocalInvocationID.x;
    const int e = RI32(pc.ids + uint64_t(u) * 4u + uint64_t(t) * pc.inb1).v[0];
    const uint64_t yrow = pc.y + uint64_t(slot) * pc.N * 4u;
    if (e < 0 || uint(e) >= pc.E) {
        for (uint r = tid; r < ROWS; r += WG)
            if (n0 + r < pc.N)
                RF32(yrow).v[n0 + r] = 0.0;
        if (tid == 0u && n0 == 0u)
            report_error(pc.err, pc.site, e);
        return;
    }
    const uint64_t wb = pc.w + uint64_t(e) * pc.wnb[1];
    const uint64_t xc = pc.x + uint64_t(pc.x_shared != 0u ? 0u : u) * pc.xnb[0] +
                        uint64_t(t) * pc.xnb[1];
    float acc[ROWS];
    for (uint r = 0u; r < ROWS; r++)
        acc[r] = 0.0;
    for (uint k = tid; k < pc.K; k += WG) {
        const float xv = RF32(xc).v[k];
        for (uint r = 0u; r < ROWS; r++)
            if (n0 + r < pc.N)
                acc[r] += wload(wb + uint64_t(n0 + r) * pc.wnb[0], k) * xv;
    }
    for (uint r = 0u; r < ROWS; r++)
        red[r][tid] = acc[r];
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            for (uint r = 0u; r < ROWS; r++)
                red[r][tid] += red[r][tid + k];
        barrier();
    }
    if (tid < ROWS && n0 + tid < pc.N)
        RF32(yrow).v[n0 + tid] = red[tid][0];
}
