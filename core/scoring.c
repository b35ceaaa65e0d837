/* Scoring that scales with context (paper arXiv 2608.08097, "Predict", with
 * four additions measured in docs/kernels.md "Scoring at long context"):
 *  - summaries stored in cfg.summary_dtype (f32, or f16/bf16 with directed
 *    rounding so that the Quest bound stays an upper bound);
 *  - two-level scoring: one summary per group of OKV_SCORING_GROUP_BLOCKS
 *    blocks (the elementwise min/max of its blocks' summaries, so the group's
 *    score bounds every key of the group); the groups are scored first, then
 *    only the blocks of each KV head's best `groups_kept` groups, and the top-K
 *    is taken over those candidates. Flat scoring stays the reference;
 *  - q8 scoring: the same two passes with units of one block whose summaries
 *    are 8-bit (OKV_DTYPE_Q8, an upper bound of the exact summary's score);
 *    the best K + margin blocks per KV head are rescored on the exact
 *    summaries;
 *  - c4 scoring (the default): the same as q8 with 4-bit block centres in
 *    tiles of 16 blocks (OKV_DTYPE_C4, an estimate of the exact score, not a
 *    bound; docs/kernels.md "4-bit centres").
 * Owns the group summaries, their maintenance entry points and the two-level
 * prediction pass. */
#include "runtime_internal.h"

#include <stdlib.h>
#include <string.h>

/* q8 and c4's default candidate margin beyond K per KV head: K / 4 (rounded up), but at least min(K, 8). The
 * margin absorbs the first pass's misorder near the K-th block, which does not grow with K: at K = 128 a margin
 * of 32 kept the benchmark's recall at 16K-128K tokens, and at K = 8 a margin of 2 cost stories260K 0.5 points
 * of recall where 8 cost none (docs/kernels.md "Candidate margin"). */
static uint32_t default_margin(uint32_t budget_blocks) {
  const uint32_t quarter = (budget_blocks + 3u) / 4u, floor = budget_blocks < 8u ? budget_blocks : 8u;
  return quarter > floor ? quarter : floor;
}

okv_status_t okv_rt_scoring_init(okv_runtime_t *rt, uint64_t n_host_blocks) {
  const okv_runtime_config_t *c = &rt->cfg;
  rt->groups_kept = 0;
  rt->unit_blocks = 1;
  rt->unit_dtype = c->summary_dtype;
  /* okv_runtime_config() reports the value in effect: 0 wherever every block is scored exactly (flat scoring,
   * DENSE, or q8, c4 or two-level falling back to flat below), else the resolved default. */
  const uint32_t asked = c->scoring_groups;
  rt->cfg.scoring_groups = 0;
  if (c->scoring == OKV_SCORING_FLAT || c->mode == OKV_MODE_DENSE) return OKV_OK;
  uint64_t n_seg = (uint64_t)c->max_seqs * c->n_kv_heads;
  uint32_t g, in_effect;
  if (c->scoring == OKV_SCORING_Q8 || c->scoring == OKV_SCORING_C4) {
    /* K + margin candidates per head; scoring all of a head's blocks this way is flat scoring. The default
     * margin is default_margin's. */
    uint32_t m = asked ? asked : default_margin(c->budget_blocks);
    g = c->budget_blocks + m > OKV_TOPK_MAX ? OKV_TOPK_MAX : c->budget_blocks + m;
    /* No margin left (K = OKV_TOPK_MAX) would make the 8-bit order decide: flat scoring then. */
    if (g <= c->budget_blocks || (uint64_t)g >= rt->max_blocks) return OKV_OK;
    rt->unit_dtype = c->scoring == OKV_SCORING_C4 ? OKV_DTYPE_C4 : OKV_DTYPE_Q8;
    in_effect = g - c->budget_blocks;
  } else {
    g = asked ? asked : c->budget_blocks / 4u;
    if (g < 1) g = 1;
    rt->unit_blocks = OKV_SCORING_GROUP_BLOCKS;
    /* Groups must not straddle extents, and keeping every group is flat scoring. */
    if (rt->extent_blocks % rt->unit_blocks != 0 || (uint64_t)g * rt->unit_blocks >= rt->max_blocks) return OKV_OK;
    in_effect = g;
  }
  rt->cfg.scoring_groups = in_effect;
  rt->groups_kept = g;
  uint64_t ub = okv_summary_bytes_ex(rt->unit_dtype, c->head_dim), n_units = n_host_blocks / rt->unit_blocks;
  if (rt->unit_dtype == OKV_DTYPE_C4) n_units = (n_units + 15u) / 16u * 16u; /* whole tiles of 16 blocks */
  okv_status_t st = okv_hal_buffer_alloc(rt->device, OKV_TIER_DEVICE, n_units * ub, &rt->group_summaries);
  if (st != OKV_OK)
    return okv_status_annotate(st, "runtime: allocating %s summaries (DEVICE tier)",
                               rt->unit_dtype == OKV_DTYPE_Q8   ? "8-bit"
                               : rt->unit_dtype == OKV_DTYPE_C4 ? "4-bit"
                                                                : "group");
  if (okv_rt_blockwise_units(rt)) {
    rt->ones = okv_malloc(&rt->alloc, n_seg * sizeof(uint32_t));
    if (rt->ones == NULL) return OKV_RT_HOST_OOM("compact (q8 / c4) summary updates");
    for (uint64_t i = 0; i < n_seg; i++) rt->ones[i] = 1;
    return OKV_OK;
  }
  rt->append_gindex = okv_malloc(&rt->alloc, n_seg * sizeof(uint64_t));
  rt->append_gfirst = okv_malloc(&rt->alloc, n_seg);
  if (rt->append_gindex == NULL || rt->append_gfirst == NULL) return OKV_RT_HOST_OOM("group summary updates");
  return OKV_OK;
}

