/* Double-precision reference of the 8-bit summary format (OKV_DTYPE_Q8,
 * include/oasiskv/kernels.h), free of library calls so that the GPU emulator
 * test can link it beside the GPU kernel source. */
#include <math.h>
#include <string.h>

#include "tests/kernels/kernel_ref.h"

/* OKV_DTYPE_Q8 score of one row (include/oasiskv/kernels.h), from the
 * definition: x = f32(q * f32(1/sqrt(D))), sigma the least f32 >= max|x| / 127
 * with 127 sigma >= max|x|, codes ceil(x / sigma) (exact: both are f32), then
 * lo * sum(x) + step * sigma * (sum of codes times the min codes for x < 0, the
 * max codes for x >= 0), all in double. */
double okv_ref_q8_row(const uint8_t *q8, const float *q, uint32_t D) {
  float lo, step, scale = (float)(1.0 / sqrt((double)D));
  memcpy(&lo, q8, 4);
  memcpy(&step, q8 + 4, 4);
  double sx = 0, m = 0;
  for (uint32_t e = 0; e < D; e++) {
    float x = q[e] * scale;
    sx += x;
    m = fabs((double)x) > m ? fabs((double)x) : m;
  }
  if (step < 0 || !isfinite(m)) return INFINITY;
  if (m == 0) return (double)lo * sx;
  float sig = (float)(m / 127.0);
  while (127.0 * (double)sig < m) sig = nextafterf(sig, INFINITY);
  while (sig > 0 && 127.0 * (double)nextafterf(sig, 0) >= m) sig = nextafterf(sig, 0); /* the least such */
  double dot = 0;
  for (uint32_t e = 0; e < D; e++) {
    float x = q[e] * scale;
    double c = ceil((double)x / (double)sig);
    dot += c * (double)(x < 0 ? q8[8 + e] : q8[8 + D + e]);
  }
  return (double)lo * sx + (double)step * (double)sig * dot;
}

int okv_ref_q8_check(const float *mn, const float *mx, uint32_t D, const uint8_t *q8) {
  double lo = INFINITY, hi = -INFINITY;
  for (uint32_t e = 0; e < D; e++) {
    lo = mn[e] < lo ? mn[e] : lo;
    hi = mx[e] > hi ? mx[e] : hi;
  }
  float glo, step;
  memcpy(&glo, q8, 4);
  memcpy(&step, q8 + 4, 4);
  if (!isfinite(lo) || !isfinite(hi)) return step < 0 ? 0 : 1;
  if ((double)glo != lo) return 2;
  if (hi == lo) return step == 0 ? 0 : 3;
  if (!(lo + 255.0 * step >= hi)) return 4;                                                 /* covers the box */
  if (fabs((double)step - (hi - lo) / 255.0) > 4.0 * (hi - lo) / 255.0 * 0x1p-24) return 5; /* no wider than needed */
  for (uint32_t e = 0; e < D; e++) {
    double a = q8[8 + e], c = q8[8 + D + e];
    if (!(lo + a * step <= mn[e])) return 6; /* contains */
    if (!(lo + c * step >= mx[e])) return 7;
    if (a < 255 && lo + (a + 1) * step <= mn[e]) return 8; /* tight */
    if (c > 0 && lo + (c - 1) * step >= mx[e]) return 9;
  }
  return 0;
}

uint64_t okv_ref_c4_tile_bytes(uint32_t D) { return 16u * (12u + ((((uint64_t)D + 1u) / 2u + 3u) & ~3ull)); }

/* Centre code of element e of lane l (nibble e % 2 of packed byte e / 2, stored at group (e / 2) / 4). */
static unsigned ref_c4_code(const uint8_t *tile, uint32_t l, uint32_t e) {
  const uint32_t j = e / 2u;
  const uint8_t v = tile[192u + (j / 4u) * 64u + l * 4u + j % 4u];
  return e % 2u ? v >> 4 : v & 15u;
}

static void ref_c4_head(const uint8_t *tile, uint32_t l, float *lo, float *step, float *width) {
  memcpy(lo, tile + 4u * l, 4);
  memcpy(step, tile + 64u + 4u * l, 4);
  memcpy(width, tile + 128u + 4u * l, 4);
}

double okv_ref_c4_score(const uint8_t *tile, uint32_t lane, const float *const *rows, uint32_t nr, uint32_t D) {
  float lo, step, width, scale = (float)(1.0 / sqrt((double)D));
  ref_c4_head(tile, lane, &lo, &step, &width);
  double best = -INFINITY;
  for (uint32_t r = 0; r < nr; r++) {
    double sx = 0, l1 = 0, m = 0, dot = 0;
    int finite = 1;
    for (uint32_t e = 0; e < D; e++) {
      float x = rows[r][e] * scale;
      finite = finite && isfinite(x);
      sx += x;
      l1 += fabs((double)x);
      m = fabs((double)x) > m ? fabs((double)x) : m;
    }
    if (step < 0 || !finite || !isfinite((float)l1)) return INFINITY; /* (float)l1 past f32: not finite */
    if (m > 0) {
      float sig = (float)m / 127.0f;
      for (uint32_t e = 0; e < D; e++) {
        double c = nearbyint((double)(rows[r][e] * scale / sig));
        c = c > 127 ? 127 : c < -127 ? -127 : c;
        dot += c * (double)ref_c4_code(tile, lane, e);
      }
      dot *= (double)step * (double)sig;
    }
    double v = (double)lo * sx + (double)width * l1 + dot;
    best = v > best ? v : best;
  }
  return best;
}

int okv_ref_c4_check(const float *mn, const float *mx, uint32_t D, const uint8_t *tile, uint32_t lane) {
  float lo, step, width;
  ref_c4_head(tile, lane, &lo, &step, &width);
  double clo = INFINITY, chi = -INFINITY, w = 0;
  int finite = 1;
  for (uint32_t e = 0; e < D; e++) {
    double c = 0.5 * mn[e] + 0.5 * mx[e];
    finite = finite && isfinite(mn[e]) && isfinite(mx[e]);
    clo = c < clo ? c : clo;
    chi = c > chi ? c : chi;
    w += 0.5 * ((double)mx[e] - (double)mn[e]) / D;
  }
  if (!finite) return step < 0 ? 0 : 1;
  if (lo != (float)clo) return 2;
  if (!(fabs((double)width - w) <= 1e-6 * (1e-30 + fabs(w)))) return 3;
  if (chi == clo) {
    if (step != 0) return 4;
    for (uint32_t e = 0; e < D; e++)
      if (ref_c4_code(tile, lane, e) != 0) return 5;
    return 0;
  }
  if (!(fabs((double)step - (chi - (double)lo) / 15.0) <= 1e-6 * (chi - (double)lo) / 15.0)) return 6;
  for (uint32_t e = 0; e < D; e++) { /* the nearest code (a tie either way) */
    double c = 0.5 * mn[e] + 0.5 * mx[e], a = ref_c4_code(tile, lane, e);
    double err = fabs((double)lo + a * (double)step - c);
    if (a > 0 && fabs((double)lo + (a - 1) * (double)step - c) < err * (1 - 1e-9)) return 7;
    if (a < 15 && fabs((double)lo + (a + 1) * (double)step - c) < err * (1 - 1e-9)) return 8;
  }
  return 0;
}
