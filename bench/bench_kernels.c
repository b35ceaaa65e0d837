/* `oasiskv bench kernels`: roofline benchmark of the HAL kernels.
 *
 * In one run, with the same threads, it measures
 *  - stream read bandwidth over the same bytes as each attention config (CPU:
 *    a vector-load summing pass; GPU devices: a device-to-device copy, counted
 *    as read + write bytes),
 *  - FMA throughput in the widest SIMD the CPU kernels dispatch to (CPU only),
 *  - sparse paged decode attention per config (Llama-3.1-8B layer shape: 32
 *    query heads, 8 KV heads, G = 4, head_dim 128, bf16 KV, T = 2 stacked
 *    query tokens with 2 in-flight tokens; working sets of 2,048 and 16,384
 *    tokens in random slot order; batches 1..64 capped at 2 GiB of KV):
 *    effective GB/s, GFLOP/s and
 *      attention_roofline_fraction = max(bytes / stream_bw, flops / fma_peak) / time,
 *  - Quest scoring of a 16K-token context (summary bytes / time vs stream
 *    bandwidth: scoring_roofline_fraction), the same on bf16 summaries
 *    (scoring_bf16_time_s, scoring_bf16_gbps), on 8-bit summaries and 4-bit centres (scoring_q8_time_s,
 *    scoring_c4_time_s), and scoring + top-K (K = 128 blocks)
 *    time as a fraction of sparse attention over K = 128 blocks
 *    (scoring_fraction);
 *  - selection on slot tables (okv_hal_select_async + okv_hal_slot_commit_async)
 *    for the 448 KV heads of `bench runtime`'s default step: device time and
 *    host enqueue time per KV head (select_device_ns_per_head,
 *    select_enqueue_ns_per_head), and the device time per KV head over
 *    attention's per KV head at K = 128 in the same run (select_attention_ratio).
 * Kernels are timed through the HAL (stream + events), as users get them.
 * Every figure is the best of several runs (the machines are shared).
 */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OpenMP where the build has it (the two parallel regions below are guarded
 * by _OPENMP: no -Wunknown-pragmas noise without it). */
#ifdef _OPENMP
#include <omp.h>
#endif

#include "oasiskv/oasiskv.h"
#include "cli.h"

#pragma GCC optimize("fp-contract=fast")
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float okv_bench_v16f __attribute__((vector_size(64)));

/* ---- CPU reference loops, compiled per SIMD level like the kernels ---- */

#define OKV_BENCH_CHAINS 16

#define OKV_BENCH_DEFINE(suffix)                                                                   \
  static float okv_bench_read_##suffix(const float *p, size_t n_floats) {                          \
    okv_bench_v16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                                         \
    size_t n = n_floats / 64u;                                                                     \
    for (size_t i = 0; i < n; i++) {                                                               \
      okv_bench_v16f x0, x1, x2, x3;                                                               \
      memcpy(&x0, p + i * 64u, 64);                                                                \
      memcpy(&x1, p + i * 64u + 16u, 64);                                                          \
      memcpy(&x2, p + i * 64u + 32u, 64);                                                          \
      memcpy(&x3, p + i * 64u + 48u, 64);                                                          \
      a0 += x0;                                                                                    \
      a1 += x1;                                                                                    \
      a2 += x2;                                                                                    \
      a3 += x3;                                                                                    \
    }                                                                                              \
    okv_bench_v16f a = (a0 + a1) + (a2 + a3);                                                      \
    float s = 0;                                                                                   \
    for (int i = 0; i < 16; i++) s += a[i];                                                        \
    return s;                                                                                      \
  }                                                                                                \
  static float okv_bench_fma_##suffix(long iters, float seed) {                                    \
    okv_bench_v16f acc[OKV_BENCH_CHAINS];                                                          \
    okv_bench_v16f b = (okv_bench_v16f){0} + 0.999999f, c = (okv_bench_v16f){0} + 1e-7f;           \
    for (int k = 0; k < OKV_BENCH_CHAINS; k++) acc[k] = (okv_bench_v16f){0} + (seed + (float)k);   \
    for (long i = 0; i < iters; i++) {                                                             \
      _Pragma("GCC unroll 16") for (int k = 0; k < OKV_BENCH_CHAINS; k++) acc[k] = acc[k] * b + c; \
    }                                                                                              \
    float s = 0;                                                                                   \
    for (int k = 0; k < OKV_BENCH_CHAINS; k++) s += acc[k][k & 15];                                \
    return s;                                                                                      \
  }

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
OKV_BENCH_DEFINE(avx512)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma")
OKV_BENCH_DEFINE(avx2)
#pragma GCC pop_options
OKV_BENCH_DEFINE(base)

/* Vector width of the reference loops: the SIMD level the device's kernels
 * dispatch to, as the HAL reports it (okv_hal_device_info_t.simd). */
typedef enum okv_bench_simd_e {
  OKV_BENCH_SIMD_BASE = 0,
  OKV_BENCH_SIMD_AVX2,
  OKV_BENCH_SIMD_AVX512,
} okv_bench_simd_t;

static okv_bench_simd_t bench_simd(const char *name) {
  if (!strcmp(name, "avx512")) return OKV_BENCH_SIMD_AVX512;
  if (!strcmp(name, "avx2+fma")) return OKV_BENCH_SIMD_AVX2;
  return OKV_BENCH_SIMD_BASE;
}

static volatile float bench_sink;

