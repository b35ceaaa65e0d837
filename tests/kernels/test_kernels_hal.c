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

#include "select.h" /* core/: the host selection, the reference of the slot-table kernels */
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

/* Buffers of one attention case on `dev`; q, out and mass at these nonzero
 * offsets. */
enum { ATTN_Q_OFF = 64, ATTN_OUT_OFF = 16, ATTN_MASS_OFF = 8 };

typedef struct attn_bufs_t {
  okv_hal_buffer_t *pool, *q, *inflight, *out, *mass;
} attn_bufs_t;

static void attn_bufs_make(okv_hal_device_t *dev, const okv_kcase_t *c, attn_bufs_t *b, okv_attention_desc_t *d) {
  memset(b, 0, sizeof *b);
  b->pool = buf_with(dev, OKV_TIER_DEVICE, c->pool, c->pool_bytes);
  b->q = buf_with(dev, OKV_TIER_DEVICE, NULL, ATTN_Q_OFF + c->q_floats * 4);
  OKV_ASSERT_OK(okv_hal_buffer_write(b->q, ATTN_Q_OFF, c->q, c->q_floats * 4));
  if (c->inflight) b->inflight = buf_with(dev, OKV_TIER_DEVICE, c->inflight, c->inflight_floats * 4);
  b->out = buf_with(dev, OKV_TIER_DEVICE, NULL, ATTN_OUT_OFF + c->q_floats * 4);
  b->mass = buf_with(dev, OKV_TIER_DEVICE, NULL, ATTN_MASS_OFF + (uint64_t)c->ws_total * c->p.n_query_tokens * 4 + 4);
  *d = c->desc;
  d->kv_pool = b->pool;
  d->q = b->q;
  d->q_offset = ATTN_Q_OFF;
  d->inflight_kv = b->inflight;
  d->out = b->out;
  d->out_offset = ATTN_OUT_OFF;
  d->block_mass = b->mass;
  d->mass_offset = ATTN_MASS_OFF;
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
  OKV_ASSERT_OK(okv_hal_buffer_read(b.out, ATTN_OUT_OFF, out, c->q_floats * 4));
  if (c->ws_total)
    OKV_ASSERT_OK(okv_hal_buffer_read(b.mass, ATTN_MASS_OFF, mass, (uint64_t)c->ws_total * c->p.n_query_tokens * 4));
  attn_bufs_free(&b);
}

/* Runs case (p, seed) on the default device and on the 1-thread one, checks
 * both against the reference. */
static void check_attention_case(fixture_t *f, const okv_kcase_params_t *p, uint64_t seed) {
  okv_kcase_t c;
  okv_kcase_build(&c, p, seed);
  okv_kcase_ref_t ref;
  okv_kcase_ref_make(&c, &ref);
  float *out = test_malloc(sizeof(float) * c.q_floats), *mass = test_malloc(sizeof(float) * ref.n_mass);
  attn_run(f->dev, f->stream, &c, out, mass);
  okv_kcase_assert_attention(&c, out, ref.out, 1e-5, "default threads");
  okv_kcase_assert_mass(&c, mass, ref.mass, 1e-5, "default threads");
  attn_run(f->dev1, f->stream1, &c, out, mass);
  okv_kcase_assert_attention(&c, out, ref.out, 1e-5, "1 thread");
  okv_kcase_assert_mass(&c, mass, ref.mass, 1e-5, "1 thread");
  test_free(out);
  test_free(mass);
  okv_kcase_ref_free(&ref);
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
        okv_kcase_params_t p = okv_kcase_params(2, 2, groups[gi], dims[di], T, (uint32_t)(seed % (T + 1)),
                                                (okv_dtype_t)(seed % 3), blocks[bi]);
        p.vary_blocks = true;
        check_attention_case(f, &p, seed++);
      }
}

static void test_attention_dtypes_and_magnitude(void **state) {
  fixture_t *f = *state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_params_t p = okv_kcase_params(1, 4, 4, 128, 2, 1, (okv_dtype_t)dt, 20);
    check_attention_case(f, &p, 100 + (uint64_t)dt);
    p.key_scale = 1e3f;
    p.n_inflight = 0;
    check_attention_case(f, &p, 200 + (uint64_t)dt);
  }
  /* one unit, long working set: split across threads and merged */
  okv_kcase_params_t p = okv_kcase_params(1, 1, 4, 128, 2, 2, OKV_DTYPE_BF16, 160);
  check_attention_case(f, &p, 300);
}

/* ---- summaries: rebuild from the HOST tier == append-built ---- */

static void test_summaries(void **state) {
  fixture_t *f = *state;
  for (int dt = 0; dt < 3; dt++) {
    okv_kcase_t c;
    okv_kcase_build_blocks(&c, 64, (okv_dtype_t)dt, 40, 2.0f, 600 + (uint64_t)dt);
    const uint32_t n = c.ws_total, D = c.p.head_dim;
    const uint64_t sb = okv_summary_bytes(D);
    uint64_t *bi = test_malloc(8 * n), *si = test_malloc(8 * n);
    for (uint32_t i = 0; i < n; i++) bi[i] = c.ws_slots[i], si[i] = (i * 7u) % n; /* 7 coprime with 40 */
    okv_hal_buffer_t *kv = buf_with(f->dev, OKV_TIER_HOST, c.pool, c.pool_bytes);
    okv_hal_buffer_t *summ = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_hal_buffer_t *app = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_summary_desc_t sd = {.head_dim = D,
                             .kv_dtype = c.p.dtype,
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
        okv_kcase_key(&c, bi[i], j, keys + (size_t)m * D);
        first[m] = j == 0;
        idx[m++] = si[i];
      }
      OKV_ASSERT_OK(okv_hal_summary_append_async(f->stream, app, D, c.p.dtype, m, idx, keys, first));
      test_free(idx); /* copied at enqueue */
    }
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    float *got = test_malloc(sb * n), *got_app = test_malloc(sb * n);
    OKV_ASSERT_OK(okv_hal_buffer_read(summ, 0, got, sb * n));
    OKV_ASSERT_OK(okv_hal_buffer_read(app, 0, got_app, sb * n));
    okv_kcase_assert_summaries(&c, bi, si, n, got);
    assert_memory_equal(got, got_app, sb * n);
    test_free(keys);
    test_free(first);
    test_free(got);
    test_free(got_app);
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
  okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
  sd.t_begin = 1;
  sd.q = bq;
  sd.summaries = bsumm;
  sd.scores = bsc;
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
  okv_topk_desc_t td = okv_kcase_topk_desc(U, 128, scfirst, segn, eo, eb);
  td.scores = bsc;
  td.out_indices = bidx;
  td.out_offset = 12;
  td.out_counts = bcnt;
  td.counts_offset = 4;
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &td));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint32_t *idx = test_malloc(4ull * U * 128), *ridx = test_malloc(4ull * U * 128), cnt[4], rcnt[4];
  OKV_ASSERT_OK(okv_hal_buffer_read(bidx, 12, idx, 4ull * U * 128));
  OKV_ASSERT_OK(okv_hal_buffer_read(bcnt, 4, cnt, sizeof cnt));
  okv_ref_topk(&td, sc, ridx, rcnt);
  assert_memory_equal(idx, ridx, 4ull * U * 128);
  assert_memory_equal(cnt, rcnt, sizeof cnt);
  const uint32_t want_cnt[3] = {128, 1, 0}; /* full, one block, empty segment */
  assert_memory_equal(cnt, want_cnt, sizeof want_cnt);
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

/* ---- narrowed summaries, ranges, index map, group summaries ---- */

/* True (after printing why) when `s` is UNAVAILABLE: the backend lacks the
 * kernel; the caller skips. Any other non-OK status fails the test. */
static bool kernel_unavailable(okv_status_t s, const char *what) {
  if (okv_status_code(s) == OKV_STATUS_UNAVAILABLE) {
    print_message("# %s: %s (backend '%s' lacks the hook): skipped\n", what, okv_status_message(s), g_backend);
    okv_status_free(s);
    return true;
  }
  OKV_ASSERT_OK(s);
  return false;
}

/* Rebuilt f16 / bf16 summaries (from the HOST tier) are the directed
 * narrowing of the exact ones; append-built ones equal them. */
static void test_summaries_narrow(void **state) {
  fixture_t *f = *state;
  bool append_missing = false;
  for (int sdt = 1; sdt < 3; sdt++) {
    okv_kcase_t c;
    okv_kcase_build_blocks(&c, 32, OKV_DTYPE_F32, 24, 2.0f, 700 + (uint64_t)sdt);
    const uint32_t n = c.ws_total, D = c.p.head_dim;
    const uint64_t sb = okv_summary_bytes_ex((okv_dtype_t)sdt, D);
    uint64_t *bi = test_malloc(8 * n), *si = test_malloc(8 * n);
    for (uint32_t i = 0; i < n; i++) bi[i] = c.ws_slots[i], si[i] = (i * 5u) % n;
    okv_hal_buffer_t *kv = buf_with(f->dev, OKV_TIER_HOST, c.pool, c.pool_bytes);
    okv_hal_buffer_t *summ = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_hal_buffer_t *app = buf_with(f->dev, OKV_TIER_DEVICE, NULL, sb * n);
    okv_summary_desc_t sd = {.head_dim = D,
                             .kv_dtype = c.p.dtype,
                             .kv = kv,
                             .summaries = summ,
                             .n_blocks = n,
                             .block_index = bi,
                             .valid = c.ws_valid,
                             .summary_index = si,
                             .summary_dtype = (okv_dtype_t)sdt};
    OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sd));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    uint8_t *got = test_malloc(sb * n);
    OKV_ASSERT_OK(okv_hal_buffer_read(summ, 0, got, sb * n));
    float *ref = test_malloc(sizeof(float) * 2 * D);
    for (uint32_t i = 0; i < n; i++) {
      okv_ref_summary(okv_kcase_slot(&c, bi[i]), c.p.dtype, D, c.ws_valid[i], ref);
      for (uint32_t e = 0; e < 2 * D; e++)
        assert_true(okv_ref_elem(got + si[i] * sb, (okv_dtype_t)sdt, e) ==
                    (double)okv_ref_narrow(ref[e], (okv_dtype_t)sdt, e >= D));
    }
    /* append-built: token j of every block per call */
    float *keys = test_malloc(sizeof(float) * D * n);
    uint8_t *first = test_malloc(n);
    uint64_t *idx = test_malloc(8 * n);
    for (uint32_t j = 0; j < 16 && !append_missing; j++) {
      uint32_t m = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (j >= c.ws_valid[i]) continue;
        okv_kcase_key(&c, bi[i], j, keys + (size_t)m * D);
        first[m] = j == 0;
        idx[m++] = si[i];
      }
      okv_summary_append_desc_t ad = {.summaries = app,
                                      .head_dim = D,
                                      .kv_dtype = c.p.dtype,
                                      .n = m,
                                      .summary_index = idx,
                                      .keys = keys,
                                      .first = first,
                                      .summary_dtype = (okv_dtype_t)sdt};
      append_missing = kernel_unavailable(okv_hal_summary_append_ex_async(f->stream, &ad), "narrowed append");
    }
    if (!append_missing) {
      OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
      uint8_t *got_app = test_malloc(sb * n);
      OKV_ASSERT_OK(okv_hal_buffer_read(app, 0, got_app, sb * n));
      assert_memory_equal(got, got_app, sb * n);
      test_free(got_app);
    }
    test_free(keys);
    test_free(first);
    test_free(idx);
    test_free(ref);
    test_free(got);
    test_free(bi);
    test_free(si);
    release(kv);
    release(summ);
    release(app);
    okv_kcase_free(&c);
  }
  if (append_missing) skip();
}