okv_status_t okv_rt_scoring_ctx_init(okv_runtime_t *rt, okv_predict_ctx_t *ctx) {
  if (rt->groups_kept == 0) return OKV_OK;
  uint64_t n = (uint64_t)rt->cfg.max_seqs * rt->cfg.n_kv_heads * rt->groups_kept;
  ctx->r_seg = okv_malloc(&rt->alloc, n * sizeof(uint32_t));
  ctx->r_n = okv_malloc(&rt->alloc, n * sizeof(uint32_t));
  ctx->r_sfirst = okv_malloc(&rt->alloc, n * sizeof(uint64_t));
  ctx->r_cfirst = okv_malloc(&rt->alloc, n * sizeof(uint64_t));
  ctx->cand_block = okv_malloc(&rt->alloc, n * rt->unit_blocks * sizeof(uint32_t));
  ctx->cand_bits = okv_malloc(&rt->alloc, (rt->max_blocks / 64u + 1u) * sizeof(uint64_t));
  if (!ctx->r_seg || !ctx->r_n || !ctx->r_sfirst || !ctx->r_cfirst || !ctx->cand_block || !ctx->cand_bits)
    return OKV_RT_HOST_OOM("two-level scoring ranges");
  if (!okv_rt_blockwise_units(rt)) return OKV_OK;
  uint64_t n_seg = (uint64_t)rt->cfg.max_seqs * rt->cfg.n_kv_heads;
  uint64_t n_runs = n_seg * ceil_div_u32(rt->max_blocks, rt->extent_blocks);
  ctx->run_offsets = okv_malloc(&rt->alloc, (n_seg + 1u) * sizeof(uint32_t));
  ctx->run_first = okv_malloc(&rt->alloc, n_runs * sizeof(uint32_t));
  ctx->run_n = okv_malloc(&rt->alloc, n_runs * sizeof(uint32_t));
  ctx->run_sfirst = okv_malloc(&rt->alloc, n_runs * sizeof(uint64_t));
  ctx->run_seg = okv_malloc(&rt->alloc, n_runs * sizeof(uint32_t));
  ctx->run_score_first = okv_malloc(&rt->alloc, n_runs * sizeof(uint64_t));
  ctx->cand_score_first = okv_malloc(&rt->alloc, n_seg * sizeof(uint64_t));
  if (!ctx->run_offsets || !ctx->run_first || !ctx->run_n || !ctx->run_sfirst || !ctx->run_seg ||
      !ctx->run_score_first || !ctx->cand_score_first)
    return OKV_RT_HOST_OOM("q8 scoring runs");
  okv_status_t st = okv_hal_buffer_alloc(rt->device, OKV_TIER_DEVICE, n * sizeof(uint32_t), &ctx->cand);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: allocating the candidate lists (DEVICE tier)");
  st = okv_hal_buffer_alloc(rt->device, OKV_TIER_DEVICE, n * sizeof(float), &ctx->cand_scores);
  return st ? okv_status_annotate(st, "runtime: allocating the candidates' scores (DEVICE tier)") : OKV_OK;
}