/* Best-of-reps read bandwidth (GB/s) of p[0..bytes) with nt threads. */
static double bench_cpu_read_gbps(okv_bench_simd_t simd, const void *p, size_t bytes, int nt, int reps) {
  double best = 1e30;
  const size_t n_floats = bytes / 4u;
  (void)nt; /* unused without OpenMP */
  for (int r = 0; r < reps + 1; r++) {
    double t0 = okv_cli_now_s();
    float total = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : total)
#endif
    {
      int tid = 0, n = 1;
#ifdef _OPENMP
      tid = omp_get_thread_num();
      n = omp_get_num_threads();
#endif
      size_t chunk = (n_floats / (size_t)n) & ~(size_t)63u;
      const float *base = (const float *)p + chunk * (size_t)tid;
      switch (simd) {
        case OKV_BENCH_SIMD_AVX512: total += okv_bench_read_avx512(base, chunk); break;
        case OKV_BENCH_SIMD_AVX2: total += okv_bench_read_avx2(base, chunk); break;
        default: total += okv_bench_read_base(base, chunk); break;
      }
    }
    double t = okv_cli_now_s() - t0;
    bench_sink = total;
    if (r > 0 && t < best) best = t; /* first pass warms up */
  }
  return (double)((bytes / 4u / 64u) * 64u * 4u) / best / 1e9;
}

/* FMA GFLOP/s (2 flops per lane per multiply-add) with nt threads. */
static double bench_cpu_fma_gflops(okv_bench_simd_t simd, int nt) {
  const long iters = 100000; /* ~0.3 ms per run at full speed: best of 30 */
  double best = 1e30;
  for (int r = 0; r < 30; r++) {
    double t0 = okv_cli_now_s();
    float total = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : total)
#endif
    {
      switch (simd) {
        case OKV_BENCH_SIMD_AVX512: total += okv_bench_fma_avx512(iters, 1.0f); break;
        case OKV_BENCH_SIMD_AVX2: total += okv_bench_fma_avx2(iters, 1.0f); break;
        default: total += okv_bench_fma_base(iters, 1.0f); break;
      }
    }
    double t = okv_cli_now_s() - t0;
    bench_sink = total;
    if (t < best) best = t;
  }
  return 2.0 * 16.0 * OKV_BENCH_CHAINS * (double)iters * nt / best / 1e9;
}

/* ---- HAL helpers ---- */

typedef struct okv_bench_t {
  okv_hal_device_t *dev;
  okv_hal_stream_t *stream;
  okv_hal_event_t *ev0, *ev1;
  bool is_cpu;
  okv_bench_simd_t simd; /* CPU: the reference loops' width */
  int threads;
  okv_hal_buffer_t *pool; /* KV slots (DEVICE tier) */
  uint64_t pool_slots;
  okv_hal_buffer_t *scratch; /* GPU: copy target for the bandwidth reference */
} okv_bench_t;

#define BENCH_CHECK(expr)                                                                \
  do {                                                                                   \
    okv_status_t s_ = (expr);                                                            \
    if (s_ != OKV_OK) {                                                                  \
      fprintf(stderr, "oasiskv bench kernels: %s: %s\n", #expr, okv_status_message(s_)); \
      okv_status_free(s_);                                                               \
      goto fail;                                                                         \
    }                                                                                    \
  } while (0)

/* Times launches of fn(arg), each between two events on the stream, for about
 * target_s (3..200 launches after one warm-up); returns the fastest launch in
 * seconds. The minimum, not the mean: the development machines are shared, and
 * the minimum is what the kernel costs when it has the cores. */
typedef okv_status_t (*okv_bench_launch_fn)(okv_bench_t *b, void *arg);

static okv_status_t bench_time(okv_bench_t *b, okv_bench_launch_fn fn, void *arg, double target_s, double *out_s) {
  double t0 = okv_cli_now_s();
  OKV_RETURN_IF_ERROR(fn(b, arg));
  OKV_RETURN_IF_ERROR(okv_hal_stream_synchronize(b->stream));
  double est = okv_cli_now_s() - t0;
  int reps = est > 0 ? (int)(target_s / est) : 100;
  if (reps < 3) reps = 3;
  if (reps > 200) reps = 200;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    OKV_RETURN_IF_ERROR(okv_hal_event_record(b->ev0, b->stream));
    OKV_RETURN_IF_ERROR(fn(b, arg));
    OKV_RETURN_IF_ERROR(okv_hal_event_record(b->ev1, b->stream));
    OKV_RETURN_IF_ERROR(okv_hal_event_wait(b->ev1));
    double el = 0;
    OKV_RETURN_IF_ERROR(okv_hal_event_elapsed(b->ev0, b->ev1, &el));
    if (el > 0 && el < best) best = el;
  }
  *out_s = best;
  return OKV_OK;
}

static okv_status_t bench_launch_copy(okv_bench_t *b, void *arg) {
  uint64_t bytes = *(const uint64_t *)arg;
  return okv_hal_copy_async(b->stream, b->pool, 0, b->scratch, 0, bytes);
}

/* Stream bandwidth over `bytes` of the pool: CPU read pass, or GPU D2D copy. */
static okv_status_t bench_stream_gbps(okv_bench_t *b, uint64_t bytes, double *out_gbps) {
  if (b->is_cpu) {
    void *p = okv_hal_buffer_host_ptr(b->pool);
    if (p == NULL) return okv_status_make(OKV_STATUS_INTERNAL, "CPU pool has no host pointer");
    int reps = bytes < (64u << 20) ? 30 : bytes < (512u << 20) ? 8 : 4;
    *out_gbps = bench_cpu_read_gbps(b->simd, p, (size_t)bytes, b->threads, reps);
    return OKV_OK;
  }
  uint64_t n = bytes;
  double s = 0;
  OKV_RETURN_IF_ERROR(bench_time(b, bench_launch_copy, &n, 0.05, &s));
  *out_gbps = 2.0 * (double)bytes / s / 1e9;
  return OKV_OK;
}

