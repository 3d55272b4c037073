#version 450
/* mul_mat_vec.comp — MUL_MAT for few columns (decode): W: [K, N, B2, B3]
 * (type WTYPE, dense rows), X: F32 [K, T, C2, C3] (T ≤ 8, dense rows),
 * Y = Wᵀ·X: F32 [N, T, C2, C3] contiguous; W broadcast over batches
 * (C2 % B2 == 0, C3 % B3 == 0). A workgroup computes ROWS rows of Y for
 * every column: each thread sums a strided share of k (whole Q8_0 blocks),
 * reading each weight once for all columns; shared memory reduces.
 */
#include "common.glsl"
#include "weights.glsl"
#define WG 64
#define ROWS 2
#define MAXT 8
layout(local_size_x = WG) in;
layout(push_constant) uniform PC {
    uint64_t w;
    uint64_t x;
    uint64_t y;
    uint K, N, T;
    uint C2, r2, r3; /* x batches along dim 2; w batch = (c2 / r2, c3 / r3) */
    uint wnb[3];
    uint xnb[3];
} pc;

shared float red[ROWS * MAXT][WG];

void main()
{
    const uint n0 = group_id() * ROWS;
    if (n0 >= pc.N)
        return;
    const uint batch = gl_WorkGroupID.z;
    const uint c2 = batch % pc.C2, c3 = batch / pc.C2;
    const uint tid = gl_LocalInvocationID.x;
    const uint64_t wb = pc.w + uint64_t(c2 / pc.r2) * pc.wnb[1] + uint64_t(c3 / pc.r3) * pc.wnb[2];
    const uint64_t xb = pc.x + uint64_t(c2) * pc.xnb[1] + uint64_t(c3) * pc.xnb[2];
    float acc[ROWS][MAXT];
    for (uint r = 0u; r < ROWS; r++)
        for (uint t = 0u; t < MAXT; t++)
            acc[r][t] = 0.0;
#if WTYPE == 3
    for (uint blk = tid; blk < pc.K / 32u; blk += WG) {
        for (uint r = 0u; r < ROWS; r++) {
            if (n0 + r >= pc.N)
                break;
            const uint64_t b = wb + uint64_t(n0 + r) * pc.wnb[0] + uint64_t(blk) * 34u;
            const float d = q8_scale(b);
            for (uint t = 0u; t < pc.T; t++) {
                const uint64_t xc = xb + uint64_t(t) * pc.xnb[0];
                float s = 0.0;
                for (uint j = 0u; j < 32u; j++)
                    s += q8_val(b, j) * RF32(xc).v[32u * blk + j];
                acc[r][t] += d * s;
            }
        }
    }
#else
    for (uint k = tid; k < pc.K; k += WG) {
        float xv[MAXT];
        for (uint t = 0u; t < pc.T; t++)
            xv[t] = RF32(xb + uint64_t(t) * pc.xnb[0]).v[k];
        for (uint r = 0u; r < ROWS; r++) {
            if (n0 + r >= pc.N)
                break;
            const float wv = wload(wb + uint64_t(n0 + r) * pc.wnb[0], k);
            for (uint t = 0u; t < pc.T; t++)
                acc[r][t] += wv * xv[t];
        }
    }
#endif
    for (uint r = 0u; r < ROWS; r++)
        for (uint t = 0u; t < MAXT; t++)
            red[r * MAXT + t][tid] = acc[r][t];
    barrier();
    for (uint k = WG / 2u; k > 0u; k >>= 1) {
        if (tid < k)
            for (uint j = 0u; j < ROWS * MAXT; j++)
                red[j][tid] += red[j][tid + k];
        barrier();
    }
    if (tid < ROWS * MAXT) {
        const uint r = tid / MAXT, t = tid % MAXT;
        if (n0 + r < pc.N && t < pc.T)
            RF32(pc.y + 4u * (uint64_t(batch) * pc.T * pc.N + uint64_t(t) * pc.N + n0 + r)).v[0] =
                red[tid][0];
    }
}
