#version 450
/* unary.comp — SCALE (y = s·x + bias), FILL (y = s; also I32), SILU
 * (x / (1 + e^-x)), GELU (tanh approximation). a, dst: the same type
 * (F32/F16/BF16), dst contiguous, rows of a dense. One invocation per
 * element.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    uint type;
    uint op; /* 0 scale, 1 fill, 2 silu, 3 gelu */
    float s;
    float bias;
} pc;

float gelu(float x)
{
    const float c = 0.7978845608028654;
    const float z = clamp(c * (x + 0.044715 * x * x * x), -15.0, 15.0);
    return 0.5 * x * (1.0 + tanh(z));
}

void main()
{
    const uint i = flat_id();
    if (i >= pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    if (pc.op == 1u) {
        if (pc.type == T_I32)
            RI32(pc.dst).v[i] = int(pc.s);
        else
            st(pc.type, pc.dst + uint64_t(i) * esize(pc.type), pc.s);
        return;
    }
    const uint i0 = i % pc.ne[0];
    const uvec3 rc = row_coords(i / pc.ne[0], pc.ne[1], pc.ne[2]);
    const uint e = esize(pc.type);
    const float x = ld(pc.type, pc.a + uint64_t(i0) * e + uint64_t(rc.x) * pc.anb[0] +
                                    uint64_t(rc.y) * pc.anb[1] + uint64_t(rc.z) * pc.anb[2]);
    float y;
    if (pc.op == 0u)
        y = pc.s * x + pc.bias;
    else if (pc.op == 2u)
        y = x / (1.0 + exp(-x));
    else
        y = gelu(x);
    st(pc.type, pc.dst + uint64_t(i) * e, y);
}
