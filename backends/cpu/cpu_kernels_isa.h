/* Hot loops of the CPU kernels, written once with GCC vector extensions and
 * compiled once per SIMD level: backends/cpu/cpu_kernels.c includes this file
 * three times under different `#pragma GCC target` settings with OKV_ISA(name)
 * appending a suffix (_avx512, _avx2, _base). Not a header of its own: no
 * include guard on purpose.
 *
 * Units: logits are kept in the log2 domain (q pre-scaled by
 * log2(e) / sqrt(head_dim)), so every exponential is an exp2. */

#define OKV_AI static inline __attribute__((always_inline))

/* Loads 16 consecutive elements of dtype `dt` at p, widened to f32 (exact). */
OKV_AI v16f OKV_ISA(ld)(const void *p, const int dt) {
  if (dt == OKV_DTYPE_F32) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
  }
#if OKV_ISA_LEVEL == 2
  __m256i h16 = _mm256_loadu_si256((const __m256i *)p);
  if (dt == OKV_DTYPE_BF16) return (v16f)_mm512_slli_epi32(_mm512_cvtepu16_epi32(h16), 16);
  return (v16f)_mm512_cvtph_ps(h16);
#elif OKV_ISA_LEVEL == 1
  __m128i h0 = _mm_loadu_si128((const __m128i *)p), h1 = _mm_loadu_si128((const __m128i *)p + 1);
  __m256 f0, f1;
  if (dt == OKV_DTYPE_BF16) {
    f0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
    f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
  } else {
    f0 = _mm256_cvtph_ps(h0);
    f1 = _mm256_cvtph_ps(h1);
  }
  v16f r;
  memcpy(&r, &f0, 32);
  memcpy((char *)&r + 32, &f1, 32);
  return r;
#else
  v16u16 h;
  memcpy(&h, p, sizeof h);
  v16u32 w = __builtin_convertvector(h, v16u32);
  if (dt == OKV_DTYPE_BF16) return (v16f)(w << 16);
  /* f16: move exponent+mantissa into place and rescale by 2^112 (exact for
   * normals and subnormals), then force the exponent for inf/NaN. */
  v16u32 sign = (w & 0x8000u) << 16;
  v16u32 em = w & 0x7FFFu;
  v16f mag = (v16f)(em << 13) * 0x1p112f;
  v16u32 infnan = (v16u32)(em >= 0x7C00u);
  return (v16f)(((v16u32)mag | (infnan & 0x7F800000u)) | sign);
#endif
}

/* Loads the first n (< 16) elements, zero elsewhere. */
OKV_AI v16f OKV_ISA(ld_part)(const void *p, const int dt, uint32_t n) {
  uint8_t tmp[64] = {0};
  memcpy(tmp, p, (size_t)n * (dt == OKV_DTYPE_F32 ? 4u : 2u));
  return OKV_ISA(ld)(tmp, dt);
}

/* Lane-wise mask ? a : b (the ?: operator takes no vectors in C). */
#define OKV_VSEL(mask, a, b) ((v16f)(((v16i)(a) & (mask)) | ((v16i)(b) & ~(mask))))

/* 2^f for f in [-0.5, 0.5]: the polynomial of vexp2. */
OKV_AI v16f OKV_ISA(exp2_poly)(const v16f *pf) {
  const v16f f = *pf;
  v16f p = okv_v16f_splat(1.525273380405984e-05f);
  p = p * f + 1.5403530393381608e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.550410866482158e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  return p * f + 1.0f;
}

/* 2^x for x <= 0 (x clamped to >= -126; NaN maps to 2^-126), relative error ~1e-7. */
OKV_AI v16f OKV_ISA(vexp2)(const v16f *px) {
  v16f x = *px;
#if OKV_ISA_LEVEL == 2
  /* max(x, -126) returns -126 for NaN x; round to nearest, then 2^r * p(f)
   * by vscalefps (one instruction instead of convert, shift and add). */
  x = (v16f)_mm512_max_ps((__m512)x, _mm512_set1_ps(-126.0f));
  v16f r = (v16f)_mm512_roundscale_ps((__m512)x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v16f f = x - r; /* [-0.5, 0.5] */
  v16f p = OKV_ISA(exp2_poly)(&f);
  return (v16f)_mm512_scalef_ps((__m512)p, (__m512)r);
#else
  const v16f lo = okv_v16f_splat(-126.0f);
  x = OKV_VSEL(x > lo, x, lo);
  v16f r = (x + 12582912.0f) - 12582912.0f; /* round to nearest integer */
  v16f f = x - r;                           /* [-0.5, 0.5] */
  v16i n = __builtin_convertvector(r, v16i);
  v16f p = OKV_ISA(exp2_poly)(&f);
  return (v16f)((v16i)p + (n << 23));
#endif
}

/* Horizontal max / sum by halving (log2(16) = 4 shuffle steps). */
#define OKV_HALVE(v, op)                                                                           \
  do {                                                                                             \
    v16f h_ = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7); \
    v = op(v, h_);                                                                                 \
    h_ = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);      \
    v = op(v, h_);                                                                                 \
    h_ = __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);      \
    v = op(v, h_);                                                                                 \
    h_ = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);      \
    v = op(v, h_);                                                                                 \
  } while (0)
#define OKV_VMAX(a, b) OKV_VSEL((a) > (b), (a), (b))
#define OKV_VADD(a, b) ((a) + (b))

OKV_AI float OKV_ISA(hmax)(const v16f *pv) {
  v16f v = *pv;
  OKV_HALVE(v, OKV_VMAX);
  return v[0];
}

OKV_AI float OKV_ISA(hsum)(const v16f *pv) {
  v16f v = *pv;
  OKV_HALVE(v, OKV_VADD);
  return v[0];
}

/* Logits (log2 domain) of CR query rows against the 16 keys of one slot;
 * lanes j >= valid are -inf. qs: CR rows of hd floats. */