/* ---- attention configs ---- */

typedef struct okv_bench_attn_t {
  okv_attention_desc_t desc;
  uint32_t *ws_offsets, *ws_slots;
  uint8_t *ws_valid;
  okv_hal_buffer_t *q, *inflight, *out;
} okv_bench_attn_t;

static okv_status_t bench_launch_attention(okv_bench_t *b, void *arg) {
  okv_bench_attn_t *a = arg;
  return okv_hal_attention_async(b->stream, &a->desc);
}

static okv_status_t bench_fill_f32(okv_hal_buffer_t *buf, size_t n, uint64_t seed) {
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: bench staging");
  uint64_t s = seed | 1u;
  for (size_t i = 0; i < n; i++) tmp[i] = (float)((double)(okv_cli_rng_next(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  okv_status_t st = okv_hal_buffer_write(buf, 0, tmp, n * sizeof(float));
  free(tmp);
  return st;
}

static void bench_attn_free(okv_bench_attn_t *a) {
  free(a->ws_offsets);
  free(a->ws_slots);
  free(a->ws_valid);
  if (a->q) OKV_IGNORE_ERROR(okv_hal_buffer_release(a->q));
  if (a->inflight) OKV_IGNORE_ERROR(okv_hal_buffer_release(a->inflight));
  if (a->out) OKV_IGNORE_ERROR(okv_hal_buffer_release(a->out));
  memset(a, 0, sizeof *a);
}

/* Llama-3.1-8B layer shape; n_blocks working-set blocks per (seq, KV head) in
 * random slot order among the first batch * 8 * n_blocks slots. */
static okv_status_t bench_attn_make(okv_bench_t *b, uint32_t batch, uint32_t n_blocks, okv_bench_attn_t *a) {
  memset(a, 0, sizeof *a);
  const uint32_t H = 8, G = 4, D = 128, T = 2, NI = 2, U = batch * H;
  const uint64_t total = (uint64_t)U * n_blocks;
  a->ws_offsets = malloc(sizeof(uint32_t) * (U + 1));
  a->ws_slots = malloc(sizeof(uint32_t) * total);
  a->ws_valid = malloc(total);
  if (!a->ws_offsets || !a->ws_slots || !a->ws_valid)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: bench working sets");
  uint64_t s = 0x12345u + total;
  for (uint64_t i = 0; i < total; i++) a->ws_slots[i] = (uint32_t)i;
  for (uint64_t i = total; i > 1; i--) {
    uint64_t j = okv_cli_rng_next(&s) % i;
    uint32_t t = a->ws_slots[i - 1];
    a->ws_slots[i - 1] = a->ws_slots[j];
    a->ws_slots[j] = t;
  }
  for (uint32_t u = 0; u <= U; u++) a->ws_offsets[u] = u * n_blocks;
  memset(a->ws_valid, 16, total);
  const size_t q_floats = (size_t)batch * T * H * G * D, in_floats = (size_t)batch * NI * 2 * H * D;
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, q_floats * 4, &a->q));
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, in_floats * 4, &a->inflight));
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, q_floats * 4, &a->out));
  OKV_RETURN_IF_ERROR(bench_fill_f32(a->q, q_floats, 7 + batch));
  OKV_RETURN_IF_ERROR(bench_fill_f32(a->inflight, in_floats, 9 + batch));
  okv_attention_desc_t *d = &a->desc;
  d->n_seqs = batch;
  d->n_kv_heads = H;
  d->group_size = G;
  d->head_dim = D;
  d->n_query_tokens = T;
  d->kv_dtype = OKV_DTYPE_BF16;
  d->kv_pool = b->pool;
  d->n_slots = b->pool_slots;
  d->ws_offsets = a->ws_offsets;
  d->ws_slots = a->ws_slots;
  d->ws_valid = a->ws_valid;
  d->q = a->q;
  d->n_inflight = NI;
  d->inflight_kv = a->inflight;
  d->out = a->out;
  return OKV_OK;
}

/* Bytes and flops of one attention launch. */
static void bench_attn_cost(const okv_attention_desc_t *d, uint32_t n_blocks, double *bytes, double *flops) {
  const double U = (double)d->n_seqs * d->n_kv_heads, R = (double)d->n_query_tokens * d->group_size;
  const double tokens = (double)n_blocks * 16.0 + d->n_inflight;
  const double kv = U * (double)n_blocks * (double)okv_block_bytes(d->kv_dtype, d->head_dim);
  const double qo = 2.0 * U * R * d->head_dim * 4.0 + U * d->n_inflight * 2.0 * d->head_dim * 4.0;
  *bytes = kv + qo;
  *flops = U * R * tokens * d->head_dim * 4.0; /* q.k and p.v: 2 flops per multiply-add each */
}

/* ---- selection on slot tables ---- */

/* One step of device-side selection for the runtime bench's default shape: 8 sequences x 7 layers x 8 KV
 * heads, 16K-token context (1,024 blocks), K = 128, C = 7; the prediction alternates between two random sets
 * per head, so every step admits C blocks per head (as the runtime bench's steps do). */
