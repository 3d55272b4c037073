/* backends/vulkan/shaders/weights.glsl — element k of a weight row at
 * byte address `row`, as F32, for the weight type WTYPE fixed at build time
 * (0 F32, 1 F16, 2 BF16, 3 Q8_0: 34-byte blocks of an f16 scale and 32
 * int8). Included by the matrix kernels after common.glsl.
 */
#if WTYPE == 0
float wload(uint64_t row, uint k) { return RF32(row).v[k]; }
#elif WTYPE == 1
float wload(uint64_t row, uint k) { return unpackHalf2x16(uint(RU16(row).v[k])).x; }
#elif WTYPE == 2
float wload(uint64_t row, uint k) { return uintBitsToFloat(uint(RU16(row).v[k]) << 16); }
#else
float wload(uint64_t row, uint k)
{
    const uint64_t b = row + uint64_t(k / 32u) * 34u;
    return q8_scale(b) * q8_val(b, k % 32u);
}
#endif
