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
}

/* Loads the first n (< 16) elements, zero elsewhere. */
OKV_AI v16f OKV_ISA(ld_part)(const void *p, const int dt, uint32_t n) {
  uint8_t tmp[64] = {0};
  memcpy(tmp, p, (size_t)n * (dt == OKV_DTYPE_F32 ? 4u : 2u));
  return OKV_ISA(ld)(tmp, dt);
}

/* Lane-wise mask ? a : b (the ?: operator takes no vectors in C). */
#define OKV_VSEL(mask, a, b) ((v16f)(((v16i)(a) & (mask)) | ((v16i)(b) & ~(mask))))

/* 2^x for x <= 0 (x clamped to >= -126; NaN maps to 2^-126), relative error ~1e-7. */
OKV_AI v16f OKV_ISA(vexp2)(const v16f *px) {
  v16f x = *px;
  const v16f lo = okv_v16f_splat(-126.0f);
  x = OKV_VSEL(x > lo, x, lo);
  v16f r = (x + 12582912.0f) - 12582912.0f; /* round to nearest integer */
  v16f f = x - r;                            /* [-0.5, 0.5] */
  v16i n = __builtin_convertvector(r, v16i);
  v16f p = okv_v16f_splat(1.525273380405984e-05f);
  p = p * f + 1.5403530393381608e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.550410866482158e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  p = p * f + 1.0f;
  return (v16f)((v16i)p + (n << 23));
}

OKV_AI float OKV_ISA(hmax)(const v16f *pv) {
  v16f v = *pv;
  float m = v[0];
  for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
  return m;
}

OKV_AI float OKV_ISA(hsum)(const v16f *pv) {
  v16f t = *pv;
  float s = 0.0f;
  for (int i = 0; i < 16; i++) s += t[i];
  return s;
}

/* Logits (log2 domain) of CR query rows against the 16 keys of one slot;
 * lanes j >= valid are -inf. qs: CR rows of hd floats. */
OKV_AI void OKV_ISA(block_logits)(const int dt, const int CR, const uint8_t *kt, uint32_t valid, uint32_t hd,
                                  const float *qs, v16f *L) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  for (int r = 0; r < CR; r++) L[r] = okv_v16f_splat(0.0f);
  for (uint32_t d = 0; d < hd; d++) {
    v16f k = OKV_ISA(ld)(kt + (size_t)d * 16u * es, dt);
#pragma GCC unroll 8
    for (int r = 0; r < CR; r++) L[r] += qs[(size_t)r * hd + d] * k;
  }
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
                                uint32_t hdp, const float *qs, float *m, float *l, float *acc) {
  const size_t es = dt == OKV_DTYPE_F32 ? 4u : 2u;
  const uint8_t *vp = slot + (size_t)16u * hd * es;
  v16f L[CR];
  OKV_ISA(block_logits)(dt, CR, slot, valid, hd, qs, L);
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
    v16f A[CR];
    for (int r = 0; r < CR; r++) {
      memcpy(&A[r], acc + (size_t)r * hdp + c, sizeof(v16f));
      A[r] *= alpha[r];
    }
    if (c + 16 <= hd) {
      for (uint32_t j = 0; j < valid; j++) {
        v16f v = OKV_ISA(ld)(vp + ((size_t)j * hd + c) * es, dt);
#pragma GCC unroll 8
        for (int r = 0; r < CR; r++) A[r] += pr[r][j] * v;
      }
    } else {
      for (uint32_t j = 0; j < valid; j++) {
        v16f v = OKV_ISA(ld_part)(vp + ((size_t)j * hd + c) * es, dt, hd - c);
        for (int r = 0; r < CR; r++) A[r] += pr[r][j] * v;
      }
    }
    for (int r = 0; r < CR; r++) memcpy(acc + (size_t)r * hdp + c, &A[r], sizeof(v16f));
  }
}

/* Attention state of one pass (up to OKV_PASS_ROWS rows) over blocks
 * [b0, b1) of a unit's working set. */