OKV_AI void OKV_ISA(block_logits)(const int dt, const int CR, const uint8_t *kt, uint32_t valid, uint32_t hd,
                                  const float *qs, v16f *L, const uint8_t *next) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  /* Named accumulators with compile-time guards stay in registers. */
  v16f L0 = okv_v16f_splat(0.0f), L1 = L0, L2 = L0, L3 = L0, L4 = L0, L5 = L0, L6 = L0, L7 = L0;
  const float *q0 = qs, *q1 = qs + hd, *q2 = qs + 2u * hd, *q3 = qs + 3u * hd;
  const float *q4 = qs + 4u * hd, *q5 = qs + 5u * hd, *q6 = qs + 6u * hd, *q7 = qs + 7u * hd;
  for (uint32_t d = 0; d < hd; d++) {
    /* Software prefetch of the next slot (random slot order defeats the
     * hardware prefetcher at block boundaries): its 32 * es * hd bytes are
     * spread over this loop, es / 2 cache lines per step. */
    if (next) {
      __builtin_prefetch(next + (size_t)d * (es / 2u) * 64u, 0, 3);
      if (es == 4u) __builtin_prefetch(next + ((size_t)d * 2u + 1u) * 64u, 0, 3);
    }
    v16f k = OKV_ISA(ld)(kt + (size_t)d * 16u * es, dt);
    L0 += q0[d] * k;
    if (CR > 1) L1 += q1[d] * k;
    if (CR > 2) L2 += q2[d] * k;
    if (CR > 3) L3 += q3[d] * k;
    if (CR > 4) L4 += q4[d] * k;
    if (CR > 5) L5 += q5[d] * k;
    if (CR > 6) L6 += q6[d] * k;
    if (CR > 7) L7 += q7[d] * k;
  }
  L[0] = L0;
  if (CR > 1) L[1] = L1;
  if (CR > 2) L[2] = L2;
  if (CR > 3) L[3] = L3;
  if (CR > 4) L[4] = L4;
  if (CR > 5) L[5] = L5;
  if (CR > 6) L[6] = L6;
  if (CR > 7) L[7] = L7;
  if (valid < 16) {
    v16i msk = okv_lane_index() < (int)valid;
    const v16f ninf = okv_v16f_splat(-INFINITY);
    for (int r = 0; r < CR; r++) L[r] = OKV_VSEL(msk, L[r], ninf);
  }
}

/* One block of online softmax for CR rows: updates m (running max, log2
 * domain), l (running sum) and acc (CR rows of hdp floats). One rescale per
 * block. */
