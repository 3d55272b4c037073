#version 450
/* binary.comp — ADD, SUB, MUL, DIV: dst = a ∘ b with b broadcast
 * (a.ne[i] % b.ne[i] == 0). a, dst: F32/F16/BF16 (same type, dst
 * contiguous); b: a's type or F32; rows of a and b dense. Computed in F32,
 * rounded once into dst, as the reference does. One invocation per element.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t b;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    uint bne[4];
    uint bnb[3];
    uint atype;
    uint btype;
    uint op; /* 0 add, 1 sub, 2 mul, 3 div */
} pc;

void main()
{
    const uint i = flat_id();
    if (i >= pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    const uint i0 = i % pc.ne[0];
    const uvec3 rc = row_coords(i / pc.ne[0], pc.ne[1], pc.ne[2]);
    const uint ea = esize(pc.atype);
    const float x = ld(pc.atype, pc.a + uint64_t(i0) * ea + uint64_t(rc.x) * pc.anb[0] +
                                     uint64_t(rc.y) * pc.anb[1] + uint64_t(rc.z) * pc.anb[2]);
    const float y = ld(pc.btype, pc.b + uint64_t(i0 % pc.bne[0]) * esize(pc.btype) +
                                     uint64_t(rc.x % pc.bne[1]) * pc.bnb[0] +
                                     uint64_t(rc.y % pc.bne[2]) * pc.bnb[1] +
                                     uint64_t(rc.z % pc.bne[3]) * pc.bnb[2]);
    float r;
    if (pc.op == 0u)
        r = x + y;
    else if (pc.op == 1u)
        r = x - y;
    else if (pc.op == 2u)
        r = x * y;
    else
        r = x / y;
    st(pc.atype, pc.dst + uint64_t(i) * ea, r);
}