/* Two-level selection end to end on the device: bf16 block summaries scored
 * through a range list (equal to the flat scores of the same blocks), then
 * top-K over the candidate scores with an index map giving block ids. */
/* n random min/max summaries of head_dim D in dtype sdt (min <= max per element), test_malloc'd. */
static uint8_t *random_summaries(okv_test_rng_t *rng, okv_dtype_t sdt, uint32_t D, uint32_t n) {
  const uint64_t sb = okv_summary_bytes_ex(sdt, D);
  uint8_t *summ = test_malloc(sb * n);
  for (uint32_t b = 0; b < n; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = okv_test_rng_normal(rng), z = okv_test_rng_normal(rng);
      okv_kcase_store(summ + b * sb, sdt, e, a < z ? a : z);
      okv_kcase_store(summ + b * sb, sdt, D + e, a < z ? z : a);
    }
  return summ;
}

static void test_ranges_index_map(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 919);
  const uint32_t S = 1, H = 2, G = 4, D = 64, T = 2, NQ = H * G, nb = 160, U = S * H;
  const okv_dtype_t sdt = OKV_DTYPE_BF16;
  const uint64_t sb = okv_summary_bytes_ex(sdt, D);
  uint8_t *summ = random_summaries(&rng, sdt, D, U * nb);
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  okv_hal_buffer_t *bsumm = buf_with(f->dev, OKV_TIER_DEVICE, summ, sb * U * nb);
  okv_hal_buffer_t *bq = buf_with(f->dev, OKV_TIER_DEVICE, q, sizeof(float) * S * T * NQ * D);
  okv_hal_buffer_t *bflat = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * nb);
  /* flat scores of every block */
  uint64_t sfirst[2] = {0, nb}, scfirst[2] = {0, nb};
  uint32_t segn[2] = {nb, nb};
  okv_score_desc_t fd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
  fd.t_begin = 1;
  fd.q = bq;
  fd.summaries = bsumm;
  fd.scores = bflat;
  fd.summary_dtype = sdt;
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &fd));
  /* candidates: groups {2, 7, 0} of head 0 and {9, 3} of head 1 (16 blocks each), candidate scores packed per head */
  const uint32_t groups[5] = {2, 7, 0, 9, 3}, gseg[5] = {0, 0, 0, 1, 1};
  uint32_t rseg[5], rn[5];
  uint64_t rsf[5], rcf[5];
  uint32_t *map = test_malloc(4u * 5u * 16u);
  for (uint32_t r = 0; r < 5; r++) {
    rseg[r] = gseg[r];
    rn[r] = 16;
    rsf[r] = (uint64_t)gseg[r] * nb + groups[r] * 16u;
    rcf[r] = (uint64_t)r * 16u;
    for (uint32_t i = 0; i < 16; i++) map[r * 16 + i] = groups[r] * 16u + i; /* block id within the head */
  }
  okv_hal_buffer_t *bcand = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * 5 * 16);
  okv_score_desc_t rd = fd;
  rd.seg_summary_first = NULL;
  rd.seg_n_blocks = NULL;
  rd.seg_score_first = NULL;
  rd.scores = bcand;
  rd.n_ranges = 5;
  rd.range_seg = rseg;
  rd.range_summary_first = rsf;
  rd.range_n_blocks = rn;
  rd.range_score_first = rcf;
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &rd));
  /* top-K 20 per head over its candidates, excluding candidate position 3 of head 0 */
  uint64_t tfirst[2] = {0, 48};
  uint32_t tn[2] = {48, 32}, eo[3] = {0, 1, 1}, eb[1] = {3};
  okv_hal_buffer_t *bidx = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * 2 * 20);
  okv_topk_desc_t td = okv_kcase_topk_desc(2, 20, tfirst, tn, eo, eb);
  td.scores = bcand;
  td.out_indices = bidx;
  td.index_map = map;
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &td));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  float *flat = test_malloc(4ull * U * nb), *cand = test_malloc(4ull * 5 * 16);
  OKV_ASSERT_OK(okv_hal_buffer_read(bflat, 0, flat, 4ull * U * nb));
  OKV_ASSERT_OK(okv_hal_buffer_read(bcand, 0, cand, 4ull * 5 * 16));
  double *ref = test_malloc(sizeof(double) * 5 * 16);
  okv_ref_score(&rd, q, summ, ref);
  for (uint32_t r = 0; r < 5; r++)
    for (uint32_t i = 0; i < 16; i++) {
      const float x = cand[r * 16 + i], y = flat[rsf[r] + i];
      assert_true(fabs(x - y) <= 1e-6 * (1.0 + fabs(y)));
      assert_true(fabs(x - ref[r * 16 + i]) <= 1e-5 * (1.0 + fabs(ref[r * 16 + i])));
    }
  uint32_t idx[40], ridx[40];
  OKV_ASSERT_OK(okv_hal_buffer_read(bidx, 0, idx, sizeof idx));
  okv_ref_topk(&td, cand, ridx, NULL);
  assert_memory_equal(idx, ridx, sizeof idx);
  /* block ids: of the head's candidate groups, never the excluded candidate (group 2, block 3 = id 35) */
  for (uint32_t i = 0; i < 20; i++) {
    assert_true(idx[i] != 35u);
    uint32_t g = idx[i] / 16u;
    assert_true(g == 2 || g == 7 || g == 0);
    g = idx[20 + i] / 16u;
    assert_true(g == 9 || g == 3);
  }
  test_free(summ);
  test_free(q);
  test_free(map);
  test_free(flat);
  test_free(cand);
  test_free(ref);
  release(bsumm);
  release(bq);
  release(bflat);
  release(bcand);
  release(bidx);
}

/* Group summaries through the HAL: f32 block summaries -> bf16 group
 * summaries (16 blocks each), against the reference. */
/* The q8 second pass without a host round trip: a top-K in ascending order into a DEVICE buffer, scoring
 * over those lists with each block's summary found through its head's runs (head 0's two runs swap the halves
 * of its summaries), and a top-K whose index map is that buffer. Checked against flat scores of every summary
 * and the reference top-K given the same map on the host. */
static void test_lists_device_map(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 921);
  const uint32_t S = 1, H = 2, G = 4, D = 64, T = 2, NQ = H * G, nb = 160, NS = 2 * nb, U = S * H, K1 = 20, K2 = 8;
  const okv_dtype_t sdt = OKV_DTYPE_BF16;
  const uint64_t sb = okv_summary_bytes_ex(sdt, D);
  uint8_t *summ = random_summaries(&rng, sdt, D, NS);
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  okv_hal_buffer_t *bsumm = buf_with(f->dev, OKV_TIER_DEVICE, summ, sb * NS);
  okv_hal_buffer_t *bq = buf_with(f->dev, OKV_TIER_DEVICE, q, sizeof(float) * S * T * NQ * D);
  /* flat scores of every summary with each head's queries */
  okv_hal_buffer_t *bflat = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * NS);
  uint64_t sfirst[2] = {0, 0}, scfirst[2] = {0, NS};
  uint32_t segn[2] = {NS, NS};
  okv_score_desc_t fd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
  fd.t_begin = 1;
  fd.q = bq;
  fd.summaries = bsumm;
  fd.scores = bflat;
  fd.summary_dtype = sdt;
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &fd));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  float *flat = test_malloc(4ull * U * NS), *blk = test_malloc(4ull * U * nb);
  OKV_ASSERT_OK(okv_hal_buffer_read(bflat, 0, flat, 4ull * U * NS));
  /* head 0: blocks [0, 80) at summaries 80.., [80, 160) at 0..; head 1: blocks [0, 160) at 160.. */
  const uint32_t ro[3] = {0, 2, 3}, rf[3] = {0, 80, 0}, rn[3] = {80, 80, nb};
  const uint64_t rs[3] = {80, 0, nb};
  for (uint32_t b = 0; b < nb; b++) {
    blk[b] = flat[b < 80 ? 80 + b : b - 80];
    blk[nb + b] = flat[NS + nb + b];
  }
  /* first pass: top-K1 by block score, ascending, head 0's block 7 excluded */
  okv_hal_buffer_t *bblk = buf_with(f->dev, OKV_TIER_DEVICE, blk, 4ull * U * nb);
  okv_hal_buffer_t *bcand = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * K1);
  uint64_t bfirst[2] = {0, nb};
  uint32_t bn[2] = {nb, nb}, eo[3] = {0, 1, 1}, eb[1] = {7};
  okv_topk_desc_t t1 = okv_kcase_topk_desc(2, K1, bfirst, bn, eo, eb);
  t1.scores = bblk;
  t1.out_indices = bcand;
  t1.ascending = true;
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &t1));
  /* second pass: the listed blocks' exact scores, then the top-K2 mapped through the lists */
  okv_hal_buffer_t *bls = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * K1);
  uint64_t lfirst[2] = {0, K1};
  uint32_t ln[2] = {K1, K1 - 3}; /* head 1 scores only its first 17 candidates */
  okv_score_desc_t ld = fd;
  ld.seg_summary_first = NULL;
  ld.seg_n_blocks = ln;
  ld.seg_score_first = lfirst;
  ld.scores = bls;
  ld.list_blocks = bcand;
  ld.list_stride = K1;
  ld.seg_run_offsets = ro;
  ld.run_first_block = rf;
  ld.run_n_blocks = rn;
  ld.run_summary_first = rs;
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &ld));
  okv_hal_buffer_t *bout = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * U * K2);
  okv_topk_desc_t t2 = okv_kcase_topk_desc(2, K2, lfirst, ln, NULL, NULL);
  t2.scores = bls;
  t2.out_indices = bout;
  t2.index_map_buffer = bcand;
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &t2));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  /* the first pass: the reference top-K1's set, ascending */
  uint32_t cand[2 * K1], want[2 * K1];
  OKV_ASSERT_OK(okv_hal_buffer_read(bcand, 0, cand, sizeof cand));
  t1.ascending = false;
  okv_ref_topk(&t1, blk, want, NULL);
  for (uint32_t u = 0; u < U; u++) {
    uint32_t *w = want + u * K1;
    for (uint32_t i = 1; i < K1; i++) /* insertion sort: ascending */
      for (uint32_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
        uint32_t x = w[j];
        w[j] = w[j - 1];
        w[j - 1] = x;
      }
  }
  assert_memory_equal(cand, want, sizeof cand);
  for (uint32_t i = 0; i < K1; i++) assert_true(cand[i] != 7u);
  /* the second pass's scores: each listed block's flat score through the runs */
  float ls[2 * K1];
  OKV_ASSERT_OK(okv_hal_buffer_read(bls, 0, ls, sizeof ls));
  for (uint32_t u = 0; u < U; u++)
    for (uint32_t i = 0; i < ln[u]; i++) {
      const float y = blk[u * nb + cand[u * K1 + i]];
      assert_true(fabs(ls[u * K1 + i] - y) <= 1e-6 * (1.0 + fabs(y)));
    }
  /* the final top-K: the reference's, given the same map on the host */
  uint32_t out[2 * K2], rout[2 * K2];
  OKV_ASSERT_OK(okv_hal_buffer_read(bout, 0, out, sizeof out));
  t2.index_map_buffer = NULL;
  t2.index_map = cand;
  okv_ref_topk(&t2, ls, rout, NULL);
  assert_memory_equal(out, rout, sizeof out);
  test_free(summ);
  test_free(q);
  test_free(flat);
  test_free(blk);
  release(bsumm);
  release(bq);
  release(bflat);
  release(bblk);
  release(bcand);
  release(bls);
  release(bout);
}