OKV_AI void OKV_ISA(block_step)(const int dt, const int CR, const uint8_t *slot, uint32_t valid, uint32_t hd,
                                uint32_t hdp, const float *qs, float *m, float *l, float *acc, const uint8_t *next) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  const uint8_t *vp = slot + (size_t)16u * hd * es;
  v16f L[CR];
  OKV_ISA(block_logits)(dt, CR, slot, valid, hd, qs, L, next);
  float pr[CR][16], ps[CR];
  v16f dm = okv_v16f_splat(0.0f);
  for (int r = 0; r < CR; r++) {
    float bm = OKV_ISA(hmax)(&L[r]);
    float mn = bm > m[r] ? bm : m[r];
    dm[r] = m[r] - mn; /* -inf on the first block: alpha ~ 0, and acc, l are 0 then */
    m[r] = mn;
    v16f x = L[r] - mn;
    v16f p = OKV_ISA(vexp2)(&x);
    if (valid < 16) p = (v16f)((v16i)p & (okv_lane_index() < (int)valid));
    memcpy(pr[r], &p, sizeof p);
    ps[r] = OKV_ISA(hsum)(&p);
  }
  v16f alpha = OKV_ISA(vexp2)(&dm);
  for (int r = 0; r < CR; r++) l[r] = l[r] * alpha[r] + ps[r];
  /* V pass: acc[r][c..c+16) = alpha[r] * acc + sum_j p[r][j] * V[j][c..c+16). */
  for (uint32_t c = 0; c < hdp; c += 16) {
    float *a0 = acc + c, *a1 = a0 + hdp, *a2 = a0 + 2u * hdp, *a3 = a0 + 3u * hdp;
    float *a4 = a0 + 4u * hdp, *a5 = a0 + 5u * hdp, *a6 = a0 + 6u * hdp, *a7 = a0 + 7u * hdp;
    v16f A0, A1 = {0}, A2 = {0}, A3 = {0}, A4 = {0}, A5 = {0}, A6 = {0}, A7 = {0};
#define OKV_ALOAD(r)                   \
  if (CR > r) {                        \
    memcpy(&A##r, a##r, sizeof(v16f)); \
    A##r *= alpha[r];                  \
  }
    OKV_ALOAD(0)
    // clang-format off
    OKV_ALOAD(1) OKV_ALOAD(2) OKV_ALOAD(3) OKV_ALOAD(4) OKV_ALOAD(5) OKV_ALOAD(6) OKV_ALOAD(7)
    // clang-format on
#undef OKV_ALOAD
#define OKV_AFMA(r) \
  if (CR > r) A##r += pr[r][j] * v;
        if (c + 16 <= hd) {
      for (uint32_t j = 0; j < valid; j++) {
        v16f v = OKV_ISA(ld)(vp + ((size_t)j * hd + c) * es, dt);
        OKV_AFMA(0) OKV_AFMA(1) OKV_AFMA(2) OKV_AFMA(3) OKV_AFMA(4) OKV_AFMA(5) OKV_AFMA(6) OKV_AFMA(7)
      }
    }
    else {
      for (uint32_t j = 0; j < valid; j++) {
        v16f v = OKV_ISA(ld_part)(vp + ((size_t)j * hd + c) * es, dt, hd - c);
        OKV_AFMA(0) OKV_AFMA(1) OKV_AFMA(2) OKV_AFMA(3) OKV_AFMA(4) OKV_AFMA(5) OKV_AFMA(6) OKV_AFMA(7)
      }
    }
#undef OKV_AFMA
#define OKV_ASTORE(r) \
  if (CR > r) memcpy(a##r, &A##r, sizeof(v16f));
    OKV_ASTORE(0) OKV_ASTORE(1) OKV_ASTORE(2) OKV_ASTORE(3) OKV_ASTORE(4) OKV_ASTORE(5) OKV_ASTORE(6) OKV_ASTORE(7)
#undef OKV_ASTORE
  }
}

#if OKV_ISA_LEVEL == 2
/* Logits (log2 domain) of CR query rows against the keys of two slots sa, sb
 * into LA, LB (all 16 lanes; the caller masks invalid ones), AVX-512 only (32
 * vector registers): 16 accumulators, every broadcast query element feeds two
 * FMAs. na, nb: slots to prefetch (into L2) meanwhile, NULL for none. */
OKV_AI void OKV_ISA(pair_logits)(const int dt, const int CR, const uint8_t *sa, const uint8_t *sb, uint32_t hd,
                                 const float *qs, v16f *LA, v16f *LB, const uint8_t *na, const uint8_t *nb) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  const float *q0 = qs, *q1 = qs + hd, *q2 = qs + 2u * hd, *q3 = qs + 3u * hd;
  const float *q4 = qs + 4u * hd, *q5 = qs + 5u * hd, *q6 = qs + 6u * hd, *q7 = qs + 7u * hd;
  v16f A0 = okv_v16f_splat(0.0f), A1 = A0, A2 = A0, A3 = A0, A4 = A0, A5 = A0, A6 = A0, A7 = A0;
  v16f B0 = A0, B1 = A0, B2 = A0, B3 = A0, B4 = A0, B5 = A0, B6 = A0, B7 = A0;
  for (uint32_t d = 0; d < hd; d++) {
    if (na) __builtin_prefetch(na + (size_t)d * (es / 2u) * 64u, 0, OKV_PF_LOC);
    if (nb) __builtin_prefetch(nb + (size_t)d * (es / 2u) * 64u, 0, OKV_PF_LOC);
    if (es == 4u) {
      if (na) __builtin_prefetch(na + ((size_t)d * 2u + 1u) * 64u, 0, OKV_PF_LOC);
      if (nb) __builtin_prefetch(nb + ((size_t)d * 2u + 1u) * 64u, 0, OKV_PF_LOC);
    }
    v16f ka = OKV_ISA(ld)(sa + (size_t)d * 16u * es, dt);
    v16f kb = OKV_ISA(ld)(sb + (size_t)d * 16u * es, dt);
#define OKV_K2(r)                      \
  if (CR > r) {                        \
    v16f qv = okv_v16f_splat(q##r[d]); \
    A##r += qv * ka;                   \
    B##r += qv * kb;                   \
  }
    OKV_K2(0) OKV_K2(1) OKV_K2(2) OKV_K2(3) OKV_K2(4) OKV_K2(5) OKV_K2(6) OKV_K2(7)
#undef OKV_K2
  }
  LA[0] = A0, LA[1] = A1, LA[2] = A2, LA[3] = A3, LA[4] = A4, LA[5] = A5, LA[6] = A6, LA[7] = A7;
  LB[0] = B0, LB[1] = B1, LB[2] = B2, LB[3] = B3, LB[4] = B4, LB[5] = B5, LB[6] = B6, LB[7] = B7;
}

/* V pass over nb blocks for CR rows, AVX-512 only: acc[r] = alpha[r] * acc[r]
 * + sum over blocks k and tokens j < vl[k] of pr[k][r][j] * V_k[j], per pair
 * of 16-wide accumulator chunks (loaded, rescaled and stored once per call),
 * then the remaining 16-wide chunks (head_dim not a multiple of 32, tail
 * zero-padded). */
OKV_AI void OKV_ISA(v_pass)(const int dt, const int CR, const int nb, const uint8_t *const *sl, const uint32_t *vl,
                            uint32_t hd, uint32_t hdp, const float (*pr)[8][16], const v16f *palpha, float *acc) {
  const v16f alpha = *palpha;
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  uint32_t c = 0;
  for (; c + 32u <= hd; c += 32u) {
    v16f A0 = {0}, A1 = {0}, A2 = {0}, A3 = {0}, A4 = {0}, A5 = {0}, A6 = {0}, A7 = {0};
    v16f C0 = {0}, C1 = {0}, C2 = {0}, C3 = {0}, C4 = {0}, C5 = {0}, C6 = {0}, C7 = {0};
#define OKV_LD2(r)                                                \
  if (CR > r) {                                                   \
    memcpy(&A##r, acc + (size_t)r * hdp + c, sizeof(v16f));       \
    memcpy(&C##r, acc + (size_t)r * hdp + c + 16u, sizeof(v16f)); \
    A##r *= alpha[r];                                             \
    C##r *= alpha[r];                                             \
  }
    OKV_LD2(0)
    // clang-format off
    OKV_LD2(1) OKV_LD2(2) OKV_LD2(3) OKV_LD2(4) OKV_LD2(5) OKV_LD2(6) OKV_LD2(7)
    // clang-format on
#undef OKV_LD2
#define OKV_V2(r)                          \
  if (CR > r) {                            \
    v16f pv = okv_v16f_splat(pr[k][r][j]); \
    A##r += pv * v0;                       \
    C##r += pv * v1;                       \
  }
        for (int k = 0; k < nb; k++) {
      const uint8_t *vp = sl[k] + (size_t)16u * hd * es;
      for (uint32_t j = 0; j < vl[k]; j++) {
        v16f v0 = OKV_ISA(ld)(vp + ((size_t)j * hd + c) * es, dt);
        v16f v1 = OKV_ISA(ld)(vp + ((size_t)j * hd + c + 16u) * es, dt);
        OKV_V2(0) OKV_V2(1) OKV_V2(2) OKV_V2(3) OKV_V2(4) OKV_V2(5) OKV_V2(6) OKV_V2(7)
      }
    }
#undef OKV_V2
#define OKV_ST2(r)                                                \
  if (CR > r) {                                                   \
    memcpy(acc + (size_t)r * hdp + c, &A##r, sizeof(v16f));       \
    memcpy(acc + (size_t)r * hdp + c + 16u, &C##r, sizeof(v16f)); \
  }
    OKV_ST2(0) OKV_ST2(1) OKV_ST2(2) OKV_ST2(3) OKV_ST2(4) OKV_ST2(5) OKV_ST2(6) OKV_ST2(7)
#undef OKV_ST2
  }
  for (; c < hdp; c += 16u) {
    for (int r = 0; r < CR; r++) {
      v16f a;
      memcpy(&a, acc + (size_t)r * hdp + c, sizeof a);
      a *= alpha[r];
      for (int k = 0; k < nb; k++) {
        const uint8_t *vp = sl[k] + (size_t)16u * hd * es;
        for (uint32_t j = 0; j < vl[k]; j++) {
          v16f v = c + 16u <= hd ? OKV_ISA(ld)(vp + ((size_t)j * hd + c) * es, dt)
                                 : OKV_ISA(ld_part)(vp + ((size_t)j * hd + c) * es, dt, hd - c);
          a += pr[k][r][j] * v;
        }
      }
      memcpy(acc + (size_t)r * hdp + c, &a, sizeof a);
    }
  }
}

/* Two blocks (32 tokens) at once for up to 8 rows, AVX-512 only: the logits
 * of both (pair_logits), the softmax rescale once per pair of blocks, then
 * every broadcast probability feeds two FMAs (v_pass). Same arithmetic as two
 * block_step calls up to rounding. */
OKV_AI void OKV_ISA(block_step2)(const int dt, const int CR, const uint8_t *sa, uint32_t va, const uint8_t *sb,
                                 uint32_t vb, uint32_t hd, uint32_t hdp, const float *qs, float *m, float *l,
                                 float *acc, const uint8_t *na, const uint8_t *nb) {
  v16f LA[8], LB[8];
  OKV_ISA(pair_logits)(dt, CR, sa, sb, hd, qs, LA, LB, na, nb);
  const v16f ninf = okv_v16f_splat(-INFINITY);
  const v16i mska = okv_lane_index() < (int)va, mskb = okv_lane_index() < (int)vb;
  _Alignas(64) float pr[2][8][16]; /* [block][row][token] */
  float ps[8];
  v16f dm = okv_v16f_splat(0.0f);
  for (int r = 0; r < CR; r++) {
    v16f xa = OKV_VSEL(mska, LA[r], ninf), xb = OKV_VSEL(mskb, LB[r], ninf);
    v16f mx = OKV_VMAX(xa, xb);
    float bm = OKV_ISA(hmax)(&mx);
    float mn = bm > m[r] ? bm : m[r];
    dm[r] = m[r] - mn;
    m[r] = mn;
    xa -= mn;
    xb -= mn;
    v16f pa = OKV_ISA(vexp2)(&xa), pb = OKV_ISA(vexp2)(&xb);
    pa = (v16f)((v16i)pa & mska);
    pb = (v16f)((v16i)pb & mskb);
    memcpy(pr[0][r], &pa, sizeof pa);
    memcpy(pr[1][r], &pb, sizeof pb);
    v16f pt = pa + pb;
    ps[r] = OKV_ISA(hsum)(&pt);
  }
  v16f alpha = OKV_ISA(vexp2)(&dm);
  for (int r = 0; r < CR; r++) l[r] = l[r] * alpha[r] + ps[r];
  const uint8_t *sl[2] = {sa, sb};
  const uint32_t vl[2] = {va, vb};
  OKV_ISA(v_pass)(dt, CR, 2, sl, vl, hd, hdp, (const float(*)[8][16])pr, &alpha, acc);
}
#endif

#if OKV_ISA_LEVEL == 2
/* Reduces 8 vectors at once with a shuffle tree (15 shuffles + 8 ops instead
 * of 8 per vector); row r's result lands in out[2 * bitrev3(r)]. */
#define OKV_R8_FOLD(a, b, lo_, hi_, op) op(__builtin_shufflevector(a, b, lo_), __builtin_shufflevector(a, b, hi_))
#define OKV_R8_L8                       0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define OKV_R8_H8                       8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define OKV_R8_L4                       0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define OKV_R8_H4                       4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define OKV_R8_L2                       0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define OKV_R8_H2                       2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define OKV_R8_REDUCE(X, op, out)                                                                       \
  do {                                                                                                  \
    v16f y0_ = OKV_R8_FOLD(X[0], X[1], OKV_R8_L8, OKV_R8_H8, op);                                       \
    v16f y1_ = OKV_R8_FOLD(X[2], X[3], OKV_R8_L8, OKV_R8_H8, op);                                       \
    v16f y2_ = OKV_R8_FOLD(X[4], X[5], OKV_R8_L8, OKV_R8_H8, op);                                       \
    v16f y3_ = OKV_R8_FOLD(X[6], X[7], OKV_R8_L8, OKV_R8_H8, op);                                       \
    v16f z0_ = OKV_R8_FOLD(y0_, y1_, OKV_R8_L4, OKV_R8_H4, op);                                         \
    v16f z1_ = OKV_R8_FOLD(y2_, y3_, OKV_R8_L4, OKV_R8_H4, op);                                         \
    v16f w_ = OKV_R8_FOLD(z0_, z1_, OKV_R8_L2, OKV_R8_H2, op);                                          \
    w_ = op(w_, __builtin_shufflevector(w_, w_, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14)); \
    memcpy(out, &w_, sizeof w_);                                                                        \
  } while (0)
#define OKV_R8_LANE(r) (2 * ((((r)&1) << 2) | ((r)&2) | (((r) >> 2) & 1)))

/* Four blocks (64 tokens) per softmax rescale for up to 8 rows, AVX-512 only:
 * the K pass runs over two pairs of blocks (16 accumulators each, every
 * broadcast query element feeds two FMAs), then one max / exp / rescale over
 * the 64 logits of each row with the row reductions done 8 rows at a time,
 * then the V pass over the 64 tokens per pair of 16-wide accumulator chunks
 * (accumulators loaded, rescaled and stored once per 4 blocks). pf: slots to
 * prefetch (into L2) during the K pass, NULL for none. */
OKV_AI void OKV_ISA(block_step4)(const int dt, const int CR, const uint8_t *const *sl, const uint32_t *vl, uint32_t hd,
                                 uint32_t hdp, const float *qs, float *m, float *l, float *acc,
                                 const uint8_t *const *pf) {
  v16f L[4][8];
  for (int pp = 0; pp < 2; pp++) {
    v16f *LA = L[2 * pp], *LB = L[2 * pp + 1];
    OKV_ISA(pair_logits)(dt, CR, sl[2 * pp], sl[2 * pp + 1], hd, qs, LA, LB, pf[2 * pp], pf[2 * pp + 1]);
  }
  const v16f ninf = okv_v16f_splat(-INFINITY);
  for (int k = 0; k < 4; k++)
    if (vl[k] < 16) {
      const v16i msk = okv_lane_index() < (int)vl[k];
      for (int r = 0; r < CR; r++) L[k][r] = OKV_VSEL(msk, L[k][r], ninf);
    }
  v16f X[8];
  _Alignas(64) float red[16];
  for (int r = 0; r < 8; r++) {
    int rr = r < CR ? r : 0;
    v16f a = OKV_VMAX(L[0][rr], L[1][rr]), b = OKV_VMAX(L[2][rr], L[3][rr]);
    X[r] = OKV_VMAX(a, b);
  }
  OKV_R8_REDUCE(X, OKV_VMAX, red);
  _Alignas(64) float pr[4][8][16];
  v16f dm = okv_v16f_splat(0.0f);
  for (int r = 0; r < CR; r++) {
    float bm = red[OKV_R8_LANE(r)];
    float mn = bm > m[r] ? bm : m[r];
    dm[r] = m[r] - mn; /* -inf on the first block: alpha ~ 0, and acc, l are 0 then */
    m[r] = mn;
    v16f sum = okv_v16f_splat(0.0f);
    for (int k = 0; k < 4; k++) {
      v16f x = L[k][r] - mn;
      v16f p = OKV_ISA(vexp2)(&x);
      if (vl[k] < 16) p = (v16f)((v16i)p & (okv_lane_index() < (int)vl[k]));
      memcpy(pr[k][r], &p, sizeof p);
      sum += p;
    }
    X[r] = sum;
  }
  for (int r = CR; r < 8; r++) X[r] = X[0];
  OKV_R8_REDUCE(X, OKV_VADD, red);
  v16f alpha = OKV_ISA(vexp2)(&dm);
  for (int r = 0; r < CR; r++) l[r] = l[r] * alpha[r] + red[OKV_R8_LANE(r)];
  OKV_ISA(v_pass)(dt, CR, 4, sl, vl, hd, hdp, (const float(*)[8][16])pr, &alpha, acc);
}
#undef OKV_R8_FOLD
#undef OKV_R8_L8
#undef OKV_R8_H8
#undef OKV_R8_L4
#undef OKV_R8_H4
#undef OKV_R8_L2
#undef OKV_R8_H2
#undef OKV_R8_REDUCE
#undef OKV_R8_LANE
#endif

/* Attention state of one pass (up to OKV_PASS_ROWS rows) over blocks
 * [b0, b1) of a unit's working set. */
OKV_AI void OKV_ISA(pass_blocks_dt)(const int dt, const okv_cpu_attn_ctx_t *cx, uint32_t u, uint32_t b0, uint32_t b1,
                                    uint32_t nr, const float *qs, float *m, float *l, float *acc) {
  const uint32_t hd = cx->d->head_dim, hdp = cx->hdp;
  const uint32_t base = cx->d->ws_offsets[u];
  uint32_t b = b0;
#if OKV_ISA_LEVEL == 2
  /* Software prefetch (into L2) of the slots OKV_PF_QUADS quads ahead, spread
   * over the K passes; start by touching the first line of the first slots. */
  for (uint32_t i = b0; i < b1 && i < b0 + 4u * OKV_PF_QUADS; i++)
    __builtin_prefetch(cx->kv_pool + (size_t)cx->d->ws_slots[base + i] * cx->slot_bytes, 0, 3);
  /* Quads of blocks; prefetch distance: OKV_PF_QUADS quads. */
  for (; b + 4 <= b1; b += 4) {
    const uint8_t *sl[4], *pf[4], *none[4] = {NULL, NULL, NULL, NULL};
    uint32_t vl[4];
    for (int k = 0; k < 4; k++) {
      sl[k] = cx->kv_pool + (size_t)cx->d->ws_slots[base + b + (uint32_t)k] * cx->slot_bytes;
      vl[k] = cx->d->ws_valid[base + b + (uint32_t)k];
      uint32_t nxt = b + 4u * OKV_PF_QUADS + (uint32_t)k;
      pf[k] = nxt < b1 ? cx->kv_pool + (size_t)cx->d->ws_slots[base + nxt] * cx->slot_bytes : NULL;
    }
    for (uint32_t s = 0; s < nr;) {
      uint32_t left = nr - s, cr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      const float *q = qs + (size_t)s * hd;
      float *a = acc + (size_t)s * hdp;
      const uint8_t *const *p = s == 0 ? pf : none;
      switch (cr) {
        case 1: OKV_ISA(block_step4)(dt, 1, sl, vl, hd, hdp, q, m + s, l + s, a, p); break;
        case 2: OKV_ISA(block_step4)(dt, 2, sl, vl, hd, hdp, q, m + s, l + s, a, p); break;
        case 4: OKV_ISA(block_step4)(dt, 4, sl, vl, hd, hdp, q, m + s, l + s, a, p); break;
        default: OKV_ISA(block_step4)(dt, 8, sl, vl, hd, hdp, q, m + s, l + s, a, p); break;
      }
      s += cr;
    }
  }
  for (; b + 2 <= b1; b += 2) {
    const uint8_t *sa = cx->kv_pool + (size_t)cx->d->ws_slots[base + b] * cx->slot_bytes;
    const uint8_t *sb = cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 1] * cx->slot_bytes;
    uint32_t va = cx->d->ws_valid[base + b], vb = cx->d->ws_valid[base + b + 1];
    const uint8_t *na = b + 4 < b1 ? cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 4] * cx->slot_bytes : NULL;
    const uint8_t *nb = b + 5 < b1 ? cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 5] * cx->slot_bytes : NULL;
    for (uint32_t s = 0; s < nr;) {
      uint32_t left = nr - s, cr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      const float *q = qs + (size_t)s * hd;
      float *a = acc + (size_t)s * hdp;
      const uint8_t *pa = s == 0 ? na : NULL, *pb = s == 0 ? nb : NULL;
      switch (cr) {
        case 1: OKV_ISA(block_step2)(dt, 1, sa, va, sb, vb, hd, hdp, q, m + s, l + s, a, pa, pb); break;
        case 2: OKV_ISA(block_step2)(dt, 2, sa, va, sb, vb, hd, hdp, q, m + s, l + s, a, pa, pb); break;
        case 4: OKV_ISA(block_step2)(dt, 4, sa, va, sb, vb, hd, hdp, q, m + s, l + s, a, pa, pb); break;
        default: OKV_ISA(block_step2)(dt, 8, sa, va, sb, vb, hd, hdp, q, m + s, l + s, a, pa, pb); break;
      }
      s += cr;
    }
  }
#endif
  for (; b < b1; b++) {
    const uint8_t *slot = cx->kv_pool + (size_t)cx->d->ws_slots[base + b] * cx->slot_bytes;
    uint32_t valid = cx->d->ws_valid[base + b];
    const uint8_t *next = b + 1 < b1 ? cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 1] * cx->slot_bytes : NULL;
    /* rows in chunks of 8, 4, 2, 1 (compile-time row counts keep the
     * accumulators in registers) */
    for (uint32_t s = 0; s < nr;) {
      uint32_t left = nr - s, cr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      const float *q = qs + (size_t)s * hd;
      float *a = acc + (size_t)s * hdp;
      switch (cr) {
        case 1: OKV_ISA(block_step)(dt, 1, slot, valid, hd, hdp, q, m + s, l + s, a, s == 0 ? next : NULL); break;
        case 2: OKV_ISA(block_step)(dt, 2, slot, valid, hd, hdp, q, m + s, l + s, a, s == 0 ? next : NULL); break;
        case 4: OKV_ISA(block_step)(dt, 4, slot, valid, hd, hdp, q, m + s, l + s, a, s == 0 ? next : NULL); break;
        default: OKV_ISA(block_step)(dt, 8, slot, valid, hd, hdp, q, m + s, l + s, a, s == 0 ? next : NULL); break;
      }
      s += cr;
    }
  }
}

static void OKV_ISA(pass_blocks)(const okv_cpu_attn_ctx_t *cx, uint32_t u, uint32_t b0, uint32_t b1, uint32_t nr,
                                 const float *qs, float *m, float *l, float *acc) {
  switch (cx->d->kv_dtype) {
    case OKV_DTYPE_F16: OKV_ISA(pass_blocks_dt)(OKV_DTYPE_F16, cx, u, b0, b1, nr, qs, m, l, acc); break;
    case OKV_DTYPE_BF16: OKV_ISA(pass_blocks_dt)(OKV_DTYPE_BF16, cx, u, b0, b1, nr, qs, m, l, acc); break;
    default: OKV_ISA(pass_blocks_dt)(OKV_DTYPE_F32, cx, u, b0, b1, nr, qs, m, l, acc); break;
  }
}

/* Block mass for nr rows (row i is query token t = (r0 + i) / G) given the
 * final max m and sum l of each row: mass[b][t] += sum_j p / G. */
OKV_AI void OKV_ISA(mass_blocks_dt)(const int dt, const okv_cpu_attn_ctx_t *cx, uint32_t u, uint32_t r0, uint32_t nr,
                                    const float *qs, const float *m, const float *l, float *mass) {
  const uint32_t hd = cx->d->head_dim, G = cx->d->group_size, T = cx->d->n_query_tokens;
  const uint32_t base = cx->d->ws_offsets[u], nb = cx->d->ws_offsets[u + 1] - base;
  const float inv_g = 1.0f / (float)G;
  for (uint32_t b = 0; b < nb; b++) {
    const uint8_t *slot = cx->kv_pool + (size_t)cx->d->ws_slots[base + b] * cx->slot_bytes;
    const uint8_t *next = b + 1 < nb ? cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 1] * cx->slot_bytes : NULL;
    uint32_t valid = cx->d->ws_valid[base + b];
    for (uint32_t s = 0; s < nr; s += 8) {
      uint32_t cr = nr - s < 8 ? nr - s : 8;
      v16f L[8];
      // clang-format off
      if (cr > 4) /* rows >= nr: padding */
        OKV_ISA(block_logits)(dt, 8, slot, valid, hd, qs + (size_t)s * hd, L, s == 0 ? next : NULL);
      else if (cr > 2)
        OKV_ISA(block_logits)(dt, 4, slot, valid, hd, qs + (size_t)s * hd, L, s == 0 ? next : NULL);
      else
        OKV_ISA(block_logits)(dt, 2, slot, valid, hd, qs + (size_t)s * hd, L, s == 0 ? next : NULL);
      // clang-format on
      for (uint32_t i = 0; i < cr; i++) {
        uint32_t r = s + i;
        if (!(l[r] > 0.0f)) continue;
        v16f x = L[i] - m[r];
        v16f p = OKV_ISA(vexp2)(&x);
        if (valid < 16) p = (v16f)((v16i)p & (okv_lane_index() < (int)valid));
        mass[(size_t)(base + b) * T + (r0 + r) / G] += OKV_ISA(hsum)(&p) / l[r] * inv_g;
      }
    }
  }
}