enum { BENCH_SEL_HEADS = 448, BENCH_SEL_K = 128, BENCH_SEL_C = 7, BENCH_SEL_BLOCKS = 1024 };
typedef struct okv_bench_select_t {
  okv_select_desc_t sdesc;
  okv_slot_commit_desc_t cdesc;
  okv_hal_buffer_t *tables, *io;
  uint64_t pred_bytes;
  uint32_t active[BENCH_SEL_HEADS], cap[BENCH_SEL_HEADS], step;
  uint8_t landed[BENCH_SEL_HEADS];
} okv_bench_select_t;

static okv_status_t bench_launch_select(okv_bench_t *b, void *arg) {
  okv_bench_select_t *c = arg;
  c->sdesc.step = ++c->step;
  c->sdesc.predicted_offset = (c->step & 1u) ? c->pred_bytes : 0; /* the other prediction set */
  OKV_RETURN_IF_ERROR(okv_hal_select_async(b->stream, &c->sdesc));
  return okv_hal_slot_commit_async(b->stream, &c->cdesc);
}

static void bench_select_free(okv_bench_select_t *c) {
  if (c->tables) OKV_IGNORE_ERROR(okv_hal_buffer_release(c->tables));
  if (c->io) OKV_IGNORE_ERROR(okv_hal_buffer_release(c->io));
  c->tables = c->io = NULL;
}

static okv_status_t bench_select_make(okv_bench_t *b, okv_bench_select_t *c) {
  const uint32_t H = BENCH_SEL_HEADS, K = BENCH_SEL_K, R = K + 1 + BENCH_SEL_C, W = BENCH_SEL_BLOCKS / 64;
  const uint64_t tb = okv_slot_table_bytes(R, W);
  c->pred_bytes = (uint64_t)H * K * 4u;
  const uint64_t counts_off = 2 * c->pred_bytes, plan_off = counts_off + H * 4u;
  const uint64_t result_off = plan_off + (uint64_t)H * BENCH_SEL_C * OKV_SELECT_PLAN_U32S * 4u;
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, H * tb, &c->tables));
  OKV_RETURN_IF_ERROR(
      okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, result_off + H * OKV_SELECT_RESULT_U32S * 4u, &c->io));
  uint32_t *host = calloc(1, tb > 2 * c->pred_bytes + H * 4u ? tb : 2 * c->pred_bytes + H * 4u);
  if (host == NULL) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "bench: selection inputs");
  uint64_t rng = 0x5e1ec7u;
  okv_status_t st = OKV_OK;
  for (uint32_t h = 0; h < H && st == OKV_OK; h++) { /* K + 1 resident blocks: the active one and K others */
    memset(host, 0, tb);
    memset(host, 0xff, R * 4u);
    uint64_t *res = (uint64_t *)(void *)(host + 4u * R);
    for (uint32_t j = 0; j <= K; j++) {
      uint32_t blk = j == 0 ? BENCH_SEL_BLOCKS - 1 : (uint32_t)(j * 7u % (BENCH_SEL_BLOCKS - 1));
      host[j] = blk;
      host[2u * R + j] = 16;
      res[blk >> 6] |= 1ull << (blk & 63u);
    }
    st = okv_hal_buffer_write(c->tables, h * tb, host, tb);
    c->active[h] = BENCH_SEL_BLOCKS - 1;
    c->cap[h] = BENCH_SEL_C;
    c->landed[h] = 1;
  }
  if (st == OKV_OK) { /* two predictions per head: K distinct random blocks each, then the counts */
    for (uint32_t set = 0; set < 2; set++)
      for (uint32_t h = 0; h < H; h++) {
        uint32_t *p = host + ((uint64_t)set * H + h) * K;
        uint64_t used[BENCH_SEL_BLOCKS / 64] = {0};
        for (uint32_t i = 0; i < K;) {
          uint32_t blk = (uint32_t)(okv_cli_rng_next(&rng) % (BENCH_SEL_BLOCKS - 1));
          if ((used[blk >> 6] >> (blk & 63u)) & 1u) continue;
          used[blk >> 6] |= 1ull << (blk & 63u);
          p[i++] = blk;
        }
      }
    for (uint32_t h = 0; h < H; h++) host[2u * H * K + h] = K;
    st = okv_hal_buffer_write(c->io, 0, host, 2 * c->pred_bytes + H * 4u);
  }
  free(host);
  OKV_RETURN_IF_ERROR(st);
  c->sdesc = (okv_select_desc_t){.n_heads = H,
                                 .n_slots = R,
                                 .bitmap_words = W,
                                 .budget_blocks = K,
                                 .table = c->tables,
                                 .predicted = c->io,
                                 .predicted_stride = K,
                                 .predicted_counts = c->io,
                                 .counts_offset = counts_off,
                                 .active_block = c->active,
                                 .cap = c->cap,
                                 .plan_stride = BENCH_SEL_C,
                                 .plan = c->io,
                                 .plan_offset = plan_off,
                                 .result = c->io,
                                 .result_offset = result_off};
  c->cdesc = (okv_slot_commit_desc_t){.n_heads = H,
                                      .n_slots = R,
                                      .bitmap_words = W,
                                      .table = c->tables,
                                      .plan_stride = BENCH_SEL_C,
                                      .plan = c->io,
                                      .plan_offset = plan_off,
                                      .result = c->io,
                                      .result_offset = result_off,
                                      .landed = c->landed};
  return OKV_OK;
}

/* ---- scoring ---- */

