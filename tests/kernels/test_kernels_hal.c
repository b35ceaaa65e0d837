/* Kernel conformance suite: written once against the public HAL kernel API
 * (include/oasiskv/kernels.h) and run per backend (argv[1] = "cpu", "cuda",
 * "hip"). Results are compared with the double-precision reference
 * (kernel_ref.c); data moves only through okv_hal_buffer_write/read, never
 * host_ptr, so the suite runs unchanged on GPUs.
 *
 * Stated tolerances (docs/kernels.md), against the reference evaluated on the
 * dtype-rounded K/V: attention |err| <= 1e-5 * max|v| * (1 + A) with A the
 * logit conditioning sum_i |q_i k_i| / sqrt(d); block mass 1e-5 * (1 + A)
 * absolute;
 * scores 1e-5 * (1 + |score|); summaries and top-K exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernel_case.h"

static const char *g_backend = "cpu";

typedef struct fixture_t {
  okv_allocator_t alloc;
  okv_hal_device_t *dev;  /* default threads */
  okv_hal_device_t *dev1; /* n_threads = 1 (CPU: checks that 1 and 2 threads agree) */
  okv_hal_stream_t *stream;
  okv_hal_stream_t *stream1;
} fixture_t;

static int make_device(fixture_t *f, int n_threads, okv_hal_device_t **out_dev, okv_hal_stream_t **out_stream) {
  okv_hal_device_params_t p;
  okv_hal_device_params_init(&p);
  p.capacity_bytes[OKV_TIER_DEVICE] = 256ull << 20;
  p.n_threads = n_threads;
  okv_status_t s = okv_hal_device_create(g_backend, &p, &f->alloc, out_dev);
  if (s == OKV_OK) s = okv_hal_stream_create(*out_dev, out_stream);
  if (s != OKV_OK) {
    print_error("device/stream create: %s\n", okv_status_message(s));
    okv_status_free(s);
    return -1;
  }
  return 0;
}

static int setup(void **state) {
  fixture_t *f = test_calloc(1, sizeof(*f));
  f->alloc = okv_test_allocator();
  if (make_device(f, 2, &f->dev, &f->stream) != 0) return -1;
  if (make_device(f, 1, &f->dev1, &f->stream1) != 0) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  int rc = 0;
  if (okv_status_consume(okv_hal_stream_release(f->stream)) != OKV_STATUS_OK) rc = -1;
  if (okv_status_consume(okv_hal_stream_release(f->stream1)) != OKV_STATUS_OK) rc = -1;
  if (okv_status_consume(okv_hal_device_release(f->dev)) != OKV_STATUS_OK) rc = -1;
  if (okv_status_consume(okv_hal_device_release(f->dev1)) != OKV_STATUS_OK) rc = -1;
  test_free(f);
  return rc;
}

/* ---- helpers ---- */

static okv_hal_buffer_t *buf_with(okv_hal_device_t *dev, okv_tier_t tier, const void *src, uint64_t bytes) {
  okv_hal_buffer_t *b = NULL;
  OKV_ASSERT_OK(okv_hal_buffer_alloc(dev, tier, bytes ? bytes : 4, &b));
  if (src && bytes) OKV_ASSERT_OK(okv_hal_buffer_write(b, 0, src, bytes));
  return b;
}

static void buf_fill_sentinel(okv_hal_buffer_t *b) {
  uint64_t n = okv_hal_buffer_size(b);
  uint8_t *tmp = test_malloc(n);
  memset(tmp, 0x5A, n);
  OKV_ASSERT_OK(okv_hal_buffer_write(b, 0, tmp, n));
  test_free(tmp);
}

static void buf_assert_sentinel(okv_hal_buffer_t *b) {
  uint64_t n = okv_hal_buffer_size(b);
  uint8_t *tmp = test_malloc(n);
  OKV_ASSERT_OK(okv_hal_buffer_read(b, 0, tmp, n));
  for (uint64_t i = 0; i < n; i++)
    if (tmp[i] != 0x5A) {
      print_error("byte %llu of the output changed after a rejected call\n", (unsigned long long)i);
      fail();
    }
  test_free(tmp);
}

static void release(okv_hal_buffer_t *b) {
  if (b) OKV_ASSERT_OK(okv_hal_buffer_release(b));
}

