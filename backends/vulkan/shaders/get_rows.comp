#version 450
/* get_rows.comp — GET_ROWS: a: [E, R, B2, B3] (F32, F16, BF16, Q8_0, I32),
 * ids: I32 [n, B2, B3] → dst [E, n, B2, B3] (F32; I32 for an I32 table):
 * dst[:, i, b2, b3] = a[:, ids[i, b2, b3], b2, b3]. One invocation per
 * output element; an index outside [0, R) writes zeros and is reported.
 */
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t ids;
    uint64_t dst;
    uint64_t err;
    uint ne[4];
    uint anb[3];
    uint inb[2];
    uint atype;
    uint arows;
    uint site;
} pc;

void main()
{
    const uint i = flat_id();
    const uint n = pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3];
    if (i >= n)
        return;
    const uint i0 = i % pc.ne[0];
    const uvec3 rc = row_coords(i / pc.ne[0], pc.ne[1], pc.ne[2]);
    const int row = RI32(pc.ids + uint64_t(rc.x) * 4u + uint64_t(rc.y) * pc.inb[0] +
                         uint64_t(rc.z) * pc.inb[1]).v[0];
    const uint64_t out_a = pc.dst + uint64_t(i) * 4u;
    if (row < 0 || uint(row) >= pc.arows) {
        RU32(out_a).v[0] = 0u;
        if (i0 == 0u)
            report_error(pc.err, pc.site, row);
        return;
    }
    const uint64_t arow = pc.a + uint64_t(row) * pc.anb[0] + uint64_t(rc.y) * pc.anb[1] +
                          uint64_t(rc.z) * pc.anb[2];
    if (pc.atype == T_I32) {
        RU32(out_a).v[0] = RU32(arow + uint64_t(i0) * 4u).v[0];
    } else if (pc.atype == T_Q8_0) {
        const uint64_t b = arow + uint64_t(i0 / 32u) * 34u;
        RF32(out_a).v[0] = q8_scale(b) * q8_val(b, i0 % 32u);
    } else {
        RF32(out_a).v[0] = ld(pc.atype, arow + uint64_t(i0) * esize(pc.atype));
    }
}
