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