/* Buffers of one attention case on `dev`; q/out at nonzero offsets. */
typedef struct attn_bufs_t {
  okv_hal_buffer_t *pool, *q, *inflight, *out, *mass;
  uint64_t q_off, out_off, mass_off;
} attn_bufs_t;

static void attn_bufs_make(okv_hal_device_t *dev, const okv_kcase_t *c, attn_bufs_t *b, okv_attention_desc_t *d) {
  memset(b, 0, sizeof *b);
  b->q_off = 64;
  b->out_off = 16;
  b->mass_off = 8;
  b->pool = buf_with(dev, OKV_TIER_DEVICE, c->pool, c->pool_bytes);
  b->q = buf_with(dev, OKV_TIER_DEVICE, NULL, b->q_off + c->q_floats * 4);
  OKV_ASSERT_OK(okv_hal_buffer_write(b->q, b->q_off, c->q, c->q_floats * 4));
  if (c->inflight) b->inflight = buf_with(dev, OKV_TIER_DEVICE, c->inflight, c->inflight_floats * 4);
  b->out = buf_with(dev, OKV_TIER_DEVICE, NULL, b->out_off + c->q_floats * 4);
  b->mass = buf_with(dev, OKV_TIER_DEVICE, NULL, b->mass_off + (uint64_t)c->ws_total * c->p.n_query_tokens * 4 + 4);
  *d = c->desc;
  d->kv_pool = b->pool;
  d->q = b->q;
  d->q_offset = b->q_off;
  d->inflight_kv = b->inflight;
  d->out = b->out;
  d->out_offset = b->out_off;
  d->block_mass = b->mass;
  d->mass_offset = b->mass_off;
}

static void attn_bufs_free(attn_bufs_t *b) {
  release(b->pool);
  release(b->q);
  release(b->inflight);
  release(b->out);
  release(b->mass);
}

/* Runs attention on (dev, stream), reads out and mass back. */
static void attn_run(okv_hal_device_t *dev, okv_hal_stream_t *stream, const okv_kcase_t *c, float *out, float *mass) {
  attn_bufs_t b;
  okv_attention_desc_t d;
  attn_bufs_make(dev, c, &b, &d);
  buf_fill_sentinel(b.out);
  OKV_ASSERT_OK(okv_hal_attention_async(stream, &d));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(stream));
  OKV_ASSERT_OK(okv_hal_buffer_read(b.out, b.out_off, out, c->q_floats * 4));
  if (c->ws_total)
    OKV_ASSERT_OK(okv_hal_buffer_read(b.mass, b.mass_off, mass, (uint64_t)c->ws_total * c->p.n_query_tokens * 4));
  attn_bufs_free(&b);
}

static void check_attention_case(fixture_t *f, const okv_kcase_params_t *p, uint64_t seed) {
  okv_kcase_t c;
  okv_kcase_build(&c, p, seed);
  const size_t n_mass = (size_t)c.ws_total * p->n_query_tokens + 1;
  double *ref = test_malloc(sizeof(double) * c.q_floats), *ref_mass = test_malloc(sizeof(double) * n_mass);
  okv_ref_attention(&c.desc, c.pool, c.q, c.inflight, ref, ref_mass, NULL);
  float *out = test_malloc(sizeof(float) * c.q_floats), *mass = test_malloc(sizeof(float) * n_mass);
  float *out1 = test_malloc(sizeof(float) * c.q_floats), *mass1 = test_malloc(sizeof(float) * n_mass);
  attn_run(f->dev, f->stream, &c, out, mass);
  attn_run(f->dev1, f->stream1, &c, out1, mass1);
  double e = okv_kcase_attention_error(&c, out, ref, 1e-5), e1 = okv_kcase_attention_error(&c, out1, ref, 1e-5);
  if (!(e <= 1.0 && e1 <= 1.0))
    print_error("D=%u G=%u T=%u inflight=%u blocks=%u %s: error ratio %.3g / %.3g (1 thread)\n", p->head_dim,
                p->group_size, p->n_query_tokens, p->n_inflight, p->n_blocks, okv_dtype_name(p->dtype), e, e1);
  assert_true(e <= 1.0);
  assert_true(e1 <= 1.0);
  const double mtol = 1e-5 * (1.0 + okv_kcase_conditioning(&c));
  for (size_t i = 0; i + 1 < n_mass; i++) {
    if (!(fabs(mass[i] - ref_mass[i]) <= mtol && fabs(mass1[i] - ref_mass[i]) <= mtol))
      print_error("mass[%zu] = %.9g / %.9g (1 thread), reference %.9g (scale %g, %s)\n", i, mass[i], mass1[i],
                  ref_mass[i], p->key_scale, okv_dtype_name(p->dtype));
    assert_true(fabs(mass[i] - ref_mass[i]) <= mtol);
    assert_true(fabs(mass1[i] - ref_mass[i]) <= mtol);
  }
  test_free(ref);
  test_free(ref_mass);
  test_free(out);
  test_free(mass);
  test_free(out1);
  test_free(mass1);
  okv_kcase_free(&c);
}