OKV_AI void OKV_ISA(pass_blocks_dt)(const int dt, const okv_cpu_attn_ctx_t *cx, uint32_t u, uint32_t b0, uint32_t b1,
                                    uint32_t nr, const float *qs, float *m, float *l, float *acc) {
  const uint32_t hd = cx->d->head_dim, hdp = cx->hdp;
  const uint32_t base = cx->d->ws_offsets[u];
  for (uint32_t b = b0; b < b1; b++) {
    const uint8_t *slot = cx->kv_pool + (size_t)cx->d->ws_slots[base + b] * cx->slot_bytes;
    uint32_t valid = cx->d->ws_valid[base + b];
    if (b + 1 < b1) __builtin_prefetch(cx->kv_pool + (size_t)cx->d->ws_slots[base + b + 1] * cx->slot_bytes);
    /* rows in chunks of 8, 4, 2, 1 (compile-time row counts keep the
     * accumulators in registers) */
    for (uint32_t s = 0; s < nr;) {
      uint32_t left = nr - s, cr = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      const float *q = qs + (size_t)s * hd;
      float *a = acc + (size_t)s * hdp;
      switch (cr) {
        case 1: OKV_ISA(block_step)(dt, 1, slot, valid, hd, hdp, q, m + s, l + s, a); break;
        case 2: OKV_ISA(block_step)(dt, 2, slot, valid, hd, hdp, q, m + s, l + s, a); break;
        case 4: OKV_ISA(block_step)(dt, 4, slot, valid, hd, hdp, q, m + s, l + s, a); break;
        default: OKV_ISA(block_step)(dt, 8, slot, valid, hd, hdp, q, m + s, l + s, a); break;
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
    uint32_t valid = cx->d->ws_valid[base + b];
    for (uint32_t s = 0; s < nr; s += 8) {
      uint32_t cr = nr - s < 8 ? nr - s : 8;
      v16f L[8];
      if (cr > 4)
        OKV_ISA(block_logits)(dt, 8, slot, valid, hd, qs + (size_t)s * hd, L); /* rows >= nr: padding */
      else if (cr > 2)
        OKV_ISA(block_logits)(dt, 4, slot, valid, hd, qs + (size_t)s * hd, L);
      else
        OKV_ISA(block_logits)(dt, 2, slot, valid, hd, qs + (size_t)s * hd, L);
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

/* Quest bound of nb blocks for nr rows: qp = max(q,0) * scale, qn = min(q,0) *
 * scale (rows of hdp floats, zero padded); score[b] = max over rows of
 * sum_i qp_i * max_i + qn_i * min_i (== sum_i max(q_i min_i, q_i max_i)). */
static void OKV_ISA(score_range)(const float *summ, uint32_t hd, uint32_t hdp, uint32_t nb, uint32_t nr,
                                 const float *qp, const float *qn, float *scores) {
  for (uint32_t b = 0; b < nb; b++) {
    const float *mn = summ + (size_t)b * 2u * hd, *mx = mn + hd;
    float best = -INFINITY;
    for (uint32_t s = 0; s < nr; s += 4) {
      uint32_t cr = nr - s < 4 ? nr - s : 4;
      v16f A[4] = {okv_v16f_splat(0.0f), okv_v16f_splat(0.0f), okv_v16f_splat(0.0f), okv_v16f_splat(0.0f)};
      for (uint32_t c = 0; c < hdp; c += 16) {
        v16f vmn, vmx;
        if (c + 16 <= hd) {
          memcpy(&vmn, mn + c, sizeof vmn);
          memcpy(&vmx, mx + c, sizeof vmx);
        } else {
          vmn = OKV_ISA(ld_part)(mn + c, OKV_DTYPE_F32, hd - c);
          vmx = OKV_ISA(ld_part)(mx + c, OKV_DTYPE_F32, hd - c);
        }
        for (uint32_t i = 0; i < 4; i++) {
          if (i >= cr) break;
          v16f a, bq;
          memcpy(&a, qp + (size_t)(s + i) * hdp + c, sizeof a);
          memcpy(&bq, qn + (size_t)(s + i) * hdp + c, sizeof bq);
          A[i] += a * vmx + bq * vmn;
        }
      }
      for (uint32_t i = 0; i < cr; i++) {
        float v = OKV_ISA(hsum)(&A[i]);
        best = v > best ? v : best;
      }
    }
    scores[b] = best;
  }
}

#undef OKV_AI
#undef OKV_VSEL
