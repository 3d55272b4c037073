#version 450
/* set_rows.comp — SET_ROWS: dst: [E, R, B2, B3] (F32, F16, BF16, Q8_0),
 * src: F32 [E, n, B2, B3], ids: I32 [n, C2, C3] broadcast over dims 2, 3:
 * dst[:, ids[i, b2 % C2, b3 % C3], b2, b3] = src[:, i, b2, b3]. One
 * invocation per element (per 32-element block for Q8_0, quantized exactly
 * as core/types.c). An index outside [0, R) skips the row and is reported.
 */
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t dst;
    uint64_t src;
    uint64_t ids;
    uint64_t err;
    uint ne[4]; /* src */
    uint snb[3];
    uint dnb[3];
    uint inb[2];
    uint ine[2]; /* ids ne[1], ne[2] */
    uint dtype;
    uint drows;
    uint site;
} pc;

void main()
{
    const uint i = flat_id();
    const uint per_row = pc.dtype == T_Q8_0 ? pc.ne[0] / 32u : pc.ne[0];
    if (i >= per_row * pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    const uint j = i % per_row;
    const uvec3 rc = row_coords(i / per_row, pc.ne[1], pc.ne[2]);
    const int row = RI32(pc.ids + uint64_t(rc.x) * 4u + uint64_t(rc.y % pc.ine[0]) * pc.inb[0] +
                         uint64_t(rc.z % pc.ine[1]) * pc.inb[1]).v[0];
    if (row < 0 || uint(row) >= pc.drows) {
        if (j == 0u)
            report_error(pc.err, pc.site, row);
        return;
    }
    const uint64_t srow = pc.src + uint64_t(rc.x) * pc.snb[0] + uint64_t(rc.y) * pc.snb[1] +
                          uint64_t(rc.z) * pc.snb[2];
    const uint64_t drow = pc.dst + uint64_t(row) * pc.dnb[0] + uint64_t(rc.y) * pc.dnb[1] +
                          uint64_t(rc.z) * pc.dnb[2];
    if (pc.dtype != T_Q8_0) {
        st(pc.dtype, drow + uint64_t(j) * esize(pc.dtype), RF32(srow).v[j]);
        return;
    }
    float x[32];
    float amax = 0.0;
    for (uint k = 0u; k < 32u; k++) {
        x[k] = RF32(srow).v[32u * j + k];
        amax = max(amax, abs(x[k]));
    }
    precise const float d = amax / 127.0;
    precise const float id = d > 0.0 ? 1.0 / d : 0.0;
    const uint64_t b = drow + uint64_t(j) * 34u;
    RU16(b).v[0] = uint16_t(f32_to_f16(d));
    for (uint k = 0u; k < 32u; k += 2u) {
        precise const float v0 = x[k] * id, v1 = x[k + 1u] * id;
        const uint q0 = uint(int(roundEven(v0))) & 0xffu;
        const uint q1 = uint(int(roundEven(v1))) & 0xffu;
        RU16(b).v[1u + k / 2u] = uint16_t(q0 | (q1 << 8));
    }
}