/* ---- attention ---- */

static void test_attention(void **state) {
  fixture_t *f = *state;
  static const uint32_t dims[] = {8, 64, 128}, groups[] = {1, 2, 4, 8}, blocks[] = {0, 1, 7, 129};
  uint64_t seed = 10;
  for (int di = 0; di < 3; di++)
    for (int gi = 0; gi < 4; gi++)
      for (int bi = 0; bi < 4; bi++) {
        uint32_t T = 1 + (uint32_t)((di + gi + bi) & 1);
        if (blocks[bi] == 129 && (gi & 1)) continue; /* keep the suite fast */
        okv_kcase_params_t p = {.n_seqs = 2,
                                .n_kv_heads = 2,
                                .group_size = groups[gi],
                                .head_dim = dims[di],
                                .n_query_tokens = T,
                                .n_inflight = (uint32_t)(seed % (T + 1)),
                                .dtype = (okv_dtype_t)(seed % 3),
                                .n_blocks = blocks[bi],
                                .vary_blocks = true,
                                .key_scale = 1.0f,
                                .partial_last = true};
        check_attention_case(f, &p, seed++);
      }
}

static void test_attention_dtypes_and_magnitude(void **state) {
  fixture_t *f = *state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_params_t p = {.n_seqs = 1,
                            .n_kv_heads = 4,
                            .group_size = 4,
                            .head_dim = 128,
                            .n_query_tokens = 2,
                            .n_inflight = 1,
                            .dtype = (okv_dtype_t)dt,
                            .n_blocks = 20,
                            .vary_blocks = false,
                            .key_scale = 1.0f,
                            .partial_last = true};
    check_attention_case(f, &p, 100 + (uint64_t)dt);
    p.key_scale = 1e3f;
    p.n_inflight = 0;
    check_attention_case(f, &p, 200 + (uint64_t)dt);
  }
  /* one unit, long working set: split across threads and merged */
  okv_kcase_params_t p = {.n_seqs = 1,
                          .n_kv_heads = 1,
                          .group_size = 4,
                          .head_dim = 128,
                          .n_query_tokens = 2,
                          .n_inflight = 2,
                          .dtype = OKV_DTYPE_BF16,
                          .n_blocks = 160,
                          .vary_blocks = false,
                          .key_scale = 1.0f,
                          .partial_last = true};
  check_attention_case(f, &p, 300);
}

/* ---- summaries: rebuild from the HOST tier == append-built ---- */