typedef struct okv_bench_score_t {
  okv_score_desc_t sdesc;
  okv_topk_desc_t tdesc;
  uint64_t *sfirst, *scfirst;
  uint32_t *segn;
  okv_hal_buffer_t *summ, *scores, *idx, *q;
} okv_bench_score_t;

static okv_status_t bench_launch_score(okv_bench_t *b, void *arg) {
  return okv_hal_score_blocks_async(b->stream, &((okv_bench_score_t *)arg)->sdesc);
}

static okv_status_t bench_launch_topk(okv_bench_t *b, void *arg) {
  return okv_hal_topk_async(b->stream, &((okv_bench_score_t *)arg)->tdesc);
}

static void bench_score_free(okv_bench_score_t *c) {
  free(c->sfirst);
  free(c->scfirst);
  free(c->segn);
  okv_hal_buffer_t *bufs[4] = {c->summ, c->scores, c->idx, c->q};
  for (int i = 0; i < 4; i++)
    if (bufs[i]) OKV_IGNORE_ERROR(okv_hal_buffer_release(bufs[i]));
  memset(c, 0, sizeof *c);
}

/* Random bf16 or f16 values in [-1, 1) (n elements). */
static okv_status_t bench_fill_half(okv_hal_buffer_t *buf, okv_dtype_t dtype, size_t n, uint64_t seed) {
  uint16_t *tmp = malloc(n * sizeof(uint16_t));
  if (!tmp) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: bench staging");
  uint64_t s = seed | 1u;
  for (size_t i = 0; i < n; i++) {
    float x = (float)((double)(okv_cli_rng_next(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    tmp[i] = dtype == OKV_DTYPE_BF16 ? okv_f32_to_bf16(x) : okv_f32_to_f16(x);
  }
  okv_status_t st = okv_hal_buffer_write(buf, 0, tmp, n * sizeof(uint16_t));
  free(tmp);
  return st;
}

/* Scoring (+ top-K) of n_blocks blocks per KV head, summaries in summary_dtype. */
static okv_status_t bench_score_make(okv_bench_t *b, uint32_t batch, uint32_t n_blocks, okv_dtype_t summary_dtype,
                                     okv_bench_score_t *c) {
  memset(c, 0, sizeof *c);
  const uint32_t H = 8, G = 4, D = 128, T = 2, U = batch * H;
  c->sfirst = malloc(8u * U);
  c->scfirst = malloc(8u * U);
  c->segn = malloc(4u * U);
  if (!c->sfirst || !c->scfirst || !c->segn) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: bench scoring");
  for (uint32_t u = 0; u < U; u++) c->sfirst[u] = c->scfirst[u] = (uint64_t)u * n_blocks, c->segn[u] = n_blocks;
  const size_t n_summ = (size_t)U * n_blocks;
  /* C4 buffers hold whole tiles of 16 blocks */
  const size_t n_alloc = summary_dtype == OKV_DTYPE_C4 ? (n_summ + 15u) / 16u * 16u : n_summ;
  OKV_RETURN_IF_ERROR(
      okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, n_alloc * okv_summary_bytes_ex(summary_dtype, D), &c->summ));
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, n_summ * 4u, &c->scores));
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, (size_t)U * 128u * 4u, &c->idx));
  const size_t q_floats = (size_t)batch * T * H * G * D;
  OKV_RETURN_IF_ERROR(okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, q_floats * 4u, &c->q));
  if (summary_dtype == OKV_DTYPE_F32) {
    OKV_RETURN_IF_ERROR(bench_fill_f32(c->summ, n_summ * 2u * D, 11));
  } else if (summary_dtype == OKV_DTYPE_Q8 || summary_dtype == OKV_DTYPE_C4) { /* encoded from random bf16 ones */
    okv_hal_buffer_t *src = NULL;
    uint64_t *first = malloc(8u * n_summ);
    uint32_t *ones = malloc(4u * n_summ);
    okv_status_t st = first && ones ? okv_hal_buffer_alloc(b->dev, OKV_TIER_DEVICE, n_summ * 4u * D, &src)
                                    : okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: bench scoring");
    if (st == OKV_OK) st = bench_fill_half(src, OKV_DTYPE_BF16, n_summ * 2u * D, 11);
    if (st == OKV_OK) {
      for (size_t i = 0; i < n_summ; i++) first[i] = i, ones[i] = 1;
      okv_summary_reduce_desc_t rd = {.head_dim = D,
                                      .src = src,
                                      .src_dtype = OKV_DTYPE_BF16,
                                      .dst = c->summ,
                                      .dst_dtype = summary_dtype,
                                      .n = (uint32_t)n_summ,
                                      .src_first = first,
                                      .src_n = ones,
                                      .dst_index = first};
      st = okv_hal_summary_reduce_async(b->stream, &rd);
      if (st == OKV_OK) st = okv_hal_stream_synchronize(b->stream);
    }
    okv_hal_buffer_release(src);
    free(first);
    free(ones);
    OKV_RETURN_IF_ERROR(st);
  } else {
    OKV_RETURN_IF_ERROR(bench_fill_half(c->summ, summary_dtype, n_summ * 2u * D, 11));
  }
  OKV_RETURN_IF_ERROR(bench_fill_f32(c->q, q_floats, 13));
  c->sdesc = (okv_score_desc_t){.n_seqs = batch,
                                .n_kv_heads = H,
                                .group_size = G,
                                .head_dim = D,
                                .n_query_tokens = T,
                                .t_begin = 1,
                                .t_end = 2,
                                .q = c->q,
                                .summaries = c->summ,
                                .seg_summary_first = c->sfirst,
                                .seg_n_blocks = c->segn,
                                .scores = c->scores,
                                .seg_score_first = c->scfirst,
                                .summary_dtype = summary_dtype};
  c->tdesc = (okv_topk_desc_t){.n_segments = U,
                               .k = 128,
                               .scores = c->scores,
                               .seg_score_first = c->scfirst,
                               .seg_n = c->segn,
                               .out_indices = c->idx};
  return OKV_OK;
}

