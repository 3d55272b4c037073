#version 450
/* mul_mat.comp — MUL_MAT, tiled GEMM: W: [K, N, B2, B3] (type WTYPE,
 * dense rows), X: F32 [K, T, C2, C3] (dense rows), Y = Wᵀ·X: F32
 * [N, T, C2, C3] contiguous, y[n, t] = Σ_k W[k, n]·X[k, t]; W broadcast
 * over batches. A workgroup of 256 computes a BM×BN = 64×64 tile of Y: per
 * step of BK = 16 k it stages W and X tiles (converted to F32) in shared
 * memory, then each thread accumulates a 4×4 block in registers.
 */
#include "common.glsl"
#include "weights.glsl"
#define BM 64
#define BN 64
#define BK 16
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t w;
    uint64_t x;
    uint64_t y;
    uint K, N, T;
    uint C2, r2, r3;
    uint wnb[3];
    uint xnb[3];
} pc;

shared float ws[BK][BM + 4];
shared float xs[BK][BN + 4];

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
    const uint batch = gl_WorkGroupID.z;
    const uint c2 = batch % pc.C2, c3 = batch / pc.C2;
    const uint64_t wb = pc.w + uint64_t(c2 / pc.r2) * pc.wnb[1] + uint64_t(c3 / pc.r3) * pc.wnb[2];
    const uint64_t xb = pc.x + uint64_t(c2) * pc.xnb[1] + uint64_t(c3) * pc.xnb[2];
    const uint tx = tid % 16u, ty = tid / 16u; /* rows tx*4.., columns ty*4.. */
    const uint lk = tid % BK, lr = tid / BK;   /* loader: k, and row/column base */
    float acc[4][4];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++)
            acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        const uint k = k0 + lk;
        for (uint j = 0u; j < 4u; j++) {
            const uint n = n0 + lr + 16u * j;
            ws[lk][lr + 16u * j] =
                (k < pc.K && n < pc.N) ? wload(wb + uint64_t(n) * pc.wnb[0], k) : 0.0;
            const uint t = t0 + lr + 16u * j;
            xs[lk][lr + 16u * j] =
                (k < pc.K && t < pc.T) ? RF32(xb + uint64_t(t) * pc.xnb[0]).v[k] : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk++) {
            float a[4], b[4];
            for (uint i = 0u; i < 4u; i++) {
                a[i] = ws[kk][tx * 4u + i];
                b[i] = xs[kk][ty * 4u + i];
            }
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 4u; j++)
                    acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
    const uint64_t yb = pc.y + uint64_t(batch) * pc.T * pc.N * 4u;
    for (uint j = 0u; j < 4u; j++) {
        const uint t = t0 + ty * 4u + j;
        if (t >= pc.T)
            break;
        for (uint i = 0u; i < 4u; i++) {
            const uint n = n0 + tx * 4u + i;
            if (n < pc.N)
                RF32(yb + 4u * (uint64_t(t) * pc.N + n)).v[0] = acc[i][j];
        }
    }
}
