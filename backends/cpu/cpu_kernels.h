/* CPU kernel implementations on raw pointers (OpenMP across (sequence, KV head),
 * vectorised inner loops). Called by the CPU backend's stream workers after
 * hal/ validated the descriptor, and directly by tests/benchmarks.
 * Pointers are already resolved: base + offset of each buffer. */
#ifndef OASISKV_CPU_KERNELS_H
#define OASISKV_CPU_KERNELS_H

#include "oasiskv/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kv_pool: slot base; q/inflight/out/mass at their offsets (inflight, mass may be NULL).
 * n_threads: OpenMP threads (0 = runtime default). */
/* Attention's table mode (okv_attention_desc_t.tables): the bytes of the CSR okv_cpu_attention_tables_ws
 * builds, and the build: *out = *d with the working sets read from `tables` / `slot_map` (the host
 * addresses of the two regions at their offsets) into `scratch` as a CSR (kernels/okv_select_rule.h,
 * okv_table_ws_entry), tables NULL. What a GPU does per thread block on its own table. */
size_t okv_cpu_attention_tables_scratch_bytes(const okv_attention_desc_t *d);
void okv_cpu_attention_tables_ws(const okv_attention_desc_t *d, const void *tables, const uint32_t *slot_map,
                                 void *scratch, okv_attention_desc_t *out);
void okv_cpu_attention(const okv_attention_desc_t *d, const void *kv_pool, const float *q, const float *inflight_kv,
                       float *out, float *block_mass, int n_threads);
/* summaries: d->summary_dtype [*][2][head_dim]. */
void okv_cpu_summarize_blocks(const okv_summary_desc_t *d, const void *kv, void *summaries, int n_threads);
/* f32 summaries (okv_cpu_summary_append_ex with summary_dtype F32). */
void okv_cpu_summary_append(float *summaries, uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                            const uint64_t *summary_index, const float *keys, const uint8_t *first);
/* d->summaries ignored: summaries is its base pointer. Entries in order, one thread. */
void okv_cpu_summary_append_ex(const okv_summary_append_desc_t *d, void *summaries);
/* kv: base pointer of d->kv. Entries in order, one thread. */
void okv_cpu_kv_write(const okv_kv_write_desc_t *d, void *kv);
/* src, dst: base pointers of d->src and d->dst. */
void okv_cpu_summary_reduce(const okv_summary_reduce_desc_t *d, const void *src, void *dst, int n_threads);
/* OKV_DTYPE_Q8 (include/oasiskv/kernels.h): encodes the box [mn, mx] (head_dim floats each) into `out`
 * (okv_summary_bytes_ex(OKV_DTYPE_Q8, hd) bytes) with min codes rounded down and max codes up. */
void okv_cpu_q8_encode(const float *mn, const float *mx, uint32_t hd, uint8_t *out);
/* Query codes of one scaled query row x[hd] for OKV_DTYPE_Q8 scoring: codes[0..hd) hold the negative
 * elements (against the min codes), codes[hd..2hd) the positive ones, each ceil(x / sigma) so that
 * code * sigma >= x; *sum_x = sum of x in double. Returns sigma (0 for an all-zero row, NaN for a
 * non-finite one). */
float okv_cpu_q8_query(const float *x, uint32_t hd, int8_t *codes, double *sum_x);
/* OKV_DTYPE_C4 (include/oasiskv/kernels.h): blocks per tile, and where the packed codes start in a tile. */
#define OKV_C4_TILE  16u
#define OKV_C4_CODES (12u * OKV_C4_TILE)
/* Packed code bytes of one block: ceil(hd / 2) rounded up to 4. */
uint32_t okv_cpu_c4_packed_bytes(uint32_t hd);
/* Bytes of one tile of OKV_C4_TILE blocks: OKV_C4_TILE * (12 + okv_cpu_c4_packed_bytes(hd)). */
size_t okv_cpu_c4_tile_bytes(uint32_t hd);
/* The tile that holds block `block` of a buffer of OKV_DTYPE_C4 summaries at `base` (its lane: block % 16). */
uint8_t *okv_cpu_c4_tile(void *base, uint64_t block, uint32_t hd);
/* Encodes the centre of the box [mn, mx] (head_dim floats each) into lane `lane` of `tile`: 4-bit codes rounded to
 * nearest, the mean half-width; other lanes untouched. */