static void test_summaries(void **state) {
  fixture_t *f = *state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_params_t p = {.n_seqs = 1,
                            .n_kv_heads = 1,
                            .group_size = 1,
                            .head_dim = 64,
                            .n_query_tokens = 1,
                            .n_inflight = 0,
                            .dtype = (okv_dtype_t)dt,
                            .n_blocks = 40,
                            .vary_blocks = false,
                            .key_scale = 2.0f,
                            .partial_last = true};
    okv_kcase_t c;
    okv_kcase_build(&c, &p, 600 + (uint64_t)dt);
    const uint32_t n = c.ws_total, D = p.head_dim;
    const uint64_t bb = okv_block_bytes(p.dtype, D), sb = okv_summary_bytes(D);
    uint64_t *bi = test_malloc(8 * n), *si = test_malloc(8 * n);
    for (uint32_t i = 0; i < n; i++) bi[i] = c.ws_slots[i], si[i] = (i * 7u) % n; /* 7 coprime with 40 */
    okv_hal_buffer_t *kv = buf_with(f->dev, OKV_TIER_HOST, c.pool, c.pool_bytes);
    okv_hal_buffer_t *summ = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_hal_buffer_t *app = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_summary_desc_t sd = {.head_dim = D,
                             .kv_dtype = p.dtype,
                             .kv = kv,
                             .summaries = summ,
                             .n_blocks = n,
                             .block_index = bi,
                             .valid = c.ws_valid,
                             .summary_index = si};
    OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sd));
    /* append-built: one token at a time, all blocks per call */
    float *keys = test_malloc(sizeof(float) * D * n);
    uint8_t *first = test_malloc(n);
    for (uint32_t j = 0; j < 16; j++) {
      uint32_t m = 0;
      uint64_t *idx = test_malloc(8 * n);
      for (uint32_t i = 0; i < n; i++) {
        if (j >= c.ws_valid[i]) continue;
        for (uint32_t e = 0; e < D; e++)
          keys[(size_t)m * D + e] = (float)okv_ref_elem(c.pool + bb * bi[i], p.dtype, (uint64_t)e * 16 + j);
        first[m] = j == 0;
        idx[m++] = si[i];
      }
      OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, app, D, p.dtype, m, idx, keys, first));
      test_free(idx); /* copied at enqueue */
    }
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    float *got = test_malloc(sb * n), *got_app = test_malloc(sb * n), *ref = test_malloc(sb);
    OKV_ASSERT_OK(okv_hal_buffer_read(summ, 0, got, sb * n));
    OKV_ASSERT_OK(okv_hal_buffer_read(app, 0, got_app, sb * n));
    for (uint32_t i = 0; i < n; i++) {
      okv_ref_summary(c.pool + bb * bi[i], p.dtype, D, c.ws_valid[i], ref);
      assert_memory_equal(ref, got + si[i] * 2 * D, sb);
    }
    assert_memory_equal(got, got_app, sb * n);
    test_free(keys);
    test_free(first);
    test_free(got);
    test_free(got_app);
    test_free(ref);
    test_free(bi);
    test_free(si);
    release(kv);
    release(summ);
    release(app);
    okv_kcase_free(&c);
  }
}

/* ---- scoring and top-K ---- */

static void test_score_topk(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 4711);
  const uint32_t S = 2, H = 2, G = 4, D = 64, T = 2, NQ = H * G, nb_max = 300, U = S * H;
  const uint64_t sb = okv_summary_bytes(D);
  /* random summaries with min <= max */
  const uint32_t n_summ = U * nb_max;
  float *summ = test_malloc(sb * n_summ);
  for (uint32_t b = 0; b < n_summ; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = okv_test_rng_normal(&rng), c = okv_test_rng_normal(&rng);
      summ[(size_t)b * 2 * D + e] = a < c ? a : c;
      summ[(size_t)b * 2 * D + D + e] = a < c ? c : a;
    }
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  uint64_t sfirst[4], scfirst[4];
  uint32_t segn[4] = {nb_max, 1, 0, 257};
  for (uint32_t u = 0; u < U; u++) sfirst[u] = (uint64_t)u * nb_max, scfirst[u] = (uint64_t)u * nb_max;
  okv_hal_buffer_t *bsumm = buf_with(f->dev, OKV_TIER_DEVICE, summ, sb * n_summ);
  okv_hal_buffer_t *bq = buf_with(f->dev, OKV_TIER_DEVICE, q, sizeof(float) * S * T * NQ * D);
  okv_hal_buffer_t *bsc = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * n_summ);
  okv_score_desc_t sd = {.n_seqs = S,
                         .n_kv_heads = H,
                         .group_size = G,
                         .head_dim = D,
                         .n_query_tokens = T,
                         .t_begin = 1,
                         .t_end = 2,
                         .q = bq,
                         .summaries = bsumm,
                         .seg_summary_first = sfirst,
                         .seg_n_blocks = segn,
                         .scores = bsc,
                         .seg_score_first = scfirst};
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &sd));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  float *sc = test_malloc(4ull * n_summ);
  double *ref = test_malloc(8ull * n_summ);
  OKV_ASSERT_OK(okv_hal_buffer_read(bsc, 0, sc, 4ull * n_summ));
  okv_ref_score(&sd, q, summ, ref);
  for (uint32_t u = 0; u < U; u++)
    for (uint32_t b = 0; b < segn[u]; b++) {
      double r = ref[scfirst[u] + b];
      assert_true(fabs(sc[scfirst[u] + b] - r) <= 1e-5 * (1.0 + fabs(r)));
    }
  /* top-K on the device scores, with an exclude set, vs the sort reference on
   * the same float scores */
  uint32_t eo[5] = {0, 3, 3, 3, 5}, eb[5] = {0, 10, 299, 0, 256};
  okv_hal_buffer_t *bidx = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * 128 + 12);
  okv_hal_buffer_t *bcnt = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U + 4);
  okv_topk_desc_t td = {.n_segments = U,
                        .k = 128,
                        .scores = bsc,
                        .seg_score_first = scfirst,
                        .seg_n = segn,
                        .excl_offsets = eo,
                        .excl_blocks = eb,
                        .out_indices = bidx,
                        .out_offset = 12,
                        .out_counts = bcnt,
                        .counts_offset = 4};
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &td));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint32_t *idx = test_malloc(4ull * U * 128), *ridx = test_malloc(4ull * U * 128), cnt[4], rcnt[4];
  OKV_ASSERT_OK(okv_hal_buffer_read(bidx, 12, idx, 4ull * U * 128));
  OKV_ASSERT_OK(okv_hal_buffer_read(bcnt, 4, cnt, sizeof cnt));
  okv_ref_topk(&td, sc, ridx, rcnt);
  assert_memory_equal(idx, ridx, 4ull * U * 128);
  assert_memory_equal(cnt, rcnt, sizeof cnt);
  assert_int_equal(cnt[0], 128);
  assert_int_equal(cnt[1], 1);
  assert_int_equal(cnt[2], 0);
  test_free(summ);
  test_free(q);
  test_free(sc);
  test_free(ref);
  test_free(idx);
  test_free(ridx);
  release(bsumm);
  release(bq);
  release(bsc);
  release(bidx);
  release(bcnt);
}