/* ---- driver ---- */

/* A measured figure of the JSON report. */
typedef struct okv_bench_figure_t {
  const char *key;
  double value;
} okv_bench_figure_t;

static void bench_json_figures(json_object *obj, const okv_bench_figure_t *figures, size_t n) {
  for (size_t i = 0; i < n; i++) json_object_object_add(obj, figures[i].key, json_object_new_double(figures[i].value));
}

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: oasiskv bench kernels [--threads N] [--quick] [--device cpu|cuda|hip] [--json]\n"
          "  Roofline benchmark of the attention, scoring and top-K kernels (docs/kernels.md).\n");
}

int okv_cli_bench_kernels(int argc, char **argv) {
  int threads = 0;
  bool quick = false, as_json = false;
  const char *device = "cpu";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!strcmp(argv[i], "--json")) {
      as_json = true;
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device = argv[++i];
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      bench_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "oasiskv bench kernels: unknown option '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (threads < 0) threads = 0;

  static const uint32_t seq_lens[] = {2048, 16384};
  static const uint32_t batches[] = {1, 4, 16, 64};
  const uint64_t kv_cap = 2ull << 30;
  const uint64_t slot_bytes = okv_block_bytes(OKV_DTYPE_BF16, 128);
  uint64_t max_slots = 0;
  for (int si = 0; si < 2; si++)
    for (int bi = 0; bi < 4; bi++) {
      uint64_t slots = (uint64_t)batches[bi] * 8u * (seq_lens[si] / 16u);
      if (slots * slot_bytes > kv_cap) continue;
      if (quick && (batches[bi] > 4 || (seq_lens[si] > 2048 && batches[bi] > 1))) continue;
      if (slots > max_slots) max_slots = slots;
    }

  okv_bench_t b = {0};
  okv_bench_attn_t a = {0};
  okv_bench_score_t sc = {0};
  okv_bench_select_t sel = {0};
  json_object *root = json_object_new_object(), *configs = json_object_new_array();
  int rc = 1;
  b.is_cpu = !strcmp(device, "cpu");
  okv_hal_device_params_t params;
  okv_hal_device_params_init(&params);
  params.n_threads = threads;
  params.capacity_bytes[OKV_TIER_DEVICE] = max_slots * slot_bytes + (512ull << 20);
  BENCH_CHECK(okv_hal_device_create(device, &params, NULL, &b.dev));
  BENCH_CHECK(okv_hal_stream_create(b.dev, &b.stream));
  BENCH_CHECK(okv_hal_event_create(b.dev, &b.ev0));
  BENCH_CHECK(okv_hal_event_create(b.dev, &b.ev1));
#ifdef _OPENMP
  b.threads = threads > 0 ? threads : omp_get_max_threads();
#else
  b.threads = 1;
#endif
  okv_hal_device_info_t info;
  BENCH_CHECK(okv_hal_device_info(b.dev, &info));
  b.simd = bench_simd(info.simd);
  b.pool_slots = max_slots;
  BENCH_CHECK(okv_hal_buffer_alloc(b.dev, OKV_TIER_DEVICE, max_slots * slot_bytes, &b.pool));
  if (!b.is_cpu) BENCH_CHECK(okv_hal_buffer_alloc(b.dev, OKV_TIER_DEVICE, max_slots * slot_bytes, &b.scratch));
  {
    /* random bf16 K/V in [-1, 1), written in 64 MiB chunks */
    const size_t chunk = 64u << 20;
    uint16_t *tmp = malloc(chunk);
    if (!tmp) goto fail;
    uint64_t s = 0xBEEF;
    for (uint64_t off = 0; off < max_slots * slot_bytes; off += chunk) {
      uint64_t n = max_slots * slot_bytes - off < chunk ? max_slots * slot_bytes - off : chunk;
      for (size_t i = 0; i < n / 2; i++) {
        uint64_t r = okv_cli_rng_next(&s);
        tmp[i] = okv_f32_to_bf16((float)((double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0));
      }
      okv_status_t st = okv_hal_buffer_write(b.pool, off, tmp, n);
      if (st != OKV_OK) {
        free(tmp);
        BENCH_CHECK(st);
      }
    }
    free(tmp);
  }

  double fma_gflops = b.is_cpu ? bench_cpu_fma_gflops(b.simd, b.threads) : 0.0;
  double stream_all = 0;
  BENCH_CHECK(bench_stream_gbps(&b, max_slots * slot_bytes, &stream_all));
  const char *isa = b.is_cpu ? info.simd : "gpu";
  if (!as_json) {
    printf("oasiskv bench kernels: device %s (%s), %d thread%s, SIMD %s%s\n", info.name, info.backend, b.threads,
           b.threads == 1 ? "" : "s", isa, quick ? ", quick" : "");
    printf("reference: stream %s %.1f GB/s over %.0f MiB; FMA %.1f GFLOP/s\n", b.is_cpu ? "read" : "d2d copy",
           stream_all, (double)(max_slots * slot_bytes) / (1 << 20), fma_gflops);
    printf("%8s %6s %10s %9s %9s %9s %9s %9s\n", "tokens", "batch", "KV MiB", "time ms", "GB/s", "GFLOP/s", "stream",
           "roofline");
  }
  double min_roof = INFINITY;
  double attn_k128_s = 0; /* attention over 128 blocks at the scoring batch */
  const uint32_t score_batch = quick ? 4 : 16;
  for (int si = 0; si < 2; si++)
    for (int bi = 0; bi < 4; bi++) {
      const uint32_t batch = batches[bi], nb = seq_lens[si] / 16u;
      uint64_t slots = (uint64_t)batch * 8u * nb;
      if (slots * slot_bytes > kv_cap) continue;
      if (quick && (batch > 4 || (seq_lens[si] > 2048 && batch > 1))) continue;
      BENCH_CHECK(bench_attn_make(&b, batch, nb, &a));
      double t = 0, bytes = 0, flops = 0, stream = 0;
      BENCH_CHECK(bench_time(&b, bench_launch_attention, &a, quick ? 0.05 : 0.3, &t));
      BENCH_CHECK(bench_stream_gbps(&b, slots * slot_bytes, &stream));
      bench_attn_cost(&a.desc, nb, &bytes, &flops);
      double t_mem = bytes / (stream * 1e9), t_fma = fma_gflops > 0 ? flops / (fma_gflops * 1e9) : 0;
      double roof = (t_mem > t_fma ? t_mem : t_fma) / t;
      if (seq_lens[si] >= 2048 && roof < min_roof) min_roof = roof;
      if (seq_lens[si] == 2048 && batch == score_batch) attn_k128_s = t;
      if (!as_json)
        printf("%8u %6u %10.1f %9.3f %9.1f %9.1f %9.1f %9.2f\n", seq_lens[si], batch,
               (double)(slots * slot_bytes) / (1 << 20), t * 1e3, bytes / t / 1e9, flops / t / 1e9, stream, roof);
      json_object *c = json_object_new_object();
      json_object_object_add(c, "seq_len", json_object_new_int((int)seq_lens[si]));
      json_object_object_add(c, "batch", json_object_new_int((int)batch));
      json_object_object_add(c, "kv_bytes", json_object_new_int64((int64_t)(slots * slot_bytes)));
      const okv_bench_figure_t figures[] = {
          {"time_s", t},
          {"gbps", bytes / t / 1e9},
          {"gflops", flops / t / 1e9},
          {"stream_gbps", stream},
          {"attention_roofline_fraction", roof},
      };
      bench_json_figures(c, figures, sizeof figures / sizeof figures[0]);
      json_object_array_add(configs, c);
      bench_attn_free(&a);
    }
  if (attn_k128_s == 0) {
    /* quick runs may skip the scoring batch: time it now */
    BENCH_CHECK(bench_attn_make(&b, score_batch, 128, &a));
    BENCH_CHECK(bench_time(&b, bench_launch_attention, &a, 0.05, &attn_k128_s));
    bench_attn_free(&a);
  }

  /* Scoring of a 16K-token context (1,024 blocks per KV head) + top-K 128. */
  const uint32_t score_blocks = 16384u / 16u;
  BENCH_CHECK(bench_score_make(&b, score_batch, score_blocks, OKV_DTYPE_F32, &sc));
  double t_score = 0, t_topk = 0, stream_sc = 0;
  BENCH_CHECK(bench_time(&b, bench_launch_score, &sc, quick ? 0.05 : 0.2, &t_score));
  BENCH_CHECK(bench_time(&b, bench_launch_topk, &sc, quick ? 0.05 : 0.2, &t_topk));
  const double summ_bytes = (double)score_batch * 8.0 * score_blocks * (double)okv_summary_bytes(128);
  {
    /* stream reference over the same number of bytes (the summary buffer size) */
    uint64_t nbytes = (uint64_t)summ_bytes;
    if (nbytes > max_slots * slot_bytes) nbytes = max_slots * slot_bytes;
    BENCH_CHECK(bench_stream_gbps(&b, nbytes, &stream_sc));
  }
  double score_roof = summ_bytes / t_score / 1e9 / stream_sc;
  double score_frac = (t_score + t_topk) / attn_k128_s;
  bench_score_free(&sc);
  /* The same scoring on bf16 summaries (half the bytes; exact for bf16 KV, docs/kernels.md). */
  double t_score_bf16 = 0;
  BENCH_CHECK(bench_score_make(&b, score_batch, score_blocks, OKV_DTYPE_BF16, &sc));
  BENCH_CHECK(bench_time(&b, bench_launch_score, &sc, quick ? 0.05 : 0.2, &t_score_bf16));
  bench_score_free(&sc);
  /* And on 8-bit summaries (the first pass of q8 scoring). */
  double t_score_q8 = 0;
  BENCH_CHECK(bench_score_make(&b, score_batch, score_blocks, OKV_DTYPE_Q8, &sc));
  BENCH_CHECK(bench_time(&b, bench_launch_score, &sc, quick ? 0.05 : 0.2, &t_score_q8));
  bench_score_free(&sc);
  /* And on 4-bit centres (the first pass of c4 scoring, the default). */
  double t_score_c4 = 0;
  BENCH_CHECK(bench_score_make(&b, score_batch, score_blocks, OKV_DTYPE_C4, &sc));
  BENCH_CHECK(bench_time(&b, bench_launch_score, &sc, quick ? 0.05 : 0.2, &t_score_c4));
  bench_score_free(&sc);
  /* Selection on slot tables (device side) for one step of the runtime bench's 448 KV heads, and what
   * enqueueing it costs the host. */
  double t_select = 0, t_select_enqueue = 0;
  BENCH_CHECK(bench_select_make(&b, &sel));
  BENCH_CHECK(bench_time(&b, bench_launch_select, &sel, quick ? 0.05 : 0.2, &t_select));
  {
    const int n_enq = 20;
    double t0 = okv_cli_now_s();
    for (int r = 0; r < n_enq; r++) BENCH_CHECK(bench_launch_select(&b, &sel));
    t_select_enqueue = (okv_cli_now_s() - t0) / n_enq;
    BENCH_CHECK(okv_hal_stream_synchronize(b.stream));
  }
  bench_select_free(&sel);
  /* Same-run ratio: device selection time per KV head over attention time per KV head (K = 128 blocks, the
   * scoring batch's score_batch x 8 KV heads). */
  const double select_ratio = (t_select / BENCH_SEL_HEADS) / (attn_k128_s / (score_batch * 8.0));
  if (!as_json) {
    printf("scoring 16K context, batch %u: %.3f ms (%.1f GB/s of summaries, stream %.1f GB/s) -> roofline %.2f\n",
           score_batch, t_score * 1e3, summ_bytes / t_score / 1e9, stream_sc, score_roof);
    printf("scoring 16K context on bf16 summaries: %.3f ms (%.1f GB/s of summaries) -> %.2fx the f32 speed\n",
           t_score_bf16 * 1e3, summ_bytes / 2.0 / t_score_bf16 / 1e9, t_score / t_score_bf16);
    printf("scoring 16K context on 8-bit summaries: %.3f ms -> %.2fx the bf16 speed\n", t_score_q8 * 1e3,
           t_score_bf16 / t_score_q8);
    printf("scoring 16K context on 4-bit centres: %.3f ms -> %.2fx the bf16 speed, %.2fx the 8-bit\n", t_score_c4 * 1e3,
           t_score_bf16 / t_score_c4, t_score_q8 / t_score_c4);
    printf("top-K 128 of 1024 blocks x %u segments: %.3f ms; attention over K=128 blocks: %.3f ms\n", score_batch * 8u,
           t_topk * 1e3, attn_k128_s * 1e3);
    printf(
        "selection on slot tables, %u KV heads (K = %u, C = %u, 16K context): %.0f ns per head on the device, "
        "%.0f ns per head to enqueue; per KV head %.3f of attention over K = 128 blocks\n",
        BENCH_SEL_HEADS, BENCH_SEL_K, BENCH_SEL_C, t_select * 1e9 / BENCH_SEL_HEADS,
        t_select_enqueue * 1e9 / BENCH_SEL_HEADS, select_ratio);
    printf(
        "attention_roofline_fraction (min over configs) %.2f; scoring_roofline_fraction %.2f; "
        "scoring_fraction %.2f\n",
        min_roof, score_roof, score_frac);
  }
  json_object_object_add(root, "device", json_object_new_string(info.name));
  json_object_object_add(root, "backend", json_object_new_string(info.backend));
  json_object_object_add(root, "threads", json_object_new_int(b.threads));
  json_object_object_add(root, "simd", json_object_new_string(isa));
  json_object_object_add(root, "quick", json_object_new_boolean(quick));
  const okv_bench_figure_t figures[] = {
      {"stream_gbps", stream_all},
      {"fma_gflops", fma_gflops},
      {"attention_roofline_fraction", min_roof},
      {"scoring_roofline_fraction", score_roof},
      {"scoring_fraction", score_frac},
      {"scoring_time_s", t_score},
      {"scoring_gbps", summ_bytes / t_score / 1e9},
      {"scoring_bf16_time_s", t_score_bf16},
      {"scoring_bf16_gbps", summ_bytes / 2.0 / t_score_bf16 / 1e9},
      {"scoring_q8_time_s", t_score_q8},
      {"scoring_c4_time_s", t_score_c4},
      {"topk_time_s", t_topk},
      {"select_device_ns_per_head", t_select * 1e9 / BENCH_SEL_HEADS},
      {"select_enqueue_ns_per_head", t_select_enqueue * 1e9 / BENCH_SEL_HEADS},
      {"select_attention_ratio", select_ratio},
      {"attention_k128_time_s", attn_k128_s},
  };
  bench_json_figures(root, figures, sizeof figures / sizeof figures[0]);
  json_object_object_add(root, "configs", configs);
  configs = NULL;
  if (as_json) printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
  rc = 0;
fail:
  bench_attn_free(&a);
  bench_score_free(&sc);
  bench_select_free(&sel);
  if (configs) json_object_put(configs);
  json_object_put(root);
  if (b.pool) OKV_IGNORE_ERROR(okv_hal_buffer_release(b.pool));
  if (b.scratch) OKV_IGNORE_ERROR(okv_hal_buffer_release(b.scratch));
  if (b.ev0) OKV_IGNORE_ERROR(okv_hal_event_release(b.ev0));
  if (b.ev1) OKV_IGNORE_ERROR(okv_hal_event_release(b.ev1));
  if (b.stream) OKV_IGNORE_ERROR(okv_hal_stream_release(b.stream));
  if (b.dev) OKV_IGNORE_ERROR(okv_hal_device_release(b.dev));
  return rc;
}