void okv_rt_scoring_ctx_free(okv_runtime_t *rt, okv_predict_ctx_t *ctx) {
  void *arrs[] = {ctx->r_seg,           ctx->r_n,        ctx->r_sfirst,    ctx->r_cfirst,
                  ctx->cand_block,      ctx->cand_bits,  ctx->run_offsets, ctx->run_first,
                  ctx->run_n,           ctx->run_sfirst, ctx->run_seg,     ctx->run_score_first,
                  ctx->cand_score_first};
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) okv_rt_free(&rt->alloc, arrs[i]);
  if (ctx->cand != NULL) OKV_IGNORE_ERROR(okv_hal_buffer_release(ctx->cand));
  if (ctx->cand_scores != NULL) OKV_IGNORE_ERROR(okv_hal_buffer_release(ctx->cand_scores));
  ctx->cand = ctx->cand_scores = NULL;
  ctx->run_offsets = ctx->run_first = ctx->run_n = NULL;
  ctx->run_sfirst = ctx->run_score_first = ctx->cand_score_first = NULL;
  ctx->run_seg = NULL;
  ctx->r_seg = ctx->r_n = ctx->cand_block = NULL;
  ctx->cand_bits = NULL;
  ctx->r_sfirst = ctx->r_cfirst = NULL;
}

/* ---- group summaries ---- */

okv_status_t okv_rt_groups_rebuild(okv_runtime_t *rt, okv_hal_stream_t *stream, uint32_t n,
                                   okv_block_map_t *const *maps, const uint32_t *blocks) {
  if (rt->group_summaries == NULL || n == 0) return OKV_OK;
  const uint32_t GB = rt->unit_blocks;
  uint64_t *src_first = okv_malloc(&rt->alloc, (size_t)n * sizeof(uint64_t));
  uint64_t *dst = okv_malloc(&rt->alloc, (size_t)n * sizeof(uint64_t));
  uint32_t *src_n = okv_malloc(&rt->alloc, (size_t)n * sizeof(uint32_t));
  okv_status_t st = OKV_OK;
  if (src_first == NULL || dst == NULL || src_n == NULL) {
    st = OKV_RT_HOST_OOM("group summary rebuild");
  } else {
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
      const okv_head_t *head = head_of_map(maps[i]);
      uint32_t nb = maps[i]->n_blocks, b0 = blocks[i] / GB * GB;
      if (b0 >= nb) continue;
      src_first[m] = okv_host_store_block(&rt->host, head->extents, b0);
      dst[m] = src_first[m] / GB;
      src_n[m] = nb - b0 < GB ? nb - b0 : GB;
      m++;
    }
    okv_summary_reduce_desc_t d = {.head_dim = rt->cfg.head_dim,
                                   .src = rt->summaries,
                                   .src_dtype = rt->cfg.summary_dtype,
                                   .dst = rt->group_summaries,
                                   .dst_dtype = rt->unit_dtype,
                                   .n = m,
                                   .src_first = src_first,
                                   .src_n = src_n,
                                   .dst_index = dst};
    if (m > 0) st = okv_hal_summary_reduce_async(stream, &d);
  }
  okv_rt_free(&rt->alloc, src_first);
  okv_rt_free(&rt->alloc, dst);
  okv_rt_free(&rt->alloc, src_n);
  return st;
}

