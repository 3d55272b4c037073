#version 450
/* concat.comp — CONCAT: a and b joined along dim (other dims equal, the
 * same non-block type), any strides; dst contiguous. One invocation per
 * element, raw bits of esz (2 or 4) bytes.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t b;
    uint64_t dst;
    uint ne[4];
    uint anb[4];
    uint bnb[4];
    uint a_extent; /* a.ne[dim] */
    uint dim;
    uint esz;
} pc;

void main()
{
    const uint i = flat_id();
    if (i >= pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    uint c[4];
    uint r = i;
    for (int k = 0; k < 4; k++) {
        c[k] = r % pc.ne[k];
        r /= pc.ne[k];
    }
    uint64_t src;
    if (c[pc.dim] < pc.a_extent) {
        src = pc.a + uint64_t(c[0]) * pc.anb[0] + uint64_t(c[1]) * pc.anb[1] +
              uint64_t(c[2]) * pc.anb[2] + uint64_t(c[3]) * pc.anb[3];
    } else {
        c[pc.dim] -= pc.a_extent;
        src = pc.b + uint64_t(c[0]) * pc.bnb[0] + uint64_t(c[1]) * pc.bnb[1] +
              uint64_t(c[2]) * pc.bnb[2] + uint64_t(c[3]) * pc.bnb[3];
    }
    const uint64_t d = pc.dst + uint64_t(i) * pc.esz;
    if (pc.esz == 2u)
        RU16(d).v[0] = RU16(src).v[0];
    else
        RU32(d).v[0] = RU32(src).v[0];
}