static void OKV_ISA(mass_blocks)(const okv_cpu_attn_ctx_t *cx, uint32_t u, uint32_t r0, uint32_t nr, const float *qs,
                                 const float *m, const float *l, float *mass) {
  switch (cx->d->kv_dtype) {
    case OKV_DTYPE_F16: OKV_ISA(mass_blocks_dt)(OKV_DTYPE_F16, cx, u, r0, nr, qs, m, l, mass); break;
    case OKV_DTYPE_BF16: OKV_ISA(mass_blocks_dt)(OKV_DTYPE_BF16, cx, u, r0, nr, qs, m, l, mass); break;
    default: OKV_ISA(mass_blocks_dt)(OKV_DTYPE_F32, cx, u, r0, nr, qs, m, l, mass); break;
  }
}

/* Scores of nb blocks for CR query rows (max over the rows; with first ==
 * false, max with what scores[] holds). Summaries in dtype dt (widened
 * exactly on load), block b's min at summ + b * 2 * hd elements, its max hd
 * elements later. */
OKV_AI void OKV_ISA(score_rows)(const int dt, const int CR, const uint8_t *summ, uint32_t hd, uint32_t hdp, uint32_t nb,
                                const float *qp, const float *qn, float *scores, bool first) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  const float *p0 = qp, *p1 = qp + hdp, *p2 = qp + 2u * hdp, *p3 = qp + 3u * hdp;
  const float *p4 = qp + 4u * hdp, *p5 = qp + 5u * hdp, *p6 = qp + 6u * hdp, *p7 = qp + 7u * hdp;
  const float *n0 = qn, *n1 = qn + hdp, *n2 = qn + 2u * hdp, *n3 = qn + 3u * hdp;
  const float *n4 = qn + 4u * hdp, *n5 = qn + 5u * hdp, *n6 = qn + 6u * hdp, *n7 = qn + 7u * hdp;
  for (uint32_t b = 0; b < nb; b++) {
    const uint8_t *mn = summ + (size_t)b * 2u * hd * es, *mx = mn + (size_t)hd * es;
    v16f A0 = okv_v16f_splat(0.0f), A1 = A0, A2 = A0, A3 = A0, A4 = A0, A5 = A0, A6 = A0, A7 = A0;
    for (uint32_t c = 0; c < hdp; c += 16) {
      v16f vmn, vmx;
      if (c + 16 <= hd) {
        vmn = OKV_ISA(ld)(mn + (size_t)c * es, dt);
        vmx = OKV_ISA(ld)(mx + (size_t)c * es, dt);
      } else {
        vmn = OKV_ISA(ld_part)(mn + (size_t)c * es, dt, hd - c);
        vmx = OKV_ISA(ld_part)(mx + (size_t)c * es, dt, hd - c);
      }
#define OKV_SC(r)                     \
  if (CR > r) {                       \
    v16f a_, b_;                      \
    memcpy(&a_, p##r + c, sizeof a_); \
    memcpy(&b_, n##r + c, sizeof b_); \
    A##r += a_ * vmx + b_ * vmn;      \
  }
      OKV_SC(0) OKV_SC(1) OKV_SC(2) OKV_SC(3) OKV_SC(4) OKV_SC(5) OKV_SC(6) OKV_SC(7)
#undef OKV_SC
    }
    /* max over rows of the row sums: max first needs the sums, so reduce each */
    float best = OKV_ISA(hsum)(&A0);
#define OKV_SB(r)                    \
  if (CR > r) {                      \
    float v_ = OKV_ISA(hsum)(&A##r); \
    best = v_ > best ? v_ : best;    \
  }
    OKV_SB(1)
    // clang-format off
    OKV_SB(2) OKV_SB(3) OKV_SB(4) OKV_SB(5) OKV_SB(6) OKV_SB(7)
    // clang-format on
#undef OKV_SB
        scores[b] = (first || best > scores[b]) ? best : scores[b];
  }
}

#if OKV_ISA_LEVEL == 2
/* Four query rows x four blocks at once (16 accumulators; the summaries of a
 * block are read once for the four rows, each query chunk once for the four
 * blocks), then the 16 row sums are reduced together with a transpose tree
 * (30 shuffles + 15 adds for 16 sums instead of 8 ops per sum). Summaries in
 * dtype dt. Writes scores of blocks [0, nb4) with nb4 = nb rounded down to 4. */
#define OKV_FOLD(a, b, lo_, hi_) (__builtin_shufflevector(a, b, lo_) + __builtin_shufflevector(a, b, hi_))
#define OKV_L8                   0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define OKV_H8                   8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define OKV_L4                   0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define OKV_H4                   4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define OKV_L2                   0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define OKV_H2                   2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define OKV_L1                   0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define OKV_H1                   1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
/* One quad: blocks whose summaries start at s[0..3], scores to d[0..3]. */
OKV_AI void OKV_ISA(score_quad)(const int dt, const uint8_t *const *s, uint32_t hd, uint32_t hdp, const float *qp,
                                const float *qn, float *const *d, bool first) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  const float *p0 = qp, *p1 = qp + hdp, *p2 = qp + 2u * hdp, *p3 = qp + 3u * hdp;
  const float *n0 = qn, *n1 = qn + hdp, *n2 = qn + 2u * hdp, *n3 = qn + 3u * hdp;
  {
    v16f X[16];
    /* block k's min at s_k, max hd elements later */
    const uint8_t *s0 = s[0], *s1 = s[1], *s2 = s[2], *s3 = s[3];
    const size_t mo = (size_t)hd * es;
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) X[i] = okv_v16f_splat(0.0f);
    for (uint32_t c = 0; c < hd; c += 16) {
      v16f mn[4], mx[4], pq[4], nq[4];
      const size_t co = (size_t)c * es;
      mn[0] = OKV_ISA(ld)(s0 + co, dt);
      mx[0] = OKV_ISA(ld)(s0 + mo + co, dt);
      mn[1] = OKV_ISA(ld)(s1 + co, dt);
      mx[1] = OKV_ISA(ld)(s1 + mo + co, dt);
      mn[2] = OKV_ISA(ld)(s2 + co, dt);
      mx[2] = OKV_ISA(ld)(s2 + mo + co, dt);
      mn[3] = OKV_ISA(ld)(s3 + co, dt);
      mx[3] = OKV_ISA(ld)(s3 + mo + co, dt);
      memcpy(&pq[0], p0 + c, sizeof(v16f));
      memcpy(&nq[0], n0 + c, sizeof(v16f));
      memcpy(&pq[1], p1 + c, sizeof(v16f));
      memcpy(&nq[1], n1 + c, sizeof(v16f));
      memcpy(&pq[2], p2 + c, sizeof(v16f));
      memcpy(&nq[2], n2 + c, sizeof(v16f));
      memcpy(&pq[3], p3 + c, sizeof(v16f));
      memcpy(&nq[3], n3 + c, sizeof(v16f));
      /* two chained FMAs per accumulator (no separate multiply and add) */
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
          X[k * 4 + r] += pq[r] * mx[k];
          X[k * 4 + r] += nq[r] * mn[k];
        }
      }
    }
    /* X[v], v = block * 4 + row: fold to one vector whose lane l holds the sum
     * of X[bitrev4(l)] */
    v16f r1[8], r2[4], r3[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r1[i] = OKV_FOLD(X[2 * i], X[2 * i + 1], OKV_L8, OKV_H8);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) r2[i] = OKV_FOLD(r1[2 * i], r1[2 * i + 1], OKV_L4, OKV_H4);
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) r3[i] = OKV_FOLD(r2[2 * i], r2[2 * i + 1], OKV_L2, OKV_H2);
    v16f sums = OKV_FOLD(r3[0], r3[1], OKV_L1, OKV_H1);
    static const int lane_of[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15}; /* bit reversal */
    for (int k = 0; k < 4; k++) {
      float best = sums[lane_of[k * 4]];
      for (int r = 1; r < 4; r++) {
        float v = sums[lane_of[k * 4 + r]];
        best = v > best ? v : best;
      }
      *d[k] = (first || best > *d[k]) ? best : *d[k];
    }
  }
}

