/* backends/vulkan/shaders/common.glsl — included by every compute shader:
 * extensions, typed views of device memory through buffer device addresses,
 * exact conversions between the storage types and F32, grid helpers and
 * the error word.
 *
 * Tensors are reached by address, never through descriptors: a shader gets
 * the device address of element [0, 0, 0, 0] and byte strides in its push
 * constants, so no binding range (maxStorageBufferRange) limits a tensor.
 * Type codes follow tsr_type: 0 F32, 1 F16, 2 BF16, 3 Q8_0, 4 I32.
 * Conversions are bit-exact with core/types.c (round to nearest even, NaN
 * kept quiet), so copies and row writes match the CPU reference exactly.
 */
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require

#define T_F32 0u
#define T_F16 1u
#define T_BF16 2u
#define T_Q8_0 3u
#define T_I32 4u

layout(buffer_reference, std430, buffer_reference_align = 4) buffer RF32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer RU32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer RI32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer RU16 { uint16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer RV4 { vec4 v[]; };
/* The stream's error word: {flag, site, value}; the first failure wins. */
layout(buffer_reference, std430, buffer_reference_align = 4) buffer RErr { uint flag; uint site; int value; };

float f16_to_f32(uint h)
{
    const uint sign = (h & 0x8000u) << 16;
    const uint e = (h >> 10) & 0x1fu;
    const uint m = h & 0x3ffu;
    if (e == 0x1fu)
        return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
    if (e == 0u) {
        const float v = float(m) * 5.9604644775390625e-8; /* 2^-24 */
        return sign != 0u ? -v : v;
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

uint f32_to_f16(float f)
{
    const uint u = floatBitsToUint(f);
    const uint sign = (u >> 16) & 0x8000u;
    const uint a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u)
        return sign | 0x7c00u;
    if (a < 0x38800000u)
        return sign | uint(roundEven(uintBitsToFloat(a) * 16777216.0));
    const uint r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | ((r - (112u << 23)) >> 13);
}

float bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

uint f32_to_bf16(float f)
{
    const uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* One element of a non-block type at byte address a, as F32. */
float ld(uint t, uint64_t a)
{
    if (t == T_F32)
        return RF32(a).v[0];
    if (t == T_F16)
        return f16_to_f32(uint(RU16(a).v[0]));
    if (t == T_BF16)
        return bf16_to_f32(uint(RU16(a).v[0]));
    return float(RI32(a).v[0]);
}

/* Stores x into one element of a float type at byte address a. */
void st(uint t, uint64_t a, float x)
{
    if (t == T_F32)
        RF32(a).v[0] = x;
    else if (t == T_F16)
        RU16(a).v[0] = uint16_t(f32_to_f16(x));
    else
        RU16(a).v[0] = uint16_t(f32_to_bf16(x));
}

/* Element size in bytes of a non-block type. */
uint esize(uint t) { return (t == T_F16 || t == T_BF16) ? 2u : 4u; }

/* A Q8_0 block at byte address b (2-byte aligned): its scale, and value j
 * without the scale. */
float q8_scale(uint64_t b) { return f16_to_f32(uint(RU16(b).v[0])); }
float q8_val(uint64_t b, uint j)
{
    const uint pair = uint(RU16(b).v[1u + (j >> 1)]);
    return float(int(pair << (24u - 8u * (j & 1u))) >> 24);
}

/* The linear index of this invocation over a grid that may be folded into
 * two dimensions (gx ≤ 65535 groups along x). A macro: gl_WorkGroupSize is
 * only known after the shader's local_size declaration, which follows this
 * file. */
#define flat_id()                                                                    \
    ((gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x + \
     gl_LocalInvocationID.x)

/* Row r of a [*, n1, n2, n3] tensor as (i1, i2, i3). */
uvec3 row_coords(uint r, uint n1, uint n2)
{
    const uint i1 = r % n1;
    const uint q = r / n1;
    return uvec3(i1, q % n2, q / n2);
}

/* Records the first run-time error (site of the node, offending value). */
void report_error(uint64_t err, uint site, int value)
{
    if (atomicCompSwap(RErr(err).flag, 0u, 1u) == 0u) {
        RErr(err).site = site;
        RErr(err).value = value;
    }
}

/* The linear index of this workgroup over a folded grid. */
uint group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
