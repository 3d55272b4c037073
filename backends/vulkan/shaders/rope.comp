#version 450
/* rope.comp — ROPE: a: [D, H, T, B] (F32/F16, dense rows), pos: I32 [T].
 * The first n_dims of each head rotate: pair p < n_dims/2 is (2p, 2p+1)
 * (NORMAL) or (p, p + n_dims/2) (NEOX), by theta = pos·freq_scale·
 * base^(-2p/n_dims); the other dims pass through. dst contiguous, a's type.
 *
 * The reference computes theta, cos and sin in double precision; at
 * positions in the thousands a float theta is already off by 1e-4 rad. So
 * this shader does the same in double (GLSL has no double exp/sin/cos:
 * exp2 and sin/cos are evaluated here by range reduction and Taylor series
 * good to ~1e-16). ROPE_FLOAT=1 builds the float version for devices
 * without shaderFloat64 (accurate to ~1e-4 at position 4096).
 * One invocation per element; the first of each pair writes both.
 */
#if !ROPE_FLOAT
#extension GL_ARB_gpu_shader_fp64 : require
#endif
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform PC {
    uint64_t a;
    uint64_t pos;
    uint64_t dst;
    uint ne[4];
    uint anb[3];
    uint type;
    uint n_dims;
    uint neox;
    float freq_scale;
    uint log2_base[2]; /* the double log2(base), low word first */
    float log2_base_f;
} pc;

#if ROPE_FLOAT
#define REAL float
REAL theta_of(float p, uint i)
{
    return p * pc.freq_scale * exp2(-2.0 * float(i) / float(pc.n_dims) * pc.log2_base_f);
}
void cos_sin(REAL t, out REAL c, out REAL s)
{
    c = cos(t);
    s = sin(t);
}
#else
#define REAL double
/* 2^y for y ≤ 0 (a few tens at most): 2^floor(y) · e^(frac·ln2). */
double exp2d(double y)
{
    const double fl = floor(y);
    const double t = (y - fl) * 0.69314718055994530942LF;
    double term = 1.0, sum = 1.0;
    for (int k = 1; k <= 18; k++) {
        term *= t / double(k);
        sum += term;
    }
    return ldexp(sum, int(fl));
}
/* cos and sin of x: x = k·π/2 + r with |r| ≤ π/4 (π/2 in three parts, so
 * that r keeps full precision up to |x| ~ 1e9), then series of r. */
void cos_sin(double x, out double c, out double s)
{
    const double P1 = 1.57079632673412561417LF, P2 = 6.07710050630396597660e-11LF,
                 P3 = 2.02226624879595063154e-21LF;
    const double k = roundEven(x * 0.63661977236758134308LF);
    const double r = ((x - k * P1) - k * P2) - k * P3;
    const double r2 = r * r;
    double sr = r, cr = 1.0, ts = r, tc = 1.0;
    for (int n = 1; n <= 11; n++) {
        ts *= -r2 / double((2 * n) * (2 * n + 1));
        tc *= -r2 / double((2 * n - 1) * (2 * n));
        sr += ts;
        cr += tc;
    }
    const int q = int(k - 4.0LF * floor(k * 0.25LF));
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
}
double theta_of(float p, uint i)
{
    const double lb = packDouble2x32(uvec2(pc.log2_base[0], pc.log2_base[1]));
    return double(p) * double(pc.freq_scale) * exp2d(-2.0 * double(i) / double(pc.n_dims) * lb);
}
#endif

void main()
{
    const uint idx = flat_id();
    if (idx >= pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3])
        return;
    const uint i0 = idx % pc.ne[0];
    const uvec3 rc = row_coords(idx / pc.ne[0], pc.ne[1], pc.ne[2]); /* h, t, b */
    const uint e = esize(pc.type);
    const uint64_t x = pc.a + uint64_t(rc.x) * pc.anb[0] + uint64_t(rc.y) * pc.anb[1] +
                       uint64_t(rc.z) * pc.anb[2];
    const uint64_t y = pc.dst + uint64_t(idx - i0) * e;
    if (i0 >= pc.n_dims) {
        st(pc.type, y + uint64_t(i0) * e, ld(pc.type, x + uint64_t(i0) * e));
        return;
    }
    const uint half_n = pc.n_dims / 2u;
    uint p, j0, j1;
    if (pc.neox != 0u) {
        if (i0 >= half_n)
            return;
        p = i0;
        j0 = i0;
        j1 = i0 + half_n;
    } else {
        if ((i0 & 1u) != 0u)
            return;
        p = i0 / 2u;
        j0 = i0;
        j1 = i0 + 1u;
    }
    const float position = float(RI32(pc.pos).v[rc.y]);
    REAL c, s;
    cos_sin(theta_of(position, p), c, s);
    const REAL x0 = REAL(ld(pc.type, x + uint64_t(j0) * e));
    const REAL x1 = REAL(ld(pc.type, x + uint64_t(j1) * e));
    st(pc.type, y + uint64_t(j0) * e, float(x0 * c - x1 * s));
    st(pc.type, y + uint64_t(j1) * e, float(x0 * s + x1 * c));
}