okv_status_t okv_rt_groups_rebuild_head(okv_runtime_t *rt, okv_hal_stream_t *stream, okv_head_t *head) {
  if (rt->group_summaries == NULL) return OKV_OK;
  const uint32_t GB = rt->unit_blocks;
  uint32_t ng = ceil_div_u32(head->map.n_blocks, GB);
  if (ng == 0) return OKV_OK;
  okv_block_map_t **maps = okv_malloc(&rt->alloc, (size_t)ng * sizeof *maps);
  uint32_t *blocks = okv_malloc(&rt->alloc, (size_t)ng * sizeof *blocks);
  okv_status_t st = OKV_OK;
  if (maps == NULL || blocks == NULL) {
    st = OKV_RT_HOST_OOM("group summary rebuild");
  } else {
    for (uint32_t g = 0; g < ng; g++) {
      maps[g] = &head->map;
      blocks[g] = g * GB;
    }
    st = okv_rt_groups_rebuild(rt, stream, ng, maps, blocks);
  }
  okv_rt_free(&rt->alloc, maps);
  okv_rt_free(&rt->alloc, blocks);
  return st;
}

/* ---- two-level prediction ---- */

okv_score_desc_t okv_rt_pass_desc(const okv_runtime_t *rt, const okv_predict_ctx_t *ctx, uint32_t n_seqs, uint32_t T,
                                  uint32_t t_begin, uint32_t t_end, okv_hal_buffer_t *summaries, okv_dtype_t dtype) {
  return (okv_score_desc_t){.n_seqs = n_seqs,
                            .n_kv_heads = rt->cfg.n_kv_heads,
                            .group_size = rt->group_size,
                            .head_dim = rt->cfg.head_dim,
                            .n_query_tokens = T,
                            .t_begin = t_begin,
                            .t_end = t_end,
                            .q = ctx->q,
                            .summaries = summaries,
                            .seg_summary_first = ctx->seg_summary_first,
                            .seg_n_blocks = ctx->seg_n,
                            .scores = ctx->scores,
                            .seg_score_first = ctx->seg_score_first,
                            .summary_dtype = dtype};
}

okv_status_t okv_rt_topk_readback(okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, uint32_t n_segments, uint32_t k,
                                  uint32_t layer) {
  if (ctx->topk_on_device) return OKV_OK; /* a failure reports at the selection's wait */
  okv_status_t st = okv_hal_stream_synchronize(stream);
  if (st == OKV_OK) st = okv_hal_buffer_read(ctx->topk, 0, ctx->host_topk, (uint64_t)n_segments * k * 4u);
  if (st == OKV_OK) st = okv_hal_buffer_read(ctx->counts, 0, ctx->host_counts, (uint64_t)n_segments * 4u);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: top-K of layer %u", layer);
  return OKV_OK;
}

okv_status_t okv_rt_final_topk(okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, const okv_topk_desc_t *td,
                               uint32_t layer) {
  okv_status_t st = okv_hal_topk_async(stream, td);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: top-K of layer %u", layer);
  return okv_rt_topk_readback(ctx, stream, td->n_segments, td->k, layer);
}

/* q8 and c4 scoring with the candidates kept on the device: the 8-bit (or 4-bit) pass, its top-(K + margin) per head in
 * ascending block order (the active block excluded) into ctx->cand, the exact pass over those lists (each
 * block's summary found through the head's runs of contiguous extents), and the top-K with ctx->cand as its
 * index map. One listing serves both passes: every head's runs, from its hot mirror (a head's extents are read
 * only past its leading run), which the 8-bit pass scores as ranges in one launch. The host lists nothing per
 * candidate and waits once per layer. */
