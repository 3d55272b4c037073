#version 450
/* mul_mat_vec_texel.comp — MUL_MAT for few columns (T ≤ 8, decode) on
 * CPU-like devices: W: [K, N, B2, B3] F32 or F16 read as RGBA32F / RGBA16F
 * texels (K % 4 == 0), or with WPACK F16 (1) or BF16 (2) 8 to an RGBA32UI
 * texel (K % 8 == 0); X: F32 [K, T, C2, C3] as RGBA32F texels; Y = Wᵀ·X:
 * F32 [N, T, C2, C3] contiguous. Each invocation computes ROWS rows of Y
 * for every column, 4 k per fetch of X and 4 or 8 per fetch of W (see
 * mul_mat_texel.comp for why texel fetches: on a CPU implementation they
 * are the cheapest load, and their number bounds the kernel).
 */
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef WPACK
#define WPACK 0
#endif
#define ROWS 4
#define MAXT 8
#define WG 32
layout(local_size_x = WG) in;
#if WPACK
layout(set = 0, binding = 0) uniform usamplerBuffer W;
#include "texel_pack.glsl"
#else
layout(set = 0, binding = 0) uniform samplerBuffer W;
#endif
layout(set = 1, binding = 0) uniform samplerBuffer X;
layout(push_constant) uniform PC {
    uint64_t y;
    uint K4, N, T, ttiles, ntiles; /* ntiles = groups of ROWS rows; ttiles unused */
    uint woff, wrow, wnb2, wnb3;   /* in texels */
    uint xoff, xrow, xnb2, xnb3;
    uint C2, r2, r3;
} pc;

void main()
{
    const uint id = flat_id();
    if (id >= pc.ntiles)
        return;
    const uint batch = gl_WorkGroupID.z;
    const uint c2 = batch % pc.C2, c3 = batch / pc.C2;
    const uint n0 = id * ROWS;
    const uint wb = pc.woff + (c2 / pc.r2) * pc.wnb2 + (c3 / pc.r3) * pc.wnb3;
    const uint xb = pc.xoff + c2 * pc.xnb2 + c3 * pc.xnb3;
    float acc[ROWS][MAXT];
    int wr[ROWS], xc[MAXT];
    [[unroll]] for (int r = 0; r < ROWS; r++) {
        wr[r] = int(wb + min(n0 + uint(r), pc.N - 1u) * pc.wrow);
        [[unroll]] for (int t = 0; t < MAXT; t++)
            acc[r][t] = 0.0;
    }
    [[unroll]] for (int t = 0; t < MAXT; t++)
        xc[t] = int(xb + min(uint(t), pc.T - 1u) * pc.xrow);
#if WPACK
    for (int k = 0; k < int(pc.K4); k += 2) {
        vec4 wlo[ROWS], whi[ROWS];
        [[unroll]] for (int r = 0; r < ROWS; r++)
            unpack8(texelFetch(W, wr[r] + k / 2), wlo[r], whi[r]);
        [[unroll]] for (int t = 0; t < MAXT; t++) {
            if (uint(t) >= pc.T)
                break;
            const vec4 xa = texelFetch(X, xc[t] + k), xb = texelFetch(X, xc[t] + k + 1);
            [[unroll]] for (int r = 0; r < ROWS; r++) {
                const vec4 s = wlo[r] * xa + whi[r] * xb;
                acc[r][t] += (s.x + s.y) + (s.z + s.w);
            }
        }
    }
#else
    for (int k = 0; k < int(pc.K4); k++) {
        vec4 wv[ROWS];
        [[unroll]] for (int r = 0; r < ROWS; r++)
            wv[r] = texelFetch(W, wr[r] + k);
        [[unroll]] for (int t = 0; t < MAXT; t++) {
            if (uint(t) >= pc.T)
                break;
            const vec4 xv = texelFetch(X, xc[t] + k);
            [[unroll]] for (int r = 0; r < ROWS; r++)
                acc[r][t] = fma(wv[r].x, xv.x,
                                fma(wv[r].y, xv.y, fma(wv[r].z, xv.z, fma(wv[r].w, xv.w, acc[r][t]))));
        }
    }
#endif
    const uint64_t yb = pc.y + uint64_t(batch) * pc.T * pc.N * 4u;
    [[unroll]] for (int t = 0; t < MAXT; t++)
        [[unroll]] for (int r = 0; r < ROWS; r++)
            if (uint(t) < pc.T && n0 + uint(r) < pc.N)
                RF32(yb + 4u * (uint64_t(t) * pc.N + n0 + uint(r))).v[0] = acc[r][t];
}