/* ---- invalid descriptors: INVALID_ARGUMENT, nothing written ---- */

static void expect_invalid_attention(fixture_t *f, const okv_attention_desc_t *d, okv_hal_buffer_t *out,
                                     okv_hal_buffer_t *mass, const char *what) {
  okv_status_t s = okv_hal_attention_async(f->stream, d);
  if (okv_status_code(s) != OKV_STATUS_INVALID_ARGUMENT) {
    print_error("attention with %s: got %s (%s)\n", what, okv_status_code_name(okv_status_code(s)),
                okv_status_message(s));
    okv_status_free(s);
    fail();
  }
  okv_status_free(s);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_assert_sentinel(out);
  buf_assert_sentinel(mass);
}

static void test_invalid_attention(void **state) {
  fixture_t *f = *state;
  okv_kcase_params_t p = {.n_seqs = 2,
                          .n_kv_heads = 2,
                          .group_size = 2,
                          .head_dim = 16,
                          .n_query_tokens = 2,
                          .n_inflight = 1,
                          .dtype = OKV_DTYPE_F32,
                          .n_blocks = 3,
                          .vary_blocks = false,
                          .key_scale = 1.0f,
                          .partial_last = true};
  okv_kcase_t c;
  okv_kcase_build(&c, &p, 12);
  attn_bufs_t b;
  okv_attention_desc_t good, d;
  attn_bufs_make(f->dev, &c, &b, &good);
  buf_fill_sentinel(b.out);
  buf_fill_sentinel(b.mass);
  uint32_t offs[5], slots[12];
  uint8_t valid[12];
  okv_hal_buffer_t *other = NULL;
  okv_hal_device_t *dev2 = f->dev1;
  OKV_ASSERT_OK(okv_hal_buffer_alloc(dev2, OKV_TIER_DEVICE, okv_hal_buffer_size(b.q), &other));

#define MUTATE(what, stmt)                                \
  do {                                                    \
    d = good;                                             \
    stmt;                                                 \
    expect_invalid_attention(f, &d, b.out, b.mass, what); \
  } while (0)
  MUTATE("head_dim 0", d.head_dim = 0);
  MUTATE("head_dim 257", d.head_dim = 257);
  MUTATE("group_size 0", d.group_size = 0);
  MUTATE("n_seqs 0", d.n_seqs = 0);
  MUTATE("n_kv_heads 0", d.n_kv_heads = 0);
  MUTATE("T 0", d.n_query_tokens = 0);
  MUTATE("T 5", d.n_query_tokens = 5);
  MUTATE("n_inflight > T", d.n_inflight = 3);
  MUTATE("inflight NULL", d.inflight_kv = NULL);
  MUTATE("inflight given with n_inflight 0", d.n_inflight = 0);
  MUTATE("kv_dtype", d.kv_dtype = OKV_DTYPE_COUNT);
  MUTATE("kv_pool NULL", d.kv_pool = NULL);
  MUTATE("n_slots beyond pool", d.n_slots = c.n_slots + 1);
  MUTATE("n_slots overflow", d.n_slots = UINT64_MAX / 2);
  memcpy(offs, c.ws_offsets, sizeof offs);
  offs[0] = 1;
  MUTATE("ws_offsets[0] != 0", d.ws_offsets = offs);
  memcpy(offs, c.ws_offsets, sizeof offs);
  offs[2] = offs[1] - 1;
  MUTATE("ws_offsets not monotone", d.ws_offsets = offs);
  memcpy(slots, c.ws_slots, sizeof slots);
  slots[11] = (uint32_t)c.n_slots;
  MUTATE("slot >= n_slots", d.ws_slots = slots);
  memcpy(valid, c.ws_valid, sizeof valid);
  valid[4] = 0;
  MUTATE("valid 0", d.ws_valid = valid);
  valid[4] = 17;
  MUTATE("valid 17", d.ws_valid = valid);
  MUTATE("ws_slots NULL", d.ws_slots = NULL);
  MUTATE("q offset beyond buffer", d.q_offset = okv_hal_buffer_size(b.q));
  MUTATE("q offset overflow", d.q_offset = UINT64_MAX - 3);
  MUTATE("q offset misaligned", d.q_offset = 2);
  MUTATE("q NULL", d.q = NULL);
  MUTATE("q on another device", d.q = other);
  MUTATE("out range", d.out_offset = b.out_off + 4);
  MUTATE("out NULL", d.out = NULL);
  MUTATE("mass range", d.mass_offset = okv_hal_buffer_size(b.mass) - 8);
  MUTATE("inflight range", d.inflight_offset = 4);
  MUTATE("more heads than q holds", d.n_kv_heads = 3);
  MUTATE("kv_pool not a handle", d.kv_pool = (okv_hal_buffer_t *)&offs);
#undef MUTATE
  OKV_ASSERT_CODE(okv_hal_attention_async(NULL, &good), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_attention_async(f->stream, NULL), OKV_STATUS_INVALID_ARGUMENT);
  /* the good descriptor does run and writes */
  OKV_ASSERT_OK(okv_hal_attention_async(f->stream, &good));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  float o;
  OKV_ASSERT_OK(okv_hal_buffer_read(b.out, b.out_off, &o, 4));
  assert_true(isfinite(o));
  release(other);
  attn_bufs_free(&b);
  okv_kcase_free(&c);
}