static void test_summary_reduce_hal(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 77);
  const uint32_t D = 32, n_blocks = 64, n_groups = 4;
  const uint64_t ssb = okv_summary_bytes_ex(OKV_DTYPE_F32, D), dsb = okv_summary_bytes_ex(OKV_DTYPE_BF16, D);
  float *src = test_malloc(ssb * n_blocks);
  for (uint32_t b = 0; b < n_blocks; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = okv_test_rng_normal(&rng), z = okv_test_rng_normal(&rng);
      src[b * 2 * D + e] = a < z ? a : z;
      src[b * 2 * D + D + e] = a < z ? z : a;
    }
  okv_hal_buffer_t *bsrc = buf_with(f->dev, OKV_TIER_DEVICE, src, ssb * n_blocks);
  okv_hal_buffer_t *bdst = buf_with(f->dev, OKV_TIER_DEVICE, NULL, dsb * (n_groups + 1));
  buf_fill_sentinel(bdst);
  uint64_t first[4] = {0, 16, 32, 48}, di[4] = {4, 3, 2, 1}; /* dst summary 0 untouched */
  uint32_t n[4] = {16, 16, 16, 16};
  okv_summary_reduce_desc_t rd = {.head_dim = D,
                                  .src = bsrc,
                                  .src_dtype = OKV_DTYPE_F32,
                                  .dst = bdst,
                                  .dst_dtype = OKV_DTYPE_BF16,
                                  .n = n_groups,
                                  .src_first = first,
                                  .src_n = n,
                                  .dst_index = di};
  if (kernel_unavailable(okv_hal_summary_reduce_async(f->stream, &rd), "summary reduce")) {
    release(bsrc);
    release(bdst);
    test_free(src);
    skip();
  }
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint8_t *got = test_malloc(dsb * (n_groups + 1));
  OKV_ASSERT_OK(okv_hal_buffer_read(bdst, 0, got, dsb * (n_groups + 1)));
  float *ref = test_malloc(sizeof(float) * 2 * D);
  for (uint32_t i = 0; i < n_groups; i++) {
    okv_ref_summary_reduce(src + first[i] * 2 * D, OKV_DTYPE_F32, n[i], D, OKV_DTYPE_BF16, ref);
    for (uint32_t e = 0; e < 2 * D; e++) assert_true(okv_ref_elem(got + di[i] * dsb, OKV_DTYPE_BF16, e) == ref[e]);
  }
  for (uint64_t e = 0; e < dsb; e++) assert_int_equal(got[e], 0x5A);
  test_free(ref);
  test_free(got);
  test_free(src);
  release(bsrc);
  release(bdst);
}

/* 8-bit summaries (OKV_DTYPE_Q8): bf16 summaries encoded through the reduce
 * kernel satisfy the format's checks (lo exact, codes the tightest bounds;
 * a point box gets step 0, a non-finite one step < 0); scores of every
 * block and row equal the double-precision definition, are upper bounds of
 * the exact Quest bound of the bf16 summaries (hence of every key), and
 * exceed it by no more than the documented slack. head_dim 40 (codes not a
 * multiple of 64 bytes), 6 rows (a partial group of four), 23 blocks (a
 * partial group of four), and a range list. */
static void test_q8_hal(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 808);
  const uint32_t S = 1, H = 2, G = 3, D = 40, T = 2, NQ = H * G, nb = 23, U = S * H, n_summ = U * nb;
  const uint64_t sb = okv_summary_bytes_ex(OKV_DTYPE_BF16, D), qb = okv_summary_bytes_ex(OKV_DTYPE_Q8, D);
  assert_int_equal(qb, 8 + 80);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_Q8, 128), 264);
  assert_int_equal(okv_summary_bytes_ex(OKV_DTYPE_Q8, 3), 16);
  uint16_t *summ = test_malloc(sb * n_summ);
  for (uint32_t b = 0; b < n_summ; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = 3.0f * okv_test_rng_normal(&rng), c = 3.0f * okv_test_rng_normal(&rng);
      if (b == 5) a = c = 0.75f;          /* a point box: step 0 */
      if (b == 9 && e == 7) c = INFINITY; /* not finite: scores +inf */
      summ[(size_t)b * 2 * D + e] = okv_f32_to_bf16_down(a < c ? a : c);
      summ[(size_t)b * 2 * D + D + e] = okv_f32_to_bf16_up(a < c ? c : a);
    }
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  for (uint32_t e = 0; e < D; e++) q[(size_t)(T - 1) * NQ * D + 1 * D + e] = 0.0f; /* an all-zero row */
  uint64_t *first = test_malloc(8ull * n_summ);
  uint32_t *ones = test_malloc(4ull * n_summ);
  for (uint32_t i = 0; i < n_summ; i++) first[i] = i, ones[i] = 1;
  okv_hal_buffer_t *bsrc = buf_with(f->dev, OKV_TIER_DEVICE, summ, sb * n_summ);
  okv_hal_buffer_t *bq8 = buf_with(f->dev, OKV_TIER_DEVICE, NULL, qb * n_summ);
  okv_summary_reduce_desc_t rd = {.head_dim = D,
                                  .src = bsrc,
                                  .src_dtype = OKV_DTYPE_BF16,
                                  .dst = bq8,
                                  .dst_dtype = OKV_DTYPE_Q8,
                                  .n = n_summ,
                                  .src_first = first,
                                  .src_n = ones,
                                  .dst_index = first};
  if (kernel_unavailable(okv_hal_summary_reduce_async(f->stream, &rd), "summary reduce")) {
    release(bsrc);
    release(bq8);
    test_free(summ);
    test_free(q);
    test_free(first);
    test_free(ones);
    skip();
  }
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint8_t *q8 = test_malloc(qb * n_summ);
  OKV_ASSERT_OK(okv_hal_buffer_read(bq8, 0, q8, qb * n_summ));
  float *mn = test_malloc(4ull * D), *mx = test_malloc(4ull * D);
  for (uint32_t b = 0; b < n_summ; b++) {
    for (uint32_t e = 0; e < D; e++) {
      mn[e] = okv_bf16_to_f32(summ[(size_t)b * 2 * D + e]);
      mx[e] = okv_bf16_to_f32(summ[(size_t)b * 2 * D + D + e]);
    }
    int why = okv_ref_q8_check(mn, mx, D, q8 + b * qb);
    if (why != 0) print_error("8-bit summary %u fails check %d\n", b, why);
    assert_int_equal(why, 0);
  }
  float st5, st9;
  memcpy(&st5, q8 + 5 * qb + 4, 4);
  memcpy(&st9, q8 + 9 * qb + 4, 4);
  assert_true(st5 == 0.0f && st9 < 0.0f);
  /* Scores per segment (t_begin 0: both query tokens), then through ranges. */
  uint64_t sfirst[2] = {0, nb}, scfirst[2] = {0, nb};
  uint32_t segn[2] = {nb, nb - 2};
  okv_hal_buffer_t *bqq = buf_with(f->dev, OKV_TIER_DEVICE, q, sizeof(float) * S * T * NQ * D);
  okv_hal_buffer_t *bsc = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * n_summ);
  okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
  sd.t_begin = 0;
  sd.q = bqq;
  sd.summaries = bq8;
  sd.summary_dtype = OKV_DTYPE_Q8;
  sd.scores = bsc;
  float *sc = test_malloc(4ull * n_summ);
  double *ref = test_malloc(8ull * n_summ), *exact = test_malloc(8ull * n_summ);
  for (int pass = 0; pass < 2; pass++) {
    uint32_t rseg[3] = {1, 0, 0}, rn[3] = {4, 7, 9};
    uint64_t rsf[3] = {nb + 3, 0, 13}, rcf[3] = {nb + 3, 0, 13};
    if (pass == 1) {
      sd.n_ranges = 3;
      sd.range_seg = rseg;
      sd.range_summary_first = rsf;
      sd.range_n_blocks = rn;
      sd.range_score_first = rcf;
    }
    for (uint32_t i = 0; i < n_summ; i++) sc[i] = -777.0f, ref[i] = -777.0, exact[i] = -777.0;
    OKV_ASSERT_OK(okv_hal_buffer_write(bsc, 0, sc, 4ull * n_summ));
    OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &sd));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    OKV_ASSERT_OK(okv_hal_buffer_read(bsc, 0, sc, 4ull * n_summ));
    okv_ref_score(&sd, q, q8, ref);
    okv_score_desc_t ed = sd;
    ed.summary_dtype = OKV_DTYPE_BF16;
    okv_ref_score(&ed, q, summ, exact);
    for (uint32_t i = 0; i < n_summ; i++) {
      if (ref[i] == -777.0) {
        assert_true(sc[i] == -777.0f); /* not a scored block: untouched */
        continue;
      }
      if (i == 9) {
        assert_true(isinf(sc[i]) && sc[i] > 0);
        continue;
      }
      if (!(fabs(sc[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])))) {
        print_error("pass %d block %u: 8-bit score %.9g, definition %.9g\n", pass, i, sc[i], ref[i]);
        fail();
      }
      assert_true(sc[i] >= exact[i] - 1e-5 * (1.0 + fabs(exact[i]))); /* an upper bound */
      /* ... no looser than the documented slack, for the row that gives the exact bound */
      float step;
      memcpy(&step, q8 + i * qb + 4, 4);
      double l1 = 0, codes = 0;
      for (uint32_t e = 0; e < D; e++) codes += q8[i * qb + 8 + e] + q8[i * qb + 8 + D + e];
      double slack_max = 0;
      for (uint32_t r = 0; r < T * NQ; r++) {
        l1 = 0;
        double m = 0;
        for (uint32_t e = 0; e < D; e++) {
          double x = fabs(q[(size_t)r * D + e]) / sqrt((double)D);
          l1 += x;
          m = x > m ? x : m;
        }
        double sl = step * (l1 + m / 127.0 * 1.0001 * codes);
        slack_max = sl > slack_max ? sl : slack_max;
      }
      assert_true(sc[i] <= exact[i] + slack_max + 1e-5 * (1.0 + fabs(exact[i])));
    }
  }
  test_free(mn);
  test_free(mx);
  test_free(summ);
  test_free(q);
  test_free(first);
  test_free(ones);
  test_free(q8);
  test_free(sc);
  test_free(ref);
  test_free(exact);
  release(bsrc);
  release(bq8);
  release(bqq);
  release(bsc);
}