void okv_cpu_c4_encode(const float *mn, const float *mx, uint32_t hd, uint8_t *tile, uint32_t lane);
/* Codes of one scaled query row x[hd] for OKV_DTYPE_C4 scoring: round(x / sigma) in [-127, 127] (sigma =
 * f32(max |x| / 127)), laid out by groups of 4 packed code bytes (8 elements): for group g, the codes of elements
 * 8g, 8g + 2, 8g + 4, 8g + 6 (the low nibbles) then 8g + 1, ..., 8g + 7 (the high ones); 2 *
 * okv_cpu_c4_packed_bytes(hd) bytes, unused ones zero. *sum_x and *l1_x get f32(sum(x)) and f32(sum|x|), summed
 * in double. Returns sigma (0 for an all-zero row; NaN for a non-finite one or one whose f32 sum|x| overflows: it
 * scores +infinity). */
float okv_cpu_c4_query(const float *x, uint32_t hd, int8_t *codes, float *sum_x, float *l1_x);
/* summaries: d->summary_dtype; segments or, with d->n_ranges > 0, ranges. */
void okv_cpu_score_blocks(const okv_score_desc_t *d, const float *q, const void *summaries, float *scores,
                          int n_threads);
/* Scoring's list mode (d->list_blocks, read here from `list`, the buffer's bytes from list_offset): bytes of
 * the scratch okv_cpu_score_list_ranges needs (one range per listed block at most). */
size_t okv_cpu_score_list_scratch_bytes(const okv_score_desc_t *d);
/* Turns d's candidate lists into ranges of contiguous summaries in `scratch`, written into *out (a copy of *d
 * whose list fields are cleared and n_ranges / range_* set; n_ranges may be 0). A list entry in no run of its
 * segment gets score -infinity here. */
void okv_cpu_score_list_ranges(const okv_score_desc_t *d, const uint32_t *list, float *scores, void *scratch,
                               okv_score_desc_t *out);
/* Selection on slot tables (okv_hal_select_async): tables at the descriptor's table_offset, the other
 * pointers at their offsets. Heads in parallel (OpenMP) from 64 heads on. */
void okv_cpu_select(const okv_select_desc_t *d, void *tables, const uint32_t *predicted, const uint32_t *counts,
                    uint32_t *plan, uint32_t *result, int n_threads);
/* Its commit (okv_hal_slot_commit_async), pointers as okv_cpu_select's; one thread. */
void okv_cpu_slot_commit(const okv_slot_commit_desc_t *d, void *tables, const uint32_t *plan, const uint32_t *result);
void okv_cpu_topk(const okv_topk_desc_t *d, const float *scores, uint32_t *out_indices, uint32_t *out_counts,
                  int n_threads);
/* A c4 scoring call by ranges followed by a top-K over the same scores, fused: each segment's ranges are scored
 * and its top-K taken at once, on one thread, while its scores are in that core's cache (one parallel region
 * instead of two; the CPU stream runs a queued score + top-K pair through it). Results are those of
 * okv_cpu_score_blocks(sd) then okv_cpu_topk(td), bit for bit. okv_cpu_score_topk_fusable says whether a pair
 * qualifies: sd by ranges (not a list) with C4 summaries, range_seg non-decreasing, each range's scores inside
 * its segment's top-K span; td over sd's segments with no index map (td->index_map NULL); at least two
 * segments per thread. */
bool okv_cpu_score_topk_fusable(const okv_score_desc_t *sd, const okv_topk_desc_t *td, int n_threads);
void okv_cpu_score_topk(const okv_score_desc_t *sd, const float *q, const void *summaries, float *scores,
                        const okv_topk_desc_t *td, uint32_t *out_indices, uint32_t *out_counts, int n_threads);