static void test_invalid_others(void **state) {
  fixture_t *f = *state;
  const uint32_t D = 16;
  const uint64_t sb = okv_summary_bytes(D), bb = okv_block_bytes(OKV_DTYPE_BF16, D);
  okv_hal_buffer_t *kv = buf_with(f->dev, OKV_TIER_HOST, NULL, bb * 4);
  okv_hal_buffer_t *summ = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * 4);
  okv_hal_buffer_t *q = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * 2 * 2 * D);
  okv_hal_buffer_t *sc = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * 8);
  okv_hal_buffer_t *idx = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * 2 * 4);
  buf_fill_sentinel(summ);
  buf_fill_sentinel(sc);
  buf_fill_sentinel(idx);
  /* summaries */
  uint64_t bi[2] = {0, 3}, si[2] = {1, 3};
  uint8_t valid[2] = {16, 5}, first[2] = {1, 1};
  okv_summary_desc_t sg = {.head_dim = D,
                           .kv_dtype = OKV_DTYPE_BF16,
                           .kv = kv,
                           .summaries = summ,
                           .n_blocks = 2,
                           .block_index = bi,
                           .valid = valid,
                           .summary_index = si},
                     sd;
  sd = sg, sd.head_dim = 300;
  OKV_ASSERT_CODE(okv_hal_summarize_blocks_async(f->stream, &sd), OKV_STATUS_INVALID_ARGUMENT);
  bi[1] = 4;
  OKV_ASSERT_CODE(okv_hal_summarize_blocks_async(f->stream, &sg), OKV_STATUS_INVALID_ARGUMENT);
  bi[1] = 3, si[1] = 4;
  OKV_ASSERT_CODE(okv_hal_summarize_blocks_async(f->stream, &sg), OKV_STATUS_INVALID_ARGUMENT);
  si[1] = 3, valid[1] = 0;
  OKV_ASSERT_CODE(okv_hal_summarize_blocks_async(f->stream, &sg), OKV_STATUS_INVALID_ARGUMENT);
  valid[1] = 5;
  sd = sg, sd.summaries = NULL;
  OKV_ASSERT_CODE(okv_hal_summarize_blocks_async(f->stream, &sd), OKV_STATUS_INVALID_ARGUMENT);
  float keys[2 * 16] = {0};
  si[1] = 4;
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_BF16, 2, si, keys, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  si[1] = 3;
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_BF16, 2, si, NULL, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, 0, OKV_DTYPE_BF16, 2, si, keys, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  /* scoring */
  uint64_t sfirst[2] = {0, 2}, scfirst[2] = {0, 4};
  uint32_t segn[2] = {2, 2};
  okv_score_desc_t cg = {.n_seqs = 1,
                         .n_kv_heads = 2,
                         .group_size = 1,
                         .head_dim = D,
                         .n_query_tokens = 2,
                         .t_begin = 0,
                         .t_end = 2,
                         .q = q,
                         .summaries = summ,
                         .seg_summary_first = sfirst,
                         .seg_n_blocks = segn,
                         .scores = sc,
                         .seg_score_first = scfirst},
                   cd;
  cd = cg, cd.t_begin = 2;
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cd), OKV_STATUS_INVALID_ARGUMENT);
  cd = cg, cd.t_end = 3;
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cd), OKV_STATUS_INVALID_ARGUMENT);
  cd = cg, cd.group_size = 2; /* q too small */
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cd), OKV_STATUS_INVALID_ARGUMENT);
  segn[1] = 3; /* summaries 2..4 > 4 summaries */
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cg), OKV_STATUS_INVALID_ARGUMENT);
  segn[1] = 2, scfirst[1] = 7; /* scores 7..8 > 8 floats */
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cg), OKV_STATUS_INVALID_ARGUMENT);
  scfirst[1] = UINT64_MAX - 1;
  OKV_ASSERT_CODE(okv_hal_score_blocks_async(f->stream, &cg), OKV_STATUS_INVALID_ARGUMENT);
  scfirst[1] = 4;
  /* top-K */
  uint32_t tn[2] = {4, 4}, eo[3] = {0, 1, 2}, eb[2] = {1, 3};
  uint64_t tfirst[2] = {0, 4};
  okv_topk_desc_t tg = {.n_segments = 2,
                        .k = 4,
                        .scores = sc,
                        .seg_score_first = tfirst,
                        .seg_n = tn,
                        .excl_offsets = eo,
                        .excl_blocks = eb,
                        .out_indices = idx},
                  td;
  td = tg, td.k = 0;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &td), OKV_STATUS_INVALID_ARGUMENT);
  td = tg, td.k = 513;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &td), OKV_STATUS_INVALID_ARGUMENT);
  td = tg, td.k = 5; /* out_indices too small */
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &td), OKV_STATUS_INVALID_ARGUMENT);
  td = tg, td.out_offset = 4;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &td), OKV_STATUS_INVALID_ARGUMENT);
  tn[1] = 5;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &tg), OKV_STATUS_INVALID_ARGUMENT);
  tn[1] = 70000;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &tg), OKV_STATUS_INVALID_ARGUMENT);
  tn[1] = 4, eb[1] = 4; /* excluded block >= seg_n */
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &tg), OKV_STATUS_INVALID_ARGUMENT);
  eb[1] = 3, eo[1] = 3; /* not monotone */
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &tg), OKV_STATUS_INVALID_ARGUMENT);
  eo[1] = 1;
  td = tg, td.out_counts = idx, td.counts_offset = 30;
  OKV_ASSERT_CODE(okv_hal_topk_async(f->stream, &td), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_assert_sentinel(summ);
  buf_assert_sentinel(sc);
  buf_assert_sentinel(idx);
  /* the good descriptors run */
  OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sg));
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &cg));
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &tg));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint32_t out[8];
  OKV_ASSERT_OK(okv_hal_buffer_read(idx, 0, out, sizeof out));
  assert_int_equal(out[3], UINT32_MAX); /* 3 candidates in segment 0 */
  assert_true(out[0] < 4 && out[0] != 1);
  release(kv);
  release(summ);
  release(q);
  release(sc);
  release(idx);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_attention, setup, teardown),
      cmocka_unit_test_setup_teardown(test_attention_dtypes_and_magnitude, setup, teardown),
      cmocka_unit_test_setup_teardown(test_summaries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_score_topk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid_attention, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid_others, setup, teardown),
  };
  return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