/* 4-bit centres (OKV_DTYPE_C4) through the HAL: bf16 summaries encoded by the reduce kernel into a tiled
 * buffer pass the format's checks (q8_ref.c; the lanes of a tile written by different entries, out of order);
 * the scores of every block, per segment and through ranges that start inside tiles, equal the
 * double-precision definition, and the scores outside the ranges are untouched. A buffer one block short of
 * whole tiles holds only its whole tiles: scoring block 16 of a 31-block buffer is INVALID_ARGUMENT. head_dim
 * 40 (packed codes 20 bytes, groups not a multiple of 16), 6 rows, 23 blocks per KV head. */
static void test_c4_hal(void **state) {
  fixture_t *f = *state;
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 4242);
  const uint32_t S = 1, H = 2, G = 3, D = 40, T = 2, NQ = H * G, nb = 23, U = S * H, n_summ = U * nb;
  const uint64_t sb = okv_summary_bytes_ex(OKV_DTYPE_BF16, D), cb = okv_summary_bytes_ex(OKV_DTYPE_C4, D);
  const uint64_t tb = okv_ref_c4_tile_bytes(D), n_tiles = (n_summ + 15u) / 16u;
  assert_int_equal(cb, 12 + 20);
  assert_int_equal(tb, 16 * cb);
  uint16_t *summ = test_malloc(sb * n_summ);
  for (uint32_t b = 0; b < n_summ; b++)
    for (uint32_t e = 0; e < D; e++) {
      float a = 3.0f * okv_test_rng_normal(&rng), c = 3.0f * okv_test_rng_normal(&rng);
      if (b == 5) a = c = 0.75f;          /* equal centres: step 0 */
      if (b == 9 && e == 7) c = INFINITY; /* not finite: scores +inf */
      summ[(size_t)b * 2 * D + e] = okv_f32_to_bf16_down(a < c ? a : c);
      summ[(size_t)b * 2 * D + D + e] = okv_f32_to_bf16_up(a < c ? c : a);
    }
  float *q = test_malloc(sizeof(float) * S * T * NQ * D);
  for (size_t i = 0; i < (size_t)S * T * NQ * D; i++) q[i] = okv_test_rng_normal(&rng);
  for (uint32_t e = 0; e < D; e++) q[(size_t)(T - 1) * NQ * D + 1 * D + e] = 0.0f; /* an all-zero row */
  uint64_t *first = test_malloc(8ull * n_summ), *dsti = test_malloc(8ull * n_summ);
  uint32_t *ones = test_malloc(4ull * n_summ);
  for (uint32_t i = 0; i < n_summ; i++) first[i] = i, dsti[i] = n_summ - 1u - i, ones[i] = 1;
  okv_hal_buffer_t *bsrc = buf_with(f->dev, OKV_TIER_DEVICE, summ, sb * n_summ);
  okv_hal_buffer_t *bc4 = buf_with(f->dev, OKV_TIER_DEVICE, NULL, tb * n_tiles);
  /* entry i encodes source n - 1 - i into block n - 1 - i: lanes of one tile from entries far apart */
  okv_summary_reduce_desc_t rd = {.head_dim = D,
                                  .src = bsrc,
                                  .src_dtype = OKV_DTYPE_BF16,
                                  .dst = bc4,
                                  .dst_dtype = OKV_DTYPE_C4,
                                  .n = n_summ,
                                  .src_first = dsti,
                                  .src_n = ones,
                                  .dst_index = dsti};
  if (kernel_unavailable(okv_hal_summary_reduce_async(f->stream, &rd), "summary reduce")) {
    release(bsrc);
    release(bc4);
    test_free(summ);
    test_free(q);
    test_free(first);
    test_free(dsti);
    test_free(ones);
    skip();
  }
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint8_t *c4 = test_malloc(tb * n_tiles);
  OKV_ASSERT_OK(okv_hal_buffer_read(bc4, 0, c4, tb * n_tiles));
  float *mn = test_malloc(4ull * D), *mx = test_malloc(4ull * D);
  for (uint32_t b = 0; b < n_summ; b++) {
    for (uint32_t e = 0; e < D; e++) {
      mn[e] = okv_bf16_to_f32(summ[(size_t)b * 2 * D + e]);
      mx[e] = okv_bf16_to_f32(summ[(size_t)b * 2 * D + D + e]);
    }
    int why = okv_ref_c4_check(mn, mx, D, c4 + b / 16u * tb, b % 16u);
    if (why != 0) print_error("4-bit summary %u fails check %d\n", b, why);
    assert_int_equal(why, 0);
  }
  uint64_t sfirst[2] = {0, nb}, scfirst[2] = {0, nb};
  uint32_t segn[2] = {nb, nb - 2};
  okv_hal_buffer_t *bqq = buf_with(f->dev, OKV_TIER_DEVICE, q, sizeof(float) * S * T * NQ * D);
  okv_hal_buffer_t *bsc = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 4ull * n_summ);
  okv_score_desc_t sd = okv_kcase_score_desc(S, H, G, D, T, sfirst, segn, scfirst);
  sd.t_begin = 0;
  sd.q = bqq;
  sd.summaries = bc4;
  sd.summary_dtype = OKV_DTYPE_C4;
  sd.scores = bsc;
  float *sc = test_malloc(4ull * n_summ);
  double *ref = test_malloc(8ull * n_summ);
  for (int pass = 0; pass < 2; pass++) {
    uint32_t rseg[3] = {1, 0, 0}, rn[3] = {4, 7, 9};
    uint64_t rsf[3] = {nb + 3, 0, 13}, rcf[3] = {nb + 3, 0, 13};
    if (pass == 1) {
      sd.n_ranges = 3;
      sd.range_seg = rseg;
      sd.range_summary_first = rsf;
      sd.range_n_blocks = rn;
      sd.range_score_first = rcf;
    }
    for (uint32_t i = 0; i < n_summ; i++) sc[i] = -777.0f, ref[i] = -777.0;
    OKV_ASSERT_OK(okv_hal_buffer_write(bsc, 0, sc, 4ull * n_summ));
    OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &sd));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    OKV_ASSERT_OK(okv_hal_buffer_read(bsc, 0, sc, 4ull * n_summ));
    okv_ref_score(&sd, q, c4, ref);
    for (uint32_t i = 0; i < n_summ; i++) {
      if (ref[i] == -777.0) {
        assert_true(sc[i] == -777.0f); /* not a scored block: untouched */
        continue;
      }
      if (i == 9) {
        assert_true(isinf(sc[i]) && sc[i] > 0);
        continue;
      }
      if (!(fabs(sc[i] - ref[i]) <= 1e-5 * (1.0 + fabs(ref[i])))) {
        print_error("pass %d block %u: 4-bit estimate %.9g, definition %.9g\n", pass, i, sc[i], ref[i]);
        fail();
      }
    }
  }
  /* 31 blocks' bytes: one whole tile, so block 16 is past the buffer's summaries */
  okv_hal_buffer_t *bshort = buf_with(f->dev, OKV_TIER_DEVICE, NULL, 31u * cb);
  okv_score_desc_t bad = sd;
  uint32_t one_seg = 0, one_n = 1;
  uint64_t at16 = 16, at0 = 0;
  bad.summaries = bshort;
  bad.n_ranges = 1;
  bad.range_seg = &one_seg;
  bad.range_n_blocks = &one_n;
  bad.range_summary_first = &at16;
  bad.range_score_first = &at0;
  okv_status_t st = okv_hal_score_blocks_async(f->stream, &bad);
  assert_int_equal(okv_status_code(st), OKV_STATUS_INVALID_ARGUMENT);
  okv_status_free(st);
  at16 = 15; /* the tile's last block: accepted */
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &bad));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  test_free(mn);
  test_free(mx);
  test_free(summ);
  test_free(q);
  test_free(first);
  test_free(dsti);
  test_free(ones);
  test_free(c4);
  test_free(sc);
  test_free(ref);
  release(bsrc);
  release(bc4);
  release(bqq);
  release(bsc);
  release(bshort);
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
  okv_kcase_params_t p = okv_kcase_params(2, 2, 2, 16, 2, 1, OKV_DTYPE_F32, 3);
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

#define MUTATE(what, stmt) OKV_EXPECT_MUTATION(d, good, stmt, expect_invalid_attention(f, &d, b.out, b.mass, what))
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
  MUTATE("n_slots beyond pool", d.n_slots = c.desc.n_slots + 1);
  MUTATE("n_slots overflow", d.n_slots = UINT64_MAX / 2);
  memcpy(offs, c.ws_offsets, sizeof offs);
  offs[0] = 1;
  MUTATE("ws_offsets[0] != 0", d.ws_offsets = offs);
  memcpy(offs, c.ws_offsets, sizeof offs);
  offs[2] = offs[1] - 1;
  MUTATE("ws_offsets not monotone", d.ws_offsets = offs);
  memcpy(slots, c.ws_slots, sizeof slots);
  slots[11] = (uint32_t)c.desc.n_slots;
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
  MUTATE("out range", d.out_offset = ATTN_OUT_OFF + 4);
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
  OKV_ASSERT_OK(okv_hal_buffer_read(b.out, ATTN_OUT_OFF, &o, 4));
  assert_true(isfinite(o));
  release(other);
  attn_bufs_free(&b);
  okv_kcase_free(&c);
}

