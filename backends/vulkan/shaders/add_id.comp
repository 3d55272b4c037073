#version 450
/* add_id.comp — ADD_ID: a: F32 [E, U, T], b: F32 [E, n_expert],
 * ids: I32 [U, T] → dst [E, U, T] = a[:, u, t] + b[:, ids[u, t]]. An
 * expert outside [0, n_expert) copies a and is reported. One invocation per
 * element.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t b;
    uint64_t ids;
    uint64_t dst;
    uint64_t err;
    uint ne[3]; /* E, U, T */
    uint anb[2];
    uint bnb1;
    uint inb1;
    uint n_exp;
    uint site;
} pc;

void main()
{
    const uint i = flat_id();
    if (i >= pc.ne[0] * pc.ne[1] * pc.ne[2])
        return;
    const uint i0 = i % pc.ne[0];
    const uint r = i / pc.ne[0];
    const uint u = r % pc.ne[1], t = r / pc.ne[1];
    const float x = RF32(pc.a + uint64_t(u) * pc.anb[0] + uint64_t(t) * pc.anb[1]).v[i0];
    const int e = RI32(pc.ids + uint64_t(u) * 4u + uint64_t(t) * pc.inb1).v[0];
    float y = x;
    if (e < 0 || uint(e) >= pc.n_exp) {
        if (i0 == 0u)
            report_error(pc.err, pc.site, e);
    } else {
        y = x + RF32(pc.b + uint64_t(e) * pc.bnb1).v[i0];
    }
    RF32(pc.dst).v[i] = y;
}
