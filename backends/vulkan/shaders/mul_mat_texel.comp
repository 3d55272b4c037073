#version 450
/* mul_mat_texel.comp — MUL_MAT for CPU-like devices (lavapipe): W: [K, N,
 * B2, B3] F32 (WTYPE 0) or F16 (WTYPE 1), X: F32 [K, T, C2, C3],
 * Y = Wᵀ·X: F32 [N, T, C2, C3] contiguous; K % 4 == 0, rows on 16-byte
 * (F32) or 8-byte (F16) boundaries.
 *
 * Why a separate kernel: a CPU implementation runs each memory load of a
 * shader once per SIMD lane, so loads, not arithmetic, bound a GEMM there,
 * and shared-memory tiling only adds loads. Texel fetches are its cheapest
 * load (measured ~3x an SSBO or shared-memory load per float), so W and X
 * are read as RGBA texels (4 k at a time; an RGBA16F view converts F16
 * weights for free) and each invocation keeps an R×C = 16×16 block of Y in
 * registers: one fetch feeds 4·R or 4·C multiply-adds. No shared memory, no
 * barrier. Edge rows and columns are clamped on load and not stored.
 */
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define R 16
#define C 16
#define WG 32
layout(local_size_x = WG) in;
layout(set = 0, binding = 0) uniform samplerBuffer W;
layout(set = 1, binding = 0) uniform samplerBuffer X;
layout(push_constant) uniform PC {
    uint64_t y;
    uint K4, N, T, ttiles, ntiles;
    uint woff, wrow, wnb2, wnb3; /* in texels */
    uint xoff, xrow, xnb2, xnb3;
    uint C2, r2, r3;
} pc;

void main()
{
    const uint id = flat_id();
    if (id >= pc.ttiles * pc.ntiles)
        return;
    const uint batch = gl_WorkGroupID.z;
    const uint c2 = batch % pc.C2, c3 = batch / pc.C2;
    /* Neighbouring invocations (SIMD lanes) take neighbouring row tiles and
     * share the columns: their X fetches hit the same texels. */
    const uint nt = id % pc.ntiles, tt = id / pc.ntiles;
    const uint n0 = nt * R, t0 = tt * C;
    const uint wb = pc.woff + (c2 / pc.r2) * pc.wnb2 + (c3 / pc.r3) * pc.wnb3;
    const uint xb = pc.xoff + c2 * pc.xnb2 + c3 * pc.xnb3;
    float acc[R][C];
    int wr[R], xc[C];
    [[unroll]] for (int r = 0; r < R; r++) {
        wr[r] = int(wb + min(n0 + uint(r), pc.N - 1u) * pc.wrow);
        [[unroll]] for (int c = 0; c < C; c++)
            acc[r][c] = 0.0;
    }
    [[unroll]] for (int c = 0; c < C; c++)
        xc[c] = int(xb + min(t0 + uint(c), pc.T - 1u) * pc.xrow);
    for (int k = 0; k < int(pc.K4); k++) {
        vec4 xv[C];
        [[unroll]] for (int c = 0; c < C; c++)
            xv[c] = texelFetch(X, xc[c] + k);
        [[unroll]] for (int r = 0; r < R; r++) {
            const vec4 wv = texelFetch(W, wr[r] + k);
            [[unroll]] for (int c = 0; c < C; c++)
                acc[r][c] = fma(wv.x, xv[c].x,
                                fma(wv.y, xv[c].y, fma(wv.z, xv[c].z, fma(wv.w, xv[c].w, acc[r][c]))));
        }
    }
    const uint64_t yb = pc.y + uint64_t(batch) * pc.T * pc.N * 4u;
    [[unroll]] for (int c = 0; c < C; c++)
        [[unroll]] for (int r = 0; r < R; r++)
            if (n0 + uint(r) < pc.N && t0 + uint(c) < pc.T)
                RF32(yb + 4u * (uint64_t(t0 + uint(c)) * pc.N + n0 + uint(r))).v[0] = acc[r][c];
}
