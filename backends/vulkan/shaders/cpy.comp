#version 450
/* cpy.comp — CPY and CONT between F32, F16, BF16 (converting) and I32
 * (same type only): dst[lin] = src[lin] where lin is the logical row-major
 * index of an element; the shapes may differ (equal element counts), every
 * stride is arbitrary. One invocation per element. Same-type copies move
 * the raw bits (NaN payloads and -0 survive).
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t src;
    uint64_t dst;
    uint sne[4];
    uint snb[4];
    uint dne[4];
    uint dnb[4];
    uint stype;
    uint dtype;
    uint n;
    uint same_shape;
} pc;

void main()
{
    const uint i = flat_id();
    if (i >= pc.n)
        return;
    uint r = i / pc.sne[0];
    const uint s0 = i - r * pc.sne[0];
    const uint s1 = r % pc.sne[1];
    r /= pc.sne[1];
    const uint s2 = r % pc.sne[2];
    const uint s3 = r / pc.sne[2];
    uint d0 = s0, d1 = s1, d2 = s2, d3 = s3;
    if (pc.same_shape == 0u) {
        r = i / pc.dne[0];
        d0 = i - r * pc.dne[0];
        d1 = r % pc.dne[1];
        r /= pc.dne[1];
        d2 = r % pc.dne[2];
        d3 = r / pc.dne[2];
    }
    const uint64_t sa = pc.src + uint64_t(s0) * pc.snb[0] + uint64_t(s1) * pc.snb[1] +
                        uint64_t(s2) * pc.snb[2] + uint64_t(s3) * pc.snb[3];
    const uint64_t da = pc.dst + uint64_t(d0) * pc.dnb[0] + uint64_t(d1) * pc.dnb[1] +
                        uint64_t(d2) * pc.dnb[2] + uint64_t(d3) * pc.dnb[3];
    if (pc.stype == pc.dtype) {
        if (esize(pc.stype) == 2u)
            RU16(da).v[0] = RU16(sa).v[0];
        else
            RU32(da).v[0] = RU32(sa).v[0];
    } else {
        st(pc.dtype, da, ld(pc.stype, sa));
    }
}
