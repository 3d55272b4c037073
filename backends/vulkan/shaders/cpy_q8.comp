#version 450
/* cpy_q8.comp — copies involving Q8_0 (equal shapes, dense rows; ne[0] a
 * multiple of 32). mode 0: Q8_0 → Q8_0, one invocation per block (raw).
 * mode 1: F32/F16/BF16 → Q8_0, one invocation per block: d = amax/127,
 * q = round-to-even(x/d), exactly as core/types.c. mode 2: Q8_0 →
 * F32/F16/BF16, one invocation per element: x = d·q.
 * A block is 34 bytes: an f16 scale and 32 int8 (2-byte aligned).
 */
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform PC {
    uint64_t src;
    uint64_t dst;
    uint ne[4];
    uint snb[4];
    uint dnb[4];
    uint stype;
    uint dtype;
    uint n; /* blocks (modes 0, 1) or elements (mode 2) */
    uint mode;
} pc;

void main()
{
    const uint i = flat_id();
    if (i >= pc.n)
        return;
    const uint per_row = pc.mode == 2u ? pc.ne[0] : pc.ne[0] / 32u;
    const uint j = i % per_row;
    const uvec3 rc = row_coords(i / per_row, pc.ne[1], pc.ne[2]);
    const uint64_t srow = pc.src + uint64_t(rc.x) * pc.snb[1] + uint64_t(rc.y) * pc.snb[2] +
                          uint64_t(rc.z) * pc.snb[3];
    const uint64_t drow = pc.dst + uint64_t(rc.x) * pc.dnb[1] + uint64_t(rc.y) * pc.dnb[2] +
                          uint64_t(rc.z) * pc.dnb[3];
    if (pc.mode == 0u) {
        const uint64_t s = srow + uint64_t(j) * 34u, d = drow + uint64_t(j) * 34u;
        for (uint k = 0u; k < 17u; k++)
            RU16(d).v[k] = RU16(s).v[k];
    } else if (pc.mode == 1u) {
        float x[32];
        float amax = 0.0;
        for (uint k = 0u; k < 32u; k++) {
            x[k] = ld(pc.stype, srow + uint64_t(32u * j + k) * pc.snb[0]);
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
    } else {
        const uint64_t b = srow + uint64_t(j / 32u) * 34u;
        st(pc.dtype, drow + uint64_t(j) * pc.dnb[0], q8_scale(b) * q8_val(b, j % 32u));
    }
}
