#version 450
/* mul_mat_texel.comp — MUL_MAT for CPU-like devices (lavapipe): W: [K, N,
 * B2, B3] F32 or F16 (RGBA32F / RGBA16F texels, K % 4 == 0, rows on 16 or
 * 8 bytes), or with WPACK F16 (1) or BF16 (2) 8 to an RGBA32UI texel
 * (K % 8 == 0, rows on 16 bytes); X: F32 [K, T, C2, C3]; Y = Wᵀ·X: F32
 * [N, T, C2, C3] contiguous. Not the GPU GEMM (mul_mat.comp).
 *
 * Why a separate kernel: a CPU implementation runs each memory load of a
 * shader once per SIMD lane, so loads, not arithmetic, bound a GEMM there,
 * and shared-memory tiling only adds loads. Texel fetches are its cheapest
 * load (~3x an SSBO or shared-memory load per float), so W and X are read
 * as RGBA texels (4 k at a time; an RGBA16F view converts F16 weights for
 * free) and each invocation keeps an R×C = 16×16 block of Y: one fetch
 * feeds 4·R or 4·C multiply-adds. No shared memory, no barrier. Edge rows
 * and columns are clamped on load and not stored.
 *
 * What bounds it on lavapipe (Mesa 22.3, LLVM 15, 8-wide AVX2 lanes; read
 * from the JIT code under perf): an RGBA32F or RGBA16F fetch is an
 * out-of-line function of ~37 instructions (llvmpipe inlines only RGBA8
 * UNORM fetches), 25–37 cycles per call; fma() becomes a multiply and an
 * add; the 256 accumulators live on the stack and every loop iteration
 * loads, blends (with the loop mask) and stores each of them. Every fetch
 * gives a lane 4 floats whatever the layout, so a lane with an R×C block
 * makes (R + C)·U calls per R·C·4U multiply-adds: only a bigger block cuts
 * the calls per multiply-add, and the loop body must stay within the
 * core's op cache (~6k instructions): 16×16 with U = 2 texels (8 k) per
 * iteration is 5.8k; 24×24, 32×32, or the same body unrolled twice run
 * 10–20% slower. The W fetch of row r+1 is issued before row r's
 * multiply-adds, so its latency overlaps them. F32 GEMM 1024³ on 2 Zen 5
 * cores: 63 GFLOP/s with U = 1, 95 with U = 2, 104 with the W fetch ahead;
 * without any fetch the same body would run at 330 (the arithmetic floor),
 * without the X fetches at 139. Tried and slower: lanes splitting K (then
 * a subgroupAdd per output), X through a uniform buffer (a gather: uniform
 * loads need offsets free of loop counters), storage-image loads, X
 * fetched a step ahead (loop-carried), subgroup broadcasts (a per-lane
 * loop), 512-bit lanes (LP_NATIVE_VECTOR_WIDTH=512: no faster).
 */
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#ifndef WPACK
#define WPACK 0
#endif
#define R 16
#define C 16
#define U 2
#define WG 32
layout(local_size_x = WG) in;
layout(set = 1, binding = 0) uniform samplerBuffer X;
#if WPACK
/* 8 weights per fetch: half the calls of 4-wide texels. */
layout(set = 0, binding = 0) uniform usamplerBuffer W;
#include "texel_pack.glsl"
/* W texels k and k+1 (k even) of row r: one RGBA32UI texel. */
#define LOADW(dst, r, UU)                                                          \
    {                                                                              \
        vec4 hi_;                                                                  \
        unpack8(texelFetch(W, wr[r] + k / 2), dst[0], hi_);                        \
        if (UU > 1)                                                                \
            dst[UU - 1] = hi_;                                                     \
    }
#else
layout(set = 0, binding = 0) uniform samplerBuffer W;
#define LOADW(dst, r, UU)                                                          \
    [[unroll]] for (int u = 0; u < UU; u++)                                        \
        dst[u] = texelFetch(W, wr[r] + k + u);
#endif
layout(push_constant) uniform PC {
    uint64_t y;
    uint K4, N, T, ttiles, ntiles;
    uint woff, wrow, wnb2, wnb3; /* in texels */
    uint xoff, xrow, xnb2, xnb3;
    uint C2, r2, r3;
} pc;

float acc[R][C];
int wr[R], xc[C];

/* acc += the products of texels k .. k+UU-1 (UU·4 values of k). For each
 * accumulator the UU·4 products are summed as a tree first, then added.
 * The texels of W row r+1 are fetched before row r is multiplied, so the
 * fetch (a call on lavapipe) overlaps the arithmetic of a row instead of
 * stalling it. */
#define STEP(UU)                                                                   \
    {                                                                              \
        vec4 xv[UU][C];                                                            \
        vec4 wv[2][UU];                                                            \
        LOADW(wv[0], 0, UU)                                                        \
        [[unroll]] for (int c = 0; c < C; c++)                                     \
            [[unroll]] for (int u = 0; u < UU; u++)                                \
                xv[u][c] = texelFetch(X, xc[c] + k + u);                           \
        [[unroll]] for (int r = 0; r < R; r++) {                                   \
            if (r + 1 < R)                                                         \
                LOADW(wv[(r + 1) & 1], r + 1, UU)                                  \
            [[unroll]] for (int c = 0; c < C; c++) {                               \
                vec4 s = wv[r & 1][0] * xv[0][c];                                  \
                [[unroll]] for (int u = 1; u < UU; u++)                            \
                    s += wv[r & 1][u] * xv[u][c];                                  \
                acc[r][c] += (s.x + s.y) + (s.z + s.w);                            \
            }                                                                      \
        }                                                                          \
    }

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
    [[unroll]] for (int r = 0; r < R; r++) {
        wr[r] = int(wb + min(n0 + uint(r), pc.N - 1u) * pc.wrow);
        [[unroll]] for (int c = 0; c < C; c++)
            acc[r][c] = 0.0;
    }
    [[unroll]] for (int c = 0; c < C; c++)
        xc[c] = int(xb + min(t0 + uint(c), pc.T - 1u) * pc.xrow);
    const int K4 = int(pc.K4);
    int k = 0;
    for (; k + U <= K4; k += U)
        STEP(U)
#if !WPACK
    /* An odd K / 4 leaves one texel (WPACK needs K % 8 == 0). */
    for (; k < K4; k++)
        STEP(1)
#endif
    const uint64_t yb = pc.y + uint64_t(batch) * pc.T * pc.N * 4u;
    [[unroll]] for (int c = 0; c < C; c++)
        [[unroll]] for (int r = 0; r < R; r++)
            if (n0 + uint(r) < pc.N && t0 + uint(c) < pc.T)
                RF32(yb + 4u * (uint64_t(t0 + uint(c)) * pc.N + n0 + uint(r))).v[0] = acc[r][c];
}