/* Whether a list-mode scoring call (d->list_blocks set, no ranges) is scored directly (okv_cpu_score_list) rather
 * than through ranges: f32, f16 or bf16 summaries. */
bool okv_cpu_score_list_direct(const okv_score_desc_t *d);
/* List-mode scoring (okv_cpu_score_list_direct(d)), list = d's lists (the buffer's bytes from list_offset);
 * segments in parallel (OpenMP), each scored the same way whatever the thread count. */
void okv_cpu_score_list(const okv_score_desc_t *d, const float *q, const void *summaries, const uint32_t *list,
                        float *scores, int n_threads);

/* A whole two-pass prediction fused (what core's c4 scoring queues as one batch): the c4 pass by ranges and its
 * ascending top-(K + margin) (okv_cpu_score_topk's pair), then the exact pass over those candidates as lists and
 * the final top-K through them as its index map. Each segment runs all four on one thread, one parallel region
 * for all. Results (both score arrays, both top-Ks and counts) are those of the four calls one after another,
 * bit for bit; okv_cpu_predict_fusable says whether p qualifies: the first pair fusable and ascending, sd2 a
 * list over td's output (list_stride = td->k, at most td->k per segment; the caller checks that list and
 * index map are td's output) scored by okv_cpu_score_list, td2 over sd2's segments reading inside them, and
 * sd2's segments in ascending, disjoint score spans of a scores2 apart from scores (the caller checks the
 * buffers). */
typedef struct okv_cpu_predict_t {
  const okv_score_desc_t *sd; /* first pass, c4 by ranges */
  const float *q;
  const void *summaries;
  float *scores;
  const okv_topk_desc_t *td; /* its top-K: the candidates */
  uint32_t *cand, *cand_counts;
  const okv_score_desc_t *sd2; /* exact pass over the candidates (lists: cand); NULL: the first pair alone */
  const float *q2;
  const void *summaries2;
  float *scores2;
  const okv_topk_desc_t *td2; /* final top-K (index map: cand) */
  uint32_t *out, *out_counts;
} okv_cpu_predict_t;
bool okv_cpu_predict_fusable(const okv_cpu_predict_t *p, int n_threads);
/* Runs p (sd2 NULL: okv_cpu_score_topk's pair). KV heads in parallel (OpenMP, up to n_threads, each on one
 * thread from its first pass to its final top-K); about 140 KiB of stack per thread. Writes only p's outputs. */
void okv_cpu_predict(const okv_cpu_predict_t *p, int n_threads);

/* ---- Instruction-set dispatch ---- */

/* SIMD level the CPU kernels dispatch to at run time. The same source is
 * compiled for each level; the widest one the CPU supports is used, capped by
 * okv_cpu_isa_limit (tests use the cap to exercise every path on one machine). */
typedef enum okv_cpu_isa_e {
  OKV_CPU_ISA_BASELINE = 0, /* the build's target (SSE2 on default x86-64 builds) */
  OKV_CPU_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C */
  OKV_CPU_ISA_AVX512 = 2,   /* AVX-512 F/BW/VL/DQ + FMA */
} okv_cpu_isa_t;

/* The widest level this CPU supports. Thread-safe. */
okv_cpu_isa_t okv_cpu_isa_detected(void);
/* The level kernels use now: min(detected, cap). Thread-safe. */
okv_cpu_isa_t okv_cpu_isa_active(void);
/* Sets the cap (process-wide; values are clamped to the enum range) and
 * returns the level now active. Kernels already running keep their level. */
okv_cpu_isa_t okv_cpu_isa_limit(okv_cpu_isa_t max_isa);
/* "baseline", "avx2+fma", "avx512". */
const char *okv_cpu_isa_name(okv_cpu_isa_t isa);

#ifdef __cplusplus
}
#endif
#endif