/* d = good; stmt; then enqueue(stream, &d) must fail with INVALID_ARGUMENT
 * (and write nothing: the caller checks its sentinels after). */
#define EXPECT_INVALID(enqueue, d, good, stmt) \
  OKV_EXPECT_MUTATION(d, good, stmt, OKV_ASSERT_CODE(enqueue(f->stream, &(d)), OKV_STATUS_INVALID_ARGUMENT))

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
  uint64_t bi[2] = {0, 3}, si[2] = {1, 3}, bi_past[2] = {0, 4}, si_past[2] = {1, 4};
  uint8_t valid[2] = {16, 5}, valid_0[2] = {16, 0}, first[2] = {1, 1};
  okv_summary_desc_t sg = {.head_dim = D,
                           .kv_dtype = OKV_DTYPE_BF16,
                           .kv = kv,
                           .summaries = summ,
                           .n_blocks = 2,
                           .block_index = bi,
                           .valid = valid,
                           .summary_index = si},
                     sd;
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.head_dim = 300);
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.block_index = bi_past);
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.summary_index = si_past);
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.valid = valid_0);
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.summaries = NULL);
  float keys[2 * 16] = {0};
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_BF16, 2, si_past, keys, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, D, OKV_DTYPE_BF16, 2, si, NULL, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_summary_append_async(f->stream, summ, 0, OKV_DTYPE_BF16, 2, si, keys, first),
                  OKV_STATUS_INVALID_ARGUMENT);
  /* scoring */
  uint64_t sfirst[2] = {0, 2}, scfirst[2] = {0, 4}, scfirst_past[2] = {0, 7}, scfirst_wrap[2] = {0, UINT64_MAX - 1};
  uint32_t segn[2] = {2, 2}, segn_past[2] = {2, 3};
  okv_score_desc_t cg = okv_kcase_score_desc(1, 2, 1, D, 2, sfirst, segn, scfirst), cd;
  cg.q = q;
  cg.summaries = summ;
  cg.scores = sc;
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.t_begin = 2);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.t_end = 3);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.group_size = 2);                 /* q too small */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.seg_n_blocks = segn_past);       /* summaries 2..4 of 4 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.seg_score_first = scfirst_past); /* scores 7..8 of 8 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, cg, cd.seg_score_first = scfirst_wrap);
  /* list mode: lists of 4 in idx (2 segments), runs {[0, 2) at summary 1} for segment 0, none for 1 */
  uint32_t ro[3] = {0, 1, 1}, ro_down[3] = {0, 2, 1}, rf[2] = {0, 1}, lrn[2] = {2, 2}, lrn_past[2] = {4, 2};
  uint32_t ro_two[3] = {0, 2, 2}, segn_over[2] = {2, 5};
  uint64_t rs[2] = {1, 0};
  okv_score_desc_t lg = cg;
  lg.list_blocks = idx;
  lg.list_stride = 4;
  lg.seg_run_offsets = ro;
  lg.run_first_block = rf;
  lg.run_n_blocks = lrn;
  lg.run_summary_first = rs;
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &lg)); /* the good one runs (idx holds sentinels: -inf) */
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_fill_sentinel(sc);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, (cd.n_ranges = 1, cd.range_seg = segn));
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.list_stride = 5);           /* lists past idx */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.list_offset = 2);           /* unaligned */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.seg_n_blocks = segn_over);  /* 5 > list_stride */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.seg_run_offsets = ro_down); /* not a CSR */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.seg_run_offsets = NULL);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.run_n_blocks = lrn_past);  /* summaries 1..5 of 4 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.seg_run_offsets = ro_two); /* [0, 2) then [1, 3) */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.list_offset = 4);          /* lists 4..36 of 32 bytes */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, lg, cd.list_blocks = sc);         /* scores written over the lists */
  /* top-K */
  uint32_t tn[2] = {4, 4}, tn_past[2] = {4, 5}, tn_max[2] = {4, 70000};
  uint32_t eo[3] = {0, 1, 2}, eo_down[3] = {0, 3, 2}, eb[2] = {1, 3}, eb_past[2] = {1, 4};
  uint64_t tfirst[2] = {0, 4};
  okv_topk_desc_t tg = okv_kcase_topk_desc(2, 4, tfirst, tn, eo, eb), td;
  tg.scores = sc;
  tg.out_indices = idx;
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.k = 0);
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.k = 513);
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.k = 5); /* out_indices too small */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.out_offset = 4);
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.seg_n = tn_past);
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.seg_n = tn_max);
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.excl_blocks = eb_past);  /* excluded block >= seg_n */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.excl_offsets = eo_down); /* not monotone */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, (td.out_counts = idx, td.counts_offset = 30));
  uint32_t hmap[8] = {0};
  EXPECT_INVALID(okv_hal_topk_async, td, tg, (td.index_map_buffer = sc, td.index_map = hmap));     /* both */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, (td.index_map_buffer = sc, td.index_map_offset = 4)); /* 1..8 of 8 */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, (td.index_map_buffer = sc, td.index_map_offset = 2)); /* unaligned */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, td.index_map_buffer = idx);                      /* read while written */
  EXPECT_INVALID(okv_hal_topk_async, td, tg, (td.index_map_buffer = sc, td.out_counts = sc)); /* the counts too */
  /* narrowed summaries: counted in bf16 units (8 summaries of 32 bytes fit the buffer of 4 f32 ones) */
  uint64_t si_bf16_ok[2] = {1, 7}, si_bf16_past[2] = {1, 8};
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.summary_dtype = OKV_DTYPE_COUNT);
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg,
                 (sd.summary_dtype = OKV_DTYPE_BF16, sd.summary_index = si_bf16_past));
  EXPECT_INVALID(okv_hal_summarize_blocks_async, sd, sg, sd.summary_index = si_bf16_ok); /* 7 of 4 f32 summaries */
  okv_summary_append_desc_t ag = {.summaries = summ,
                                  .head_dim = D,
                                  .kv_dtype = OKV_DTYPE_BF16,
                                  .n = 2,
                                  .summary_index = si_bf16_ok,
                                  .keys = keys,
                                  .first = first,
                                  .summary_dtype = OKV_DTYPE_BF16},
                            ad;
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag, ad.summary_index = si_bf16_past);
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag,
                 (ad.summary_dtype = OKV_DTYPE_F32, ad.summary_index = si_past));
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag, ad.summary_dtype = (okv_dtype_t)7);
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag, ad.kv_dtype = OKV_DTYPE_COUNT);
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag, ad.first = NULL);
  EXPECT_INVALID(okv_hal_summary_append_ex_async, ad, ag, ad.summaries = NULL);
  OKV_ASSERT_CODE(okv_hal_summary_append_ex_async(f->stream, NULL), OKV_STATUS_INVALID_ARGUMENT);
  /* group summaries: src = summ (4 f32 summaries), dst = summ in bf16 (8) */
  uint64_t rfirst[2] = {0, 2}, rfirst_past[2] = {0, 3}, rdst[2] = {6, 7}, rdst_past[2] = {6, 8};
  uint32_t rn[2] = {2, 2}, rn_0[2] = {2, 0};
  okv_summary_reduce_desc_t rg = {.head_dim = D,
                                  .src = summ,
                                  .src_dtype = OKV_DTYPE_F32,
                                  .dst = summ,
                                  .dst_dtype = OKV_DTYPE_BF16,
                                  .n = 2,
                                  .src_first = rfirst,
                                  .src_n = rn,
                                  .dst_index = rdst},
                            rdd;
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.src_first = rfirst_past); /* summaries 3..4 of 4 */
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.src_n = rn_0);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.dst_index = rdst_past);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.dst_dtype = OKV_DTYPE_F32); /* dst index 7 of 4 */
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.src_dtype = OKV_DTYPE_COUNT);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.head_dim = 0);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.src_n = NULL);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.dst = NULL);
  EXPECT_INVALID(okv_hal_summary_reduce_async, rdd, rg, rdd.src = (okv_hal_buffer_t *)&rn);
  OKV_ASSERT_CODE(okv_hal_summary_reduce_async(f->stream, NULL), OKV_STATUS_INVALID_ARGUMENT);
  /* scoring ranges: 2 segments (n_seqs 1 x 2 KV heads), 4 f32 summaries, 8 scores */
  uint32_t rseg[2] = {1, 0}, rseg_bad[2] = {1, 2}, rnb[2] = {2, 2}, rnb_past[2] = {3, 2}, rnb_big[2] = {2, 9};
  uint64_t rsf[2] = {2, 0}, rsf_wrap[2] = {2, UINT64_MAX}, rcf[2] = {4, 0}, rcf_past[2] = {7, 0};
  okv_score_desc_t crg = cg;
  crg.seg_summary_first = NULL;
  crg.seg_n_blocks = NULL;
  crg.seg_score_first = NULL;
  crg.n_ranges = 2;
  crg.range_seg = rseg;
  crg.range_summary_first = rsf;
  crg.range_n_blocks = rnb;
  crg.range_score_first = rcf;
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_seg = rseg_bad);      /* segment 2 of 2 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_n_blocks = rnb_past); /* summaries 2..4 of 4 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_n_blocks = rnb_big);  /* range 1: summaries 0..8 of 4 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_summary_first = rsf_wrap);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_score_first = rcf_past); /* scores 7..8 of 8 */
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_seg = NULL);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.range_score_first = NULL);
  EXPECT_INVALID(okv_hal_score_blocks_async, cd, crg, cd.summary_dtype = OKV_DTYPE_COUNT);
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_assert_sentinel(summ);
  buf_assert_sentinel(sc);
  buf_assert_sentinel(idx);
  /* the good descriptors run (the narrowed append and the reduce where the backend has them) */
  OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sg));
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &cg));
  OKV_ASSERT_OK(okv_hal_score_blocks_async(f->stream, &crg));
  OKV_ASSERT_OK(okv_hal_topk_async(f->stream, &tg));
  sd = sg;
  sd.summary_dtype = OKV_DTYPE_BF16;
  sd.summary_index = si_bf16_ok; /* summary 7 of 8 bf16 ones */
  OKV_ASSERT_OK(okv_hal_summarize_blocks_async(f->stream, &sd));
  (void)kernel_unavailable(okv_hal_summary_append_ex_async(f->stream, &ag), "narrowed append");
  (void)kernel_unavailable(okv_hal_summary_reduce_async(f->stream, &rg), "summary reduce");
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

/* ---- selection on slot tables ---- */

