#version 450
/* glu.comp — GLU: y = act(gate) · up, act = SiLU (kind 0) or GELU-tanh
 * (kind 1). With b: gate = a, up = b (swapped exchanges them); without:
 * a: [2F, ...] holds [gate | up] ([up | gate] when swapped). dst: [F, ...]
 * contiguous, F32/F16/BF16 like a. One invocation per output element.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t b;
    uint64_t dst;
    uint ne[4]; /* dst */
    uint anb[3];
    uint bnb[3];
    uint type;
    uint kind;
    uint swapped;
    uint has_b;
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
    const uint F = pc.ne[0];
    const uint i0 = i % F;
    const uvec3 rc = row_coords(i / F, pc.ne[1], pc.ne[2]);
    const uint e = esize(pc.type);
    const uint64_t arow = pc.a + uint64_t(rc.x) * pc.anb[0] + uint64_t(rc.y) * pc.anb[1] +
                          uint64_t(rc.z) * pc.anb[2];
    float g, u;
    if (pc.has_b != 0u) {
        const uint64_t brow = pc.b + uint64_t(rc.x) * pc.bnb[0] + uint64_t(rc.y) * pc.bnb[1] +
                              uint64_t(rc.z) * pc.bnb[2];
        g = ld(pc.type, arow + uint64_t(i0) * e);
        u = ld(pc.type, brow + uint64_t(i0) * e);
        if (pc.swapped != 0u) {
            const float t = g;
            g = u;
            u = t;
        }
    } else {
        g = ld(pc.type, arow + uint64_t(pc.swapped != 0u ? i0 + F : i0) * e);
        u = ld(pc.type, arow + uint64_t(pc.swapped != 0u ? i0 : i0 + F) * e);
    }
    const float act = pc.kind == 1u ? gelu(g) : g / (1.0 + exp(-g));
    st(pc.type, pc.dst + uint64_t(i) * e, act * u);
}