OKV_AI uint32_t OKV_ISA(score4x4)(const int dt, const uint8_t *summ, uint32_t hd, uint32_t hdp, uint32_t nb,
                                  const float *qp, const float *qn, float *scores, bool first) {
  if (hd % 16u != 0) return 0;                                                /* partial chunks: the generic path */
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u, bs = 2u * (size_t)hd * es; /* bytes per summary */
  const uint32_t nb4 = nb & ~3u;
  for (uint32_t b = 0; b < nb4; b += 4) {
    const uint8_t *s[4] = {summ + (size_t)b * bs, summ + (size_t)(b + 1) * bs, summ + (size_t)(b + 2) * bs,
                           summ + (size_t)(b + 3) * bs};
    float *d[4] = {scores + b, scores + b + 1, scores + b + 2, scores + b + 3};
    OKV_ISA(score_quad)(dt, s, hd, hdp, qp, qn, d, first);
  }
  return nb4;
}

/* Four blocks anywhere (summaries at s[0..3], scores to d[0..3]) for four
 * query rows: the second pass of q8 / two-level scoring, whose candidates are
 * scattered. Summaries of dtype dt; hd a multiple of 16. */
static void OKV_ISA(score_gather4)(const uint8_t *const *s, int dt, uint32_t hd, uint32_t hdp, const float *qp,
                                   const float *qn, float *const *d, bool first) {
  switch (dt) {
    case OKV_DTYPE_F16: OKV_ISA(score_quad)(OKV_DTYPE_F16, s, hd, hdp, qp, qn, d, first); break;
    case OKV_DTYPE_BF16: OKV_ISA(score_quad)(OKV_DTYPE_BF16, s, hd, hdp, qp, qn, d, first); break;
    default: OKV_ISA(score_quad)(OKV_DTYPE_F32, s, hd, hdp, qp, qn, d, first); break;
  }
}
#undef OKV_FOLD
#undef OKV_L8
#undef OKV_H8
#undef OKV_L4
#undef OKV_H4
#undef OKV_L2
#undef OKV_H2
#undef OKV_L1
#undef OKV_H1
#endif