enum { SEL_PLAN = OKV_SELECT_PLAN_U32S, SEL_RES = OKV_SELECT_RESULT_U32S };

/* Slot tables of n_heads heads (R slots, W words) in a DEVICE buffer at byte `off`, with the plan, result,
 * prediction and its counts in a second buffer. */
typedef struct sel_bufs_t {
  uint32_t H, R, W, P, S; /* heads, slots, bitmap words, prediction stride, plan stride */
  uint64_t tb, off;
  okv_hal_buffer_t *tables, *io;
  uint64_t pred_off, counts_off, plan_off, result_off;
} sel_bufs_t;

static sel_bufs_t sel_bufs(okv_hal_device_t *dev, uint32_t H, uint32_t R, uint32_t W, uint32_t P, uint32_t S) {
  sel_bufs_t b = {H, R, W, P, S, okv_slot_table_bytes(R, W), 24, NULL, NULL, 0, 0, 0, 0};
  uint8_t *init = test_calloc(1, b.off + H * b.tb);
  for (uint32_t h = 0; h < H; h++) memset(init + b.off + h * b.tb, 0xff, (size_t)R * 4u); /* every slot FREE */
  b.tables = buf_with(dev, OKV_TIER_DEVICE, init, b.off + H * b.tb);
  test_free(init);
  b.pred_off = 4;
  b.counts_off = b.pred_off + (uint64_t)H * P * 4u;
  b.plan_off = b.counts_off + (uint64_t)H * 4u;
  b.result_off = b.plan_off + (uint64_t)H * S * SEL_PLAN * 4u;
  b.io = buf_with(dev, OKV_TIER_DEVICE, NULL, b.result_off + (uint64_t)H * SEL_RES * 4u);
  return b;
}

static okv_select_desc_t sel_desc(const sel_bufs_t *b, uint32_t K, uint32_t step, const uint32_t *active,
                                  const uint32_t *cap) {
  okv_select_desc_t d = {.n_heads = b->H,
                         .n_slots = b->R,
                         .bitmap_words = b->W,
                         .budget_blocks = K,
                         .step = step,
                         .table = b->tables,
                         .table_offset = b->off,
                         .predicted = b->io,
                         .predicted_offset = b->pred_off,
                         .predicted_stride = b->P,
                         .predicted_counts = b->io,
                         .counts_offset = b->counts_off,
                         .active_block = active,
                         .cap = cap,
                         .plan_stride = b->S,
                         .plan = b->io,
                         .plan_offset = b->plan_off,
                         .result = b->io,
                         .result_offset = b->result_off};
  return d;
}

static okv_slot_commit_desc_t sel_commit_desc(const sel_bufs_t *b, const uint8_t *landed) {
  okv_slot_commit_desc_t d = {.n_heads = b->H,
                              .n_slots = b->R,
                              .bitmap_words = b->W,
                              .table = b->tables,
                              .table_offset = b->off,
                              .plan_stride = b->S,
                              .plan = b->io,
                              .plan_offset = b->plan_off,
                              .result = b->io,
                              .result_offset = b->result_off,
                              .landed = landed};
  return d;
}

/* Writes slot j of head h's table: block, last, tokens (and its resident bit). */
static void sel_put(uint32_t *t, const sel_bufs_t *b, uint32_t j, uint32_t block, uint32_t last, uint32_t tokens) {
  t[j] = block;
  t[b->R + j] = last;
  t[2u * b->R + j] = tokens;
  uint64_t *res = (uint64_t *)(void *)(t + 4u * b->R);
  res[block >> 6] |= 1ull << (block & 63u);
}

/* Hand-computed: repeated, out-of-range and active entries are ignored; hits are stamped; victims are the least
 * recently selected (ties: lower block); admissions take the lowest free slots; a landed commit swaps, a failed
 * one undoes the admission and keeps the victim. */
static void test_select_rules(void **state) {
  fixture_t *f = *state;
  sel_bufs_t b = sel_bufs(f->dev, 1, 6, 1, 8, 2);
  uint32_t *t = test_calloc(1, b.tb);
  memset(t, 0xff, 6u * 4u);
  sel_put(t, &b, 0, 10, 0, 9); /* the active block, 9 tokens */
  sel_put(t, &b, 1, 3, 5, 16);
  sel_put(t, &b, 2, 7, 2, 16);
  sel_put(t, &b, 3, 1, 2, 16);
  OKV_ASSERT_OK(okv_hal_buffer_write(b.tables, b.off, t, b.tb));
  const uint32_t pred[8] = {9, 3, 9, 70, 10, 5, 6, 4}, count = 7; /* the 8th entry lies past the count */
  OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.pred_off, pred, sizeof pred));
  OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.counts_off, &count, 4));
  const uint32_t active = 10, cap = 2, K = 3;
  const uint8_t landed = 1, failed = 0;
  okv_select_desc_t sd = sel_desc(&b, K, 8, &active, &cap);
  okv_slot_commit_desc_t cd = sel_commit_desc(&b, &landed);
  OKV_ASSERT_OK(okv_hal_select_async(f->stream, &sd));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  uint32_t plan[2 * SEL_PLAN], res[SEL_RES], got[6 * 4];
  OKV_ASSERT_OK(okv_hal_buffer_read(b.io, b.plan_off, plan, sizeof plan));
  OKV_ASSERT_OK(okv_hal_buffer_read(b.io, b.result_off, res, sizeof res));
  /* The signature of the table as found: its four committed slots (the published term: SplitMix64's first
   * output for seed 0 is term(0, 0)). */
  assert_true(okv_slot_table_sig_term(0, 0) == 0xE220A8397B1DCDAFull);
  uint64_t sig = okv_slot_table_sig_term(0, 10) + okv_slot_table_sig_term(1, 3) + okv_slot_table_sig_term(2, 7) +
                 okv_slot_table_sig_term(3, 1);
  const uint32_t want_res[SEL_RES] = {2, 1, 3, 2, (uint32_t)sig, (uint32_t)(sig >> 32)},
                 want_plan[2 * SEL_PLAN] = {9, 4, 1, 3, 5, 5, 7, 2};
  assert_memory_equal(res, want_res, sizeof res);
  assert_memory_equal(plan, want_plan, sizeof plan);
  OKV_ASSERT_OK(okv_hal_buffer_read(b.tables, b.off, got, sizeof got));
  const uint32_t want_sel[6 * 4 - 6] = {10, 3, 7, 1, 9, 5, 0, 8, 2, 2, 8, 8, 9, 16, 16, 16, 0, 0};
  assert_memory_equal(got, want_sel, sizeof want_sel); /* block, last, tokens: admissions pending */
  OKV_ASSERT_OK(okv_hal_slot_commit_async(f->stream, &cd));
  OKV_ASSERT_OK(okv_hal_slot_commit_async(f->stream, &cd)); /* a second commit changes nothing */
  cd.landed = &failed;
  OKV_ASSERT_OK(okv_hal_slot_commit_async(f->stream, &cd)); /* nor does an undo of what was committed */
  cd.landed = &landed;
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  OKV_ASSERT_OK(okv_hal_buffer_read(b.tables, b.off, t, b.tb));
  const uint32_t F = OKV_SLOT_FREE, want_commit[6 * 3] = {10, 3, F, F, 9, 5, 0, 8, 0, 0, 8, 8, 9, 16, 0, 0, 16, 16};
  assert_memory_equal(t, want_commit, sizeof want_commit);
  const uint64_t *bits = (const uint64_t *)(const void *)(t + 4u * 6u);
  assert_true(bits[0] == ((1ull << 10) | (1ull << 3) | (1ull << 9) | (1ull << 5)));
  assert_true(bits[1] == 0); /* the scratch bitmap is zero again */
  /* Step 9: one miss, three equally old candidates: the lowest block (3) is the victim; the transfer fails. */
  const uint32_t pred2 = 6, count2 = 1;
  OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.pred_off, &pred2, 4));
  OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.counts_off, &count2, 4));
  sd.step = 9;
  cd.landed = &failed;
  OKV_ASSERT_OK(okv_hal_select_async(f->stream, &sd));
  OKV_ASSERT_OK(okv_hal_slot_commit_async(f->stream, &cd));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  OKV_ASSERT_OK(okv_hal_buffer_read(b.io, b.plan_off, plan, SEL_PLAN * 4u));
  const uint32_t want_plan2[SEL_PLAN] = {6, 2, 3, 1};
  assert_memory_equal(plan, want_plan2, sizeof want_plan2);
  uint32_t t2[6 * 3];
  OKV_ASSERT_OK(okv_hal_buffer_read(b.tables, b.off, t2, sizeof t2));
  assert_memory_equal(t2, want_commit, sizeof t2); /* undone: as after step 8 */
  test_free(t);
  release(b.tables);
  release(b.io);
}

/* The slot-table kernels against the host selection (core/select.c) and the runtime's commit, step after step
 * on random predictions, caps and failed transfers: the same hits, misses, admissions and victims in the same
 * order, and after every commit the same resident blocks with the same last-selected steps. */
