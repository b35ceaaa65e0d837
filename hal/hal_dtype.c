/* Element types of the kernels: sizes, names, slot and summary sizes, and the
 * f32 <-> f16 / bf16 conversions every backend and test uses (round to
 * nearest even). Declared in include/oasiskv/kernels.h.
 * Owns: nothing but these pure functions.
 * May touch: nothing (no HAL object, no state). */
#include <string.h>

#include "oasiskv/kernels.h"

size_t okv_dtype_size(okv_dtype_t dtype) {
  switch (dtype) {
    case OKV_DTYPE_F32: return 4;
    case OKV_DTYPE_F16: return 2;
    case OKV_DTYPE_BF16: return 2;
    default: return 0;
  }
}

const char *okv_dtype_name(okv_dtype_t dtype) {
  switch (dtype) {
    case OKV_DTYPE_F32: return "f32";
    case OKV_DTYPE_F16: return "f16";
    case OKV_DTYPE_BF16: return "bf16";
    case OKV_DTYPE_Q8: return "q8";
    case OKV_DTYPE_C4: return "c4";
    default: return "unknown";
  }
}

uint64_t okv_block_bytes(okv_dtype_t dtype, uint32_t head_dim) {
  return 2ull * OKV_BLOCK_TOKENS * (uint64_t)head_dim * (uint64_t)okv_dtype_size(dtype);
}

uint64_t okv_summary_bytes(uint32_t head_dim) { return 2ull * (uint64_t)head_dim * 4ull; }

uint64_t okv_summary_bytes_ex(okv_dtype_t summary_dtype, uint32_t head_dim) {
  if (summary_dtype == OKV_DTYPE_Q8) return 8ull + ((2ull * (uint64_t)head_dim + 7ull) & ~7ull);
  if (summary_dtype == OKV_DTYPE_C4) return 12ull + ((((uint64_t)head_dim + 1ull) / 2ull + 3ull) & ~3ull);
  return 2ull * (uint64_t)head_dim * (uint64_t)okv_dtype_size(summary_dtype);
}

/* ---- conversions (round to nearest even) ---- */

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

uint16_t okv_f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float okv_bf16_to_f32(uint16_t x) { return bits_f32((uint32_t)x << 16); }

uint16_t okv_f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN stays NaN */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);                       /* rounds to >= 65520: infinity */
  if (a < 0x38800000u) {
    /* f16 subnormal or zero: value = m * 2^-24, m = round(a_value * 2^24). */
    if (a < 0x33000000u) return sign; /* < 2^-25: rounds to zero (2^-25 ties to even 0) */
    uint32_t e = a >> 23;             /* biased exponent, 102..112 */
    uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24: mant * 2^(e-150) * 2^24 = mant >> (126 - e) */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* Normal: rebias exponent 127 -> 15 and round 23 -> 10 mantissa bits. */
  uint32_t r = a - 0x38000000u; /* exponent - 112 */
  r += 0xFFFu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

float okv_f16_to_f32(uint16_t x) {
  uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
  uint32_t e = (x >> 10) & 0x1Fu;
  uint32_t m = x & 0x3FFu;
  if (e == 0x1Fu) return bits_f32(sign | 0x7F800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_f32(sign);
    float v = (float)m * 0x1.0p-24f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- directed narrowing (summaries) ----
 * Round to nearest even first, then step one unit in the last place toward
 * the wanted side when the nearest value lies on the other side of x. The
 * 16-bit patterns of f16 and bf16 are both sign-magnitude, so a step is +-1 on
 * the pattern, with the zero crossing handled apart. */

/* The pattern one step above (up) or below (!up) h, for a sign-magnitude
 * 16-bit float pattern. */
static uint16_t step16(uint16_t h, bool up) {
  const bool neg = (h & 0x8000u) != 0;
  if ((h & 0x7FFFu) == 0) return up ? 0x0001u : 0x8001u; /* from +-0: the smallest subnormal of that side */
  return (uint16_t)(neg == up ? h - 1u : h + 1u);        /* toward zero: magnitude - 1; away: + 1 */
}

static uint16_t narrow_dir(float x, bool up, uint16_t (*to)(float), float (*from)(uint16_t)) {
  uint16_t h = to(x);
  float v = from(h);
  if (x != x || v == x) return h; /* NaN, or exact (-0 stays -0) */
  if (up ? v < x : v > x) h = step16(h, up);
  return h;
}

uint16_t okv_f32_to_bf16_down(float x) { return narrow_dir(x, false, okv_f32_to_bf16, okv_bf16_to_f32); }
uint16_t okv_f32_to_bf16_up(float x) { return narrow_dir(x, true, okv_f32_to_bf16, okv_bf16_to_f32); }
uint16_t okv_f32_to_f16_down(float x) { return narrow_dir(x, false, okv_f32_to_f16, okv_f16_to_f32); }
uint16_t okv_f32_to_f16_up(float x) { return narrow_dir(x, true, okv_f32_to_f16, okv_f16_to_f32); }
