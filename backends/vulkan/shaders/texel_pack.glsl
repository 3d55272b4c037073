/* backends/vulkan/shaders/texel_pack.glsl — included by the texel kernels
 * built with WPACK: 8 F16 (WPACK 1) or BF16 (WPACK 2) weights from one
 * RGBA32UI texel, little-endian (the lower half of each word comes first).
 * Both conversions are exact.
 */
void unpack8(uvec4 u, out vec4 lo, out vec4 hi)
{
#if WPACK == 1
    lo = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
    hi = vec4(unpackHalf2x16(u.z), unpackHalf2x16(u.w));
#else
    lo = vec4(uintBitsToFloat(u.x << 16), uintBitsToFloat(u.x & 0xffff0000u),
              uintBitsToFloat(u.y << 16), uintBitsToFloat(u.y & 0xffff0000u));
    hi = vec4(uintBitsToFloat(u.z << 16), uintBitsToFloat(u.z & 0xffff0000u),
              uintBitsToFloat(u.w << 16), uintBitsToFloat(u.w & 0xffff0000u));
#endif
}