static void run_select_against_host(fixture_t *f, uint32_t H, uint32_t n_steps, uint64_t seed) {
  const uint32_t K = 16, C = 3, R = K + 1 + C, NB = 200, W = 4, active_block = NB - 1;
  sel_bufs_t b = sel_bufs(f->dev, H, R, W, K, C);
  okv_allocator_t a = okv_test_allocator();
  okv_block_map_t *maps = test_calloc(H, sizeof *maps);
  uint32_t *t = test_malloc(b.tb), *pred = test_malloc((size_t)H * K * 4u), *counts = test_malloc(H * 4u);
  uint32_t *plan = test_malloc((size_t)H * C * SEL_PLAN * 4u), *res = test_malloc((size_t)H * SEL_RES * 4u);
  uint32_t *active = test_malloc(H * 4u), *cap = test_malloc(H * 4u), adm[16], vic[16];
  uint64_t scratch[64];
  uint8_t *landed = test_malloc(H);
  uint64_t *sig = test_malloc(H * sizeof(uint64_t)); /* each head's signature, kept as the runtime keeps it */
  for (uint32_t h = 0; h < H; h++) {                 /* the active block resident in slot 0 on both sides */
    sig[h] = okv_slot_table_sig_term(0, active_block);
    OKV_ASSERT_OK(okv_block_map_init(&maps[h], &a, R));
    OKV_ASSERT_OK(okv_block_map_reserve(&maps[h], &a, NB));
    okv_block_map_set_n_blocks(&maps[h], NB);
    for (uint32_t i = 0; i < NB; i++) maps[h].loc[i].slot = OKV_NO_SLOT;
    okv_block_map_map(&maps[h], active_block, 0, 0);
    for (uint32_t j = R; j-- > 1;) okv_block_map_push_free(&maps[h], j);
    memset(t, 0, b.tb);
    memset(t, 0xff, (size_t)R * 4u);
    sel_put(t, &b, 0, active_block, 0, 5);
    OKV_ASSERT_OK(okv_hal_buffer_write(b.tables, b.off + h * b.tb, t, b.tb));
    active[h] = active_block;
  }
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, seed);
  uint64_t admitted = 0, victims = 0, undone = 0;
  for (uint32_t step = 1; step <= n_steps; step++) {
    for (uint32_t h = 0; h < H; h++) { /* about half the prediction from the resident blocks */
      uint32_t n = okv_test_rng_below(&rng, K + 1), *p = pred + (size_t)h * K;
      counts[h] = n;
      cap[h] = okv_test_rng_below(&rng, C + 1);
      landed[h] = okv_test_rng_below(&rng, 8) != 0;
      uint64_t used[4] = {0, 0, 0, 0}; /* blocks taken, the active one included */
      used[active_block >> 6] |= 1ull << (active_block & 63u);
      for (uint32_t i = 0; i < n;) {
        uint32_t blk = okv_test_rng_below(&rng, 2) && maps[h].n_resident > 1
                           ? maps[h].resident[okv_test_rng_below(&rng, maps[h].n_resident)]
                           : okv_test_rng_below(&rng, NB);
        if ((used[blk >> 6] >> (blk & 63u)) & 1u) continue;
        used[blk >> 6] |= 1ull << (blk & 63u);
        p[i++] = blk;
      }
      for (uint32_t i = n; i < K; i++) p[i] = UINT32_MAX; /* past the count: never read */
    }
    OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.pred_off, pred, (uint64_t)H * K * 4u));
    OKV_ASSERT_OK(okv_hal_buffer_write(b.io, b.counts_off, counts, H * 4u));
    okv_select_desc_t sd = sel_desc(&b, K, step, active, cap);
    okv_slot_commit_desc_t cd = sel_commit_desc(&b, landed);
    OKV_ASSERT_OK(okv_hal_select_async(f->stream, &sd));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    OKV_ASSERT_OK(okv_hal_buffer_read(b.io, b.plan_off, plan, (uint64_t)H * C * SEL_PLAN * 4u));
    OKV_ASSERT_OK(okv_hal_buffer_read(b.io, b.result_off, res, (uint64_t)H * SEL_RES * 4u));
    OKV_ASSERT_OK(okv_hal_slot_commit_async(f->stream, &cd));
    for (uint32_t h = 0; h < H; h++) {
      okv_block_map_t *m = &maps[h];
      okv_select_params_t sp = {.budget_blocks = K, .cap_blocks = cap[h], .step = step, .active_block = active[h]};
      okv_select_result_t r;
      OKV_ASSERT_OK(okv_select_head(m, &sp, pred + (size_t)h * K, counts[h], scratch, adm, vic, &r));
      const uint32_t *rh = res + (size_t)h * SEL_RES, *ph = plan + (size_t)h * C * SEL_PLAN;
      if (rh[0] != r.n_admitted || rh[1] != r.n_hits || rh[2] != r.n_misses || rh[3] != r.n_victims) {
        print_error("step %u head %u: kernel {%u %u %u %u}, host {%u %u %u %u}\n", step, h, rh[0], rh[1], rh[2], rh[3],
                    r.n_admitted, r.n_hits, r.n_misses, r.n_victims);
        fail();
      }
      if (rh[4] != (uint32_t)sig[h] || rh[5] != (uint32_t)(sig[h] >> 32)) {
        print_error("step %u head %u: signature %08x%08x, kept %016llx\n", step, h, rh[5], rh[4],
                    (unsigned long long)sig[h]);
        fail();
      }
      for (uint32_t i = 0; i < r.n_admitted; i++) {
        const uint32_t *e = ph + (size_t)i * SEL_PLAN;
        assert_int_equal(e[0], adm[i]);
        assert_int_equal(e[2], vic[i] == OKV_NO_BLOCK ? OKV_SLOT_FREE : vic[i]);
        assert_true(e[1] < R);
        if (landed[h]) sig[h] += okv_slot_table_sig_term(e[1], e[0]);
        if (landed[h] && e[2] != OKV_SLOT_FREE) sig[h] -= okv_slot_table_sig_term(e[3], e[2]);
      }
      admitted += r.n_admitted;
      victims += r.n_victims;
      /* The runtime's commit of a landed transfer; a failed one leaves the map as it was. */
      if (!landed[h]) {
        undone += r.n_admitted;
        continue;
      }
      for (uint32_t i = 0; i < r.n_admitted; i++) {
        uint32_t slot;
        assert_true(okv_block_map_pop_free(m, &slot));
        if (vic[i] != OKV_NO_BLOCK) okv_block_map_push_free(m, okv_block_map_unmap(m, vic[i]));
        okv_block_map_map(m, adm[i], slot, step);
        okv_block_map_set_current(m, adm[i], OKV_BLOCK_TOKENS);
      }
    }
    OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
    for (uint32_t h = 0; h < H; h++) { /* the tables hold the host maps' blocks, steps and token counts */
      okv_block_map_t *m = &maps[h];
      OKV_ASSERT_OK(okv_hal_buffer_read(b.tables, b.off + h * b.tb, t, b.tb));
      const uint64_t *bits = (const uint64_t *)(const void *)(t + 4u * R);
      uint32_t held = 0;
      for (uint32_t j = 0; j < R; j++) {
        uint32_t blk = t[j];
        if (blk == OKV_SLOT_FREE) {
          assert_int_equal(t[2u * R + j], 0);
          continue;
        }
        held++;
        assert_true(okv_block_map_is_resident(m, blk));
        assert_true((bits[blk >> 6] >> (blk & 63u)) & 1u);
        if (okv_block_map_last(m, blk) != t[R + j]) {
          print_error("step %u head %u block %u: last %u in the table, %u on the host\n", step, h, blk, t[R + j],
                      okv_block_map_last(m, blk));
          fail();
        }
        assert_int_equal(t[2u * R + j], blk == active_block ? 5u : OKV_BLOCK_TOKENS);
      }
      assert_int_equal(held, m->n_resident);
      uint32_t n_bits = 0;
      for (uint32_t w = 0; w < W; w++) n_bits += (uint32_t)__builtin_popcountll(bits[w]);
      assert_int_equal(n_bits, held);
      for (uint32_t w = 0; w < W; w++) assert_true(bits[W + w] == 0);
    }
  }
  /* The workload reached every branch: admissions into room and with victims, and undone transfers. */
  assert_true(admitted > victims && victims > 0 && undone > 0);
  for (uint32_t h = 0; h < H; h++) okv_block_map_free(&maps[h], &a);
  test_free(maps);
  test_free(t);
  test_free(pred);
  test_free(counts);
  test_free(plan);
  test_free(res);
  test_free(active);
  test_free(cap);
  test_free(landed);
  test_free(sig);
  release(b.tables);
  release(b.io);
}

static void test_select_against_host(void **state) {
  run_select_against_host(*state, 5, 60, 11);
  run_select_against_host(*state, 70, 12, 12); /* the CPU backend splits 64 heads or more over threads */
}

#define EXPECT_INVALID_SEL(enqueue, d, good, stmt) \
  OKV_EXPECT_MUTATION(d, good, stmt, OKV_ASSERT_CODE(enqueue(f->stream, &(d)), OKV_STATUS_INVALID_ARGUMENT))

static void test_select_invalid(void **state) {
  fixture_t *f = *state;
  sel_bufs_t b = sel_bufs(f->dev, 2, 8, 2, 4, 2);
  okv_hal_buffer_t *other = NULL;
  okv_hal_device_t *dev1 = f->dev1;
  OKV_ASSERT_OK(okv_hal_buffer_alloc(dev1, OKV_TIER_DEVICE, 4096, &other));
  const uint32_t active[2] = {1, 2}, cap[2] = {2, 1}, cap_over[2] = {2, 3};
  const uint8_t landed[2] = {1, 1};
  okv_select_desc_t g = sel_desc(&b, 4, 1, active, cap), d;
  okv_slot_commit_desc_t cg = sel_commit_desc(&b, landed), c;
  buf_fill_sentinel(b.tables);
  buf_fill_sentinel(b.io);
  OKV_ASSERT_CODE(okv_hal_select_async(f->stream, NULL), OKV_STATUS_INVALID_ARGUMENT);
  OKV_ASSERT_CODE(okv_hal_select_async(NULL, &g), OKV_STATUS_INVALID_ARGUMENT);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.n_heads = 0);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.n_slots = 0);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.n_slots = OKV_SELECT_MAX_SLOTS + 1);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.bitmap_words = 0);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.n_slots = 9);       /* tables past their buffer */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.table_offset = 28); /* not 8-byte aligned */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.predicted_stride = 0);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.predicted_stride = OKV_TOPK_MAX + 1);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.predicted_offset = 6); /* not 4-byte aligned */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.plan_stride = 0);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.cap = cap_over);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.cap = NULL);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.active_block = NULL);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.plan = NULL);
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.plan = other);                         /* another device's buffer */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.result_offset = d.plan_offset);        /* result over the plan */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, (d.plan = b.tables, d.plan_offset = 0)); /* plan over tables */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, (d.predicted = b.tables, d.predicted_offset = b.off));
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.plan_offset = d.predicted_offset); /* plan over the prediction */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.result_offset = d.counts_offset);  /* result over the counts */
  EXPECT_INVALID_SEL(okv_hal_select_async, d, g, d.result_offset = okv_hal_buffer_size(b.io) - 4);
  EXPECT_INVALID_SEL(okv_hal_slot_commit_async, c, cg, c.landed = NULL);
  EXPECT_INVALID_SEL(okv_hal_slot_commit_async, c, cg, c.n_heads = 0);
  EXPECT_INVALID_SEL(okv_hal_slot_commit_async, c, cg, c.bitmap_words = OKV_SELECT_MAX_WORDS + 1);
  EXPECT_INVALID_SEL(okv_hal_slot_commit_async, c, cg, c.table = NULL);
  EXPECT_INVALID_SEL(okv_hal_slot_commit_async, c, cg, (c.result = b.tables, c.result_offset = b.off));
  OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
  buf_assert_sentinel(b.tables);
  buf_assert_sentinel(b.io);
  release(other);
  release(b.tables);
  release(b.io);
}

/* ---- attention's table mode ---- */