static okv_status_t predict_q8(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, uint32_t n_seqs,
                               uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end, double *bk_s) {
  double t0 = okv_rt_bk_s();
  const okv_runtime_config_t *c = &rt->cfg;
  const uint32_t H = c->n_kv_heads, G = rt->groups_kept, K = c->budget_blocks, E = rt->extent_blocks;
  const uint32_t n_seg = n_seqs * H;
  okv_score_desc_t sd = okv_rt_pass_desc(rt, ctx, n_seqs, T, t_begin, t_end, rt->group_summaries, rt->unit_dtype);
  for (uint32_t s = 0; s < n_seqs; s++) /* the mirrors are cold: their misses overlap */
    if (ctx->seqs[s] != NULL)
      okv_rt_prefetch_range(head_hot(rt, (uint32_t)(ctx->seqs[s] - rt->seqs), layer, 0), H * sizeof(okv_head_hot_t));
  uint32_t n_excl = 0, n_runs = 0;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    uint32_t nb = seq ? n_blocks_of(seq->n_tokens[layer]) : 0, need = ceil_div_u32(nb, E);
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h;
      ctx->seg_score_first[u] = (uint64_t)u * rt->max_blocks;
      ctx->topk_n[u] = nb;
      ctx->excl_offsets[u] = n_excl;
      ctx->run_offsets[u] = n_runs;
      ctx->seg_n[u] = nb > 1u ? (nb - 1u < G ? nb - 1u : G) : 0u; /* the first top-K's count */
      if (nb == 0) continue;
      ctx->excl_blocks[n_excl++] = nb - 1u; /* the active block is never a candidate */
      const okv_head_hot_t *k = head_hot(rt, (uint32_t)(seq - rt->seqs), layer, h);
      for (uint32_t e = 0; e < need;) { /* runs of contiguous extents */
        uint32_t start, run = okv_rt_hot_run(k, e, need, &start);
        uint32_t first = e * E;
        ctx->run_first[n_runs] = first;
        ctx->run_n[n_runs] = run * E < nb - first ? run * E : nb - first;
        ctx->run_sfirst[n_runs] = (uint64_t)start * E;
        ctx->run_seg[n_runs] = u;
        ctx->run_score_first[n_runs] = (uint64_t)u * rt->max_blocks + first;
        n_runs++;
        e += run;
      }
    }
  }
  ctx->excl_offsets[n_seg] = n_excl;
  ctx->run_offsets[n_seg] = n_runs;
  /* Every descriptor is set up before the first launch, so that the four launches follow one another with no
   * bookkeeping interval (and no clock read) between them. */
  sd.seg_summary_first = NULL; /* ranges: the per-segment arrays are not read */
  sd.n_ranges = n_runs;        /* the 8-bit pass: a range per run (block i of run r: summary run_sfirst[r] + i) */
  sd.range_seg = ctx->run_seg;
  sd.range_summary_first = ctx->run_sfirst;
  sd.range_n_blocks = ctx->run_n;
  sd.range_score_first = ctx->run_score_first;
  okv_topk_desc_t td = {.n_segments = n_seg,
                        .k = G,
                        .scores = ctx->scores,
                        .seg_score_first = ctx->seg_score_first,
                        .seg_n = ctx->topk_n,
                        .excl_offsets = ctx->excl_offsets,
                        .excl_blocks = ctx->excl_blocks,
                        .out_indices = ctx->cand,
                        .ascending = true};
  for (uint32_t u = 0; u < n_seg; u++) ctx->cand_score_first[u] = (uint64_t)u * G;
  okv_score_desc_t sd2 = sd;
  sd2.n_ranges = 0; /* list mode: the runs as a CSR */
  sd2.range_seg = NULL;
  sd2.range_summary_first = sd2.range_score_first = NULL;
  sd2.range_n_blocks = NULL;
  sd2.summaries = rt->summaries;
  sd2.summary_dtype = c->summary_dtype;
  sd2.scores = ctx->cand_scores;
  sd2.seg_score_first = ctx->cand_score_first;
  sd2.list_blocks = ctx->cand;
  sd2.list_stride = G;
  sd2.seg_run_offsets = ctx->run_offsets;
  sd2.run_first_block = ctx->run_first;
  sd2.run_n_blocks = ctx->run_n;
  sd2.run_summary_first = ctx->run_sfirst;
  okv_topk_desc_t td2 = {.n_segments = n_seg,
                         .k = K,
                         .scores = ctx->cand_scores,
                         .seg_score_first = ctx->cand_score_first,
                         .seg_n = ctx->seg_n,
                         .out_indices = ctx->topk,
                         .out_counts = ctx->counts,
                         .index_map_buffer = ctx->cand};
  *bk_s += okv_rt_bk_s() - t0;
  /* The four launches reach the stream together: a CPU stream runs them as one kernel, each head's two passes
   * and top-Ks on one thread (okv_cpu_predict). */
  const bool batch = okv_status_consume(okv_hal_stream_batch_begin(stream)) == OKV_STATUS_OK;
  okv_status_t st = n_runs > 0 ? okv_hal_score_blocks_async(stream, &sd) : OKV_OK;
  if (st == OKV_OK) {
    st = okv_hal_topk_async(stream, &td);
    if (st != OKV_OK)
      st = okv_status_annotate(st, "runtime: %s top candidates of layer %u", okv_dtype_name(rt->unit_dtype), layer);
  } else {
    st = okv_status_annotate(st, "runtime: %s first-pass scoring of layer %u", okv_dtype_name(rt->unit_dtype), layer);
  }
  if (st == OKV_OK) {
    st = okv_hal_score_blocks_async(stream, &sd2);
    if (st != OKV_OK) st = okv_status_annotate(st, "runtime: exact scoring of layer %u's candidates", layer);
  }
  if (st == OKV_OK) {
    st = okv_hal_topk_async(stream, &td2);
    if (st != OKV_OK) st = okv_status_annotate(st, "runtime: top-K of layer %u", layer);
  }
  if (batch) OKV_IGNORE_ERROR(okv_hal_stream_batch_end(stream));
  if (st != OKV_OK) return st;
  return okv_rt_topk_readback(ctx, stream, td2.n_segments, td2.k, layer);
}