/* Quest bound of nb blocks for nr rows: qp = max(q,0) * scale, qn = min(q,0) *
 * scale (rows of hdp floats, zero padded); score[b] = max over rows of
 * sum_i qp_i * max_i + qn_i * min_i (== sum_i max(q_i min_i, q_i max_i)). */
OKV_AI void OKV_ISA(score_range_dt)(const int dt, const uint8_t *summ, uint32_t hd, uint32_t hdp, uint32_t nb,
                                    uint32_t nr, const float *qp, const float *qn, float *scores) {
  const size_t bs = 2u * (size_t)hd * (dt == OKV_DTYPE_F32 ? 4u : 2u);
  for (uint32_t s = 0; s < nr;) {
    uint32_t left = nr - s, cr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    const float *p = qp + (size_t)s * hdp, *n = qn + (size_t)s * hdp;
    switch (cr) {
      case 1: OKV_ISA(score_rows)(dt, 1, summ, hd, hdp, nb, p, n, scores, s == 0); break;
      case 2: OKV_ISA(score_rows)(dt, 2, summ, hd, hdp, nb, p, n, scores, s == 0); break;
      case 4: {
        uint32_t done = 0;
#if OKV_ISA_LEVEL == 2
        done = OKV_ISA(score4x4)(dt, summ, hd, hdp, nb, p, n, scores, s == 0);
#endif
        OKV_ISA(score_rows)(dt, 4, summ + (size_t)done * bs, hd, hdp, nb - done, p, n, scores + done, s == 0);
        break;
      }
      default: OKV_ISA(score_rows)(dt, 8, summ, hd, hdp, nb, p, n, scores, s == 0); break;
    }
    s += cr;
  }
}

static void OKV_ISA(score_range)(const uint8_t *summ, int dt, uint32_t hd, uint32_t hdp, uint32_t nb, uint32_t nr,
                                 const float *qp, const float *qn, float *scores) {
  switch (dt) {
    case OKV_DTYPE_F16: OKV_ISA(score_range_dt)(OKV_DTYPE_F16, summ, hd, hdp, nb, nr, qp, qn, scores); break;
    case OKV_DTYPE_BF16: OKV_ISA(score_range_dt)(OKV_DTYPE_BF16, summ, hd, hdp, nb, nr, qp, qn, scores); break;
    default: OKV_ISA(score_range_dt)(OKV_DTYPE_F32, summ, hd, hdp, nb, nr, qp, qn, scores); break;
  }
}

#undef OKV_AI
#undef OKV_VSEL
#undef OKV_HALVE
#undef OKV_VMAX
#undef OKV_VADD