/* Attention reading its working sets from slot tables (okv_attention_desc_t.tables) against the same kernel
 * over a CSR this test builds from the tables by the documented rule, bit for bit (same blocks, same order),
 * on both devices. The tables hold, at shuffled entries, each unit's blocks with full and partial token
 * counts, its last block (the sequence's active block, token count 0 in the table: the sequence's length
 * decides) and entries that must be skipped: free, pending (tokens 0), past the sequence's end, and a pool
 * slot out of range; skipped entries point at NaN-filled slots, so reading one shows. Table rows are not the
 * sequence order and the regions sit at nonzero offsets. Then the refusals of table mode. */
enum { TAB_R = 16, TAB_W = 1, TAB_NB = 20, TAB_OFF = 64, MAP_OFF = 12 };

static void test_attention_tables(void **state) {
  fixture_t *f = *state;
  okv_kcase_params_t p = okv_kcase_params(3, 2, 4, 64, 2, 1, OKV_DTYPE_BF16, 9);
  p.vary_blocks = true;
  p.partial_last = false;
  okv_kcase_t c;
  okv_kcase_build(&c, &p, 4242);
  okv_test_rng_t rng;
  okv_test_rng_seed(&rng, 99);
  const uint32_t H = p.n_kv_heads, S = p.n_seqs, U = c.n_units, rows = S + 1;
  const uint64_t tb = okv_slot_table_bytes(TAB_R, TAB_W);
  uint32_t *tables = test_calloc((size_t)rows * H, tb);
  uint32_t *map = test_calloc((size_t)rows * H * TAB_R, sizeof(uint32_t));
  uint32_t table_index[3], seq_tokens[3];
  /* a slot no working set uses (NaN-filled by the case) */
  uint32_t nan_slot = 0;
  for (uint32_t sl = 0; sl < c.desc.n_slots; sl++) {
    bool used = false;
    for (uint32_t w = 0; w < c.ws_total; w++) used |= c.ws_slots[w] == sl;
    if (!used) nan_slot = sl;
  }
  for (uint32_t s = 0; s < S; s++) {
    table_index[s] = S - s;                            /* rows 3, 2, 1; row 0 unused */
    seq_tokens[s] = (TAB_NB - 1u) * 16u + 1u + 5u * s; /* the active block (19) holds 1, 6 or 11 tokens */
  }
  for (uint32_t i = 0; i < rows * H; i++) {
    uint32_t *t = tables + i * tb / 4u;
    for (uint32_t j = 0; j < TAB_R; j++) t[j] = OKV_SLOT_FREE;
    for (uint32_t j = 0; j < TAB_R; j++) map[i * TAB_R + j] = nan_slot;
  }
  /* expected CSR: built below in entry order */
  uint32_t *e_off = test_calloc(U + 1, sizeof(uint32_t)), *e_slots = test_calloc((size_t)U * TAB_R, sizeof(uint32_t));
  uint8_t *e_valid = test_calloc((size_t)U * TAB_R, 1);
  uint32_t k = 0;
  for (uint32_t s = 0; s < S; s++)
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h, row = table_index[s] * H + h, n = c.ws_offsets[u + 1] - c.ws_offsets[u];
      uint32_t *t = tables + (size_t)row * tb / 4u, *m = map + (size_t)row * TAB_R;
      /* entry contents before shuffling: n real blocks, then the distractors */
      uint32_t blk[TAB_R], tok[TAB_R], slot[TAB_R], m_n = 0;
      for (uint32_t i = 0; i < n; i++, m_n++) {
        blk[m_n] = i + 1u == n ? TAB_NB - 1u : 2u * i + 1u; /* the last real one is the active block */
        tok[m_n] = i + 1u == n ? 0u : (i % 3u == 1u ? 7u : 16u);
        slot[m_n] = c.ws_slots[c.ws_offsets[u] + i];
      }
      blk[m_n] = 2u, tok[m_n] = 0u, slot[m_n++] = nan_slot;                  /* pending admission */
      blk[m_n] = TAB_NB + 3u, tok[m_n] = 16u, slot[m_n++] = nan_slot;        /* past the sequence's end */
      blk[m_n] = 4u, tok[m_n] = 16u, slot[m_n++] = (uint32_t)c.desc.n_slots; /* pool slot out of range */
      /* shuffle into the R entries (the rest stay free) */
      uint32_t pos[TAB_R];
      for (uint32_t j = 0; j < TAB_R; j++) pos[j] = j;
      for (uint32_t j = TAB_R; j > 1; j--) {
        uint32_t r = okv_test_rng_below(&rng, j), x = pos[j - 1];
        pos[j - 1] = pos[r];
        pos[r] = x;
      }
      for (uint32_t i = 0; i < m_n; i++) {
        t[pos[i]] = blk[i];
        t[2u * TAB_R + pos[i]] = tok[i];
        m[pos[i]] = slot[i];
      }
      e_off[u] = k;
      for (uint32_t j = 0; j < TAB_R; j++) {
        uint32_t b = t[j];
        if (b == OKV_SLOT_FREE || b >= TAB_NB || m[j] >= c.desc.n_slots) continue;
        uint32_t v = b == TAB_NB - 1u ? seq_tokens[s] - b * 16u : t[2u * TAB_R + j];
        if (v == 0) continue;
        e_slots[k] = m[j];
        e_valid[k] = (uint8_t)v;
        k++;
      }
    }
  e_off[U] = k;
  assert_true(k > 10);
  float *want = test_malloc(sizeof(float) * c.q_floats), *got = test_malloc(sizeof(float) * c.q_floats);
  okv_hal_device_t *devs[2] = {f->dev, f->dev1};
  okv_hal_stream_t *streams[2] = {f->stream, f->stream1};
  for (int di = 0; di < 2; di++) {
    attn_bufs_t b;
    okv_attention_desc_t csr, td;
    attn_bufs_make(devs[di], &c, &b, &csr);
    csr.block_mass = NULL;
    csr.ws_offsets = e_off;
    csr.ws_slots = e_slots;
    csr.ws_valid = e_valid;
    okv_hal_buffer_t *tb_buf = buf_with(devs[di], OKV_TIER_DEVICE, NULL, TAB_OFF + (uint64_t)rows * H * tb);
    okv_hal_buffer_t *map_buf = buf_with(devs[di], OKV_TIER_DEVICE, NULL, MAP_OFF + (uint64_t)rows * H * TAB_R * 4u);
    OKV_ASSERT_OK(okv_hal_buffer_write(tb_buf, TAB_OFF, tables, (uint64_t)rows * H * tb));
    OKV_ASSERT_OK(okv_hal_buffer_write(map_buf, MAP_OFF, map, (uint64_t)rows * H * TAB_R * 4u));
    buf_fill_sentinel(b.out);
    OKV_ASSERT_OK(okv_hal_attention_async(streams[di], &csr));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(streams[di]));
    OKV_ASSERT_OK(okv_hal_buffer_read(b.out, ATTN_OUT_OFF, want, c.q_floats * 4));
    td = csr;
    td.ws_offsets = NULL;
    td.ws_slots = NULL;
    td.ws_valid = NULL;
    td.tables = tb_buf;
    td.tables_offset = TAB_OFF;
    td.table_slots = TAB_R;
    td.table_words = TAB_W;
    td.slot_map = map_buf;
    td.slot_map_offset = MAP_OFF;
    td.table_index = table_index;
    td.seq_tokens = seq_tokens;
    buf_fill_sentinel(b.out);
    OKV_ASSERT_OK(okv_hal_attention_async(streams[di], &td));
    OKV_ASSERT_OK(okv_hal_stream_synchronize(streams[di]));
    OKV_ASSERT_OK(okv_hal_buffer_read(b.out, ATTN_OUT_OFF, got, c.q_floats * 4));
    for (size_t i = 0; i < c.q_floats; i++) {
      assert_false(isnan(got[i]));
      if (memcmp(&got[i], &want[i], 4) != 0) {
        print_error("output %zu: table mode %.9g, CSR %.9g\n", i, got[i], want[i]);
        fail();
      }
    }
    if (di == 0) { /* refusals, each before anything is enqueued */
      uint32_t big[3] = {seq_tokens[0], 64u * 16u * TAB_W + 1u, seq_tokens[2]}, far[3] = {0, 7, 1};
      okv_attention_desc_t d;
      buf_fill_sentinel(b.out);
#define TMUT(stmt) EXPECT_INVALID(okv_hal_attention_async, d, td, stmt)
      TMUT(d.ws_offsets = e_off);
      TMUT(d.block_mass = b.mass);
      TMUT(d.table_slots = 0);
      TMUT(d.table_words = OKV_SELECT_MAX_WORDS + 1u);
      TMUT(d.tables_offset = TAB_OFF + 4u);
      TMUT(d.slot_map_offset = MAP_OFF + 2u);
      TMUT(d.table_index = NULL);
      TMUT(d.seq_tokens = NULL);
      TMUT(d.slot_map = NULL);
      TMUT(d.seq_tokens = big);
      TMUT(d.table_index = far);                                /* row 7: past both buffers */
      TMUT(d.tables_offset = TAB_OFF + 8u);                     /* the last table crosses the buffer's end */
      TMUT((d.tables = b.out, d.tables_offset = ATTN_OUT_OFF)); /* read while out is written */
      TMUT((d.slot_map = b.out, d.slot_map_offset = ATTN_OUT_OFF + 4u));
#undef TMUT
      OKV_ASSERT_OK(okv_hal_stream_synchronize(f->stream));
      buf_assert_sentinel(b.out);
    }
    release(tb_buf);
    release(map_buf);
    attn_bufs_free(&b);
  }
  test_free(want);
  test_free(got);
  test_free(e_off);
  test_free(e_slots);
  test_free(e_valid);
  test_free(tables);
  test_free(map);
  okv_kcase_free(&c);
}

int main(int argc, char **argv) {
  g_backend = okv_test_backend_or_skip(argc, argv);
  const struct CMUnitTest tests[] = {
      OKV_FIXTURE_TEST(test_attention),
      OKV_FIXTURE_TEST(test_attention_dtypes_and_magnitude),
      OKV_FIXTURE_TEST(test_summaries),
      OKV_FIXTURE_TEST(test_score_topk),
      OKV_FIXTURE_TEST(test_invalid_attention),
      OKV_FIXTURE_TEST(test_attention_tables),
      OKV_FIXTURE_TEST(test_invalid_others),
      OKV_FIXTURE_TEST(test_summaries_narrow),
      OKV_FIXTURE_TEST(test_ranges_index_map),
      OKV_FIXTURE_TEST(test_lists_device_map),
      OKV_FIXTURE_TEST(test_summary_reduce_hal),
      OKV_FIXTURE_TEST(test_q8_hal),
      OKV_FIXTURE_TEST(test_c4_hal),
      OKV_FIXTURE_TEST(test_select_rules),
      OKV_FIXTURE_TEST(test_select_against_host),
      OKV_FIXTURE_TEST(test_select_invalid),
  };
  return cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
}