/* Same contract as okv_rt_predict_topk (results in ctx->host_topk / host_counts,
 * K per segment, the active block excluded). Level 1 scores every group of
 * every listed head (one launch per run of contiguous extents, like flat
 * scoring) and keeps the best groups_kept; level 2 scores the blocks of those
 * groups, listed in ascending block order so that ties break towards the lower
 * block exactly as in flat scoring, and takes the top-K through an index map. */
okv_status_t okv_rt_predict_two_level(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                      uint32_t n_seqs, uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end,
                                      double *bk_s) {
  if (okv_rt_blockwise_units(rt)) return predict_q8(rt, ctx, stream, n_seqs, layer, T, t_begin, t_end, bk_s);
  double t0 = okv_rt_bk_s();
  const okv_runtime_config_t *c = &rt->cfg;
  uint32_t H = c->n_kv_heads, G = rt->groups_kept, K = c->budget_blocks, GB = rt->unit_blocks;
  uint32_t n_seg = n_seqs * H;
  uint64_t cand_stride = (uint64_t)G * GB;
  okv_score_desc_t sd = okv_rt_pass_desc(rt, ctx, n_seqs, T, t_begin, t_end, rt->group_summaries, rt->unit_dtype);
  /* Level 1: the group summaries. */
  *bk_s += okv_rt_bk_s() - t0;
  okv_status_t st = okv_rt_score_units(rt, ctx, stream, &sd, n_seqs, layer, GB, bk_s);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: scoring the groups of layer %u", layer);
  t0 = okv_rt_bk_s();
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    uint32_t ng = seq ? ceil_div_u32(n_blocks_of(seq->n_tokens[layer]), GB) : 0;
    for (uint32_t h = 0; h < H; h++) {
      ctx->seg_score_first[s * H + h] = (uint64_t)(s * H + h) * rt->max_blocks;
      ctx->topk_n[s * H + h] = ng;
    }
  }
  okv_topk_desc_t td = {.n_segments = n_seg,
                        .k = G,
                        .scores = ctx->scores,
                        .seg_score_first = ctx->seg_score_first,
                        .seg_n = ctx->topk_n,
                        .out_indices = ctx->topk,
                        .out_counts = ctx->counts};
  *bk_s += okv_rt_bk_s() - t0;
  st = okv_hal_topk_async(stream, &td);
  if (st == OKV_OK) st = okv_hal_stream_synchronize(stream);
  if (st == OKV_OK) st = okv_hal_buffer_read(ctx->topk, 0, ctx->host_topk, (uint64_t)n_seg * G * 4u);
  if (st == OKV_OK) st = okv_hal_buffer_read(ctx->counts, 0, ctx->host_counts, (uint64_t)n_seg * 4u);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: top groups of layer %u", layer);
  /* Level 2: the blocks of the kept groups, ascending. */
  t0 = okv_rt_bk_s();
  uint32_t nr = 0, n_excl = 0;
  for (uint32_t s = 0; s < n_seqs; s++) {
    const okv_seq_t *seq = ctx->seqs[s];
    uint32_t nb = seq ? n_blocks_of(seq->n_tokens[layer]) : 0;
    for (uint32_t h = 0; h < H; h++) {
      uint32_t u = s * H + h, pos = 0;
      uint64_t cfirst = (uint64_t)u * cand_stride;
      ctx->excl_offsets[u] = n_excl;
      ctx->seg_score_first[u] = cfirst;
      if (nb > 0) {
        const okv_head_t *hd = seq_head(rt, seq, layer, h);
        const uint32_t EB = rt->extent_blocks;
        uint32_t ext_lo = 0, ext_hi = 0; /* the extent of the last candidate: ascending, so few divisions */
        uint64_t ext_base = 0;
        const uint32_t *groups = &ctx->host_topk[(size_t)u * G];
        uint32_t cg = ctx->host_counts[u], nw = ceil_div_u32(ceil_div_u32(nb, GB), 64u);
        /* the kept units in ascending order (ties then break as in flat scoring): a bitmap, not a sort */
        memset(ctx->cand_bits, 0, (size_t)nw * sizeof(uint64_t));
        for (uint32_t i = 0; i < cg; i++) ctx->cand_bits[groups[i] >> 6] |= 1ull << (groups[i] & 63u);
        for (uint32_t w = 0; w < nw; w++)
          for (uint64_t bits = ctx->cand_bits[w]; bits != 0; bits &= bits - 1u) {
            uint32_t g = w * 64u + (uint32_t)__builtin_ctzll(bits);
            uint32_t b0 = g * GB, n = nb - b0 < GB ? nb - b0 : GB;
            if (b0 >= ext_hi) {
              ext_lo = b0 / EB * EB;
              ext_hi = ext_lo + EB;
              ext_base = (uint64_t)hd->extents[b0 / EB] * EB;
            }
            uint64_t sfirst = ext_base + (b0 - ext_lo); /* okv_host_store_block(&rt->host, hd->extents, b0) */
            if (pos > 0 && ctx->r_seg[nr - 1] == u && ctx->r_sfirst[nr - 1] + ctx->r_n[nr - 1] == sfirst) {
              ctx->r_n[nr - 1] += n; /* contiguous with the previous range: one range */
            } else {
              ctx->r_seg[nr] = u;
              ctx->r_sfirst[nr] = sfirst;
              ctx->r_n[nr] = n;
              ctx->r_cfirst[nr] = cfirst + pos;
              nr++;
            }
            for (uint32_t j = 0; j < n; j++) {
              if (b0 + j == nb - 1u) ctx->excl_blocks[n_excl++] = pos + j; /* the active block */
              ctx->cand_block[cfirst + pos + j] = b0 + j;
            }
            pos += n;
          }
      }
      ctx->topk_n[u] = pos;
    }
  }
  ctx->excl_offsets[n_seg] = n_excl;
  okv_score_desc_t sd2 = sd;
  sd2.n_ranges = 0; /* list mode: the runs as a CSR */
  sd2.range_seg = NULL;
  sd2.range_summary_first = sd2.range_score_first = NULL;
  sd2.range_n_blocks = NULL;
  sd2.summaries = rt->summaries;
  sd2.summary_dtype = c->summary_dtype;
  sd2.n_ranges = nr;
  sd2.range_seg = ctx->r_seg;
  sd2.range_summary_first = ctx->r_sfirst;
  sd2.range_n_blocks = ctx->r_n;
  sd2.range_score_first = ctx->r_cfirst;
  okv_topk_desc_t td2 = {.n_segments = n_seg,
                         .k = K,
                         .scores = ctx->scores,
                         .seg_score_first = ctx->seg_score_first,
                         .seg_n = ctx->topk_n,
                         .excl_offsets = ctx->excl_offsets,
                         .excl_blocks = ctx->excl_blocks,
                         .out_indices = ctx->topk,
                         .out_counts = ctx->counts,
                         .index_map = ctx->cand_block};
  *bk_s += okv_rt_bk_s() - t0;
  if (nr > 0) st = okv_hal_score_blocks_async(stream, &sd2);
  if (st != OKV_OK) return okv_status_annotate(st, "runtime: scoring the kept groups' blocks of layer %u", layer);
  return okv_rt_final_topk(ctx, stream, &td2, layer);
}
