/* OasisKV runtime: the public C API an inference engine uses.
 *
 * The full KV cache of every sequence lives in the HOST tier (authoritative);
 * the DEVICE tier holds a pool of block slots shared by all sequences, and each
 * (sequence, layer, KV head) keeps its own sparse working set of at most K
 * blocks plus its active (last) block, found through a head-wise
 * logical-to-logical map (block table). Each decode step runs the real token
 * stacked with draft (look-ahead) tokens; the draft queries predict the next
 * step's top-K blocks and a background pipeline per layer (predict -> select
 * -> transfer) brings missing blocks in, at most C = ceil(fetch_ratio * K) per
 * KV head per step (capped eviction). Method: arXiv 2608.08097, "OasisKV".
 *
 * See docs/api.md for a usage example.
 *
 * Thread safety: one runtime is driven by one engine thread at a time (calls
 * on the same runtime must not overlap); different runtimes are independent.
 * The runtime's background pipeline thread and streams are internal.
 * Ownership: every pointer argument is borrowed for the duration of the call;
 * the runtime copies what it keeps. Units: tokens, blocks of 16 tokens, bytes,
 * seconds, as named.
 */
#ifndef OASISKV_OASISKV_H
#define OASISKV_OASISKV_H

#include "oasiskv/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "oasiskv/allocator.h"
#include "oasiskv/hal.h"
#include "oasiskv/kernels.h"
#include "oasiskv/status.h"
#include "oasiskv/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_mode_e {
  OKV_MODE_DENSE = 0,    /* every block resident (the reference) */
  OKV_MODE_OASIS = 1,    /* draft-query look-ahead prediction, background pipeline, capped eviction */
  OKV_MODE_PROXY = 2,    /* the real token's current query predicts the next step (FreeKV/Quest-style) */
  OKV_MODE_ONDEMAND = 3, /* select with the current query, fetch every miss before attention, no cap */
  OKV_MODE_COUNT
} okv_mode_t;

/* "dense", "oasis", "proxy", "ondemand". */
OKV_API const char *okv_mode_name(okv_mode_t mode);
/* Parses a mode name ("dense", "oasis", "proxy", "ondemand") into *out_mode.
 * Errors: INVALID_ARGUMENT for an unknown name or NULL pointers. Thread-safe. */
OKV_API okv_status_t okv_mode_parse(const char *name, okv_mode_t *out_mode);

typedef struct okv_runtime_config_t {
  /* Model shape. */
  uint32_t n_layers;
  uint32_t n_q_heads; /* multiple of n_kv_heads */
  uint32_t n_kv_heads;
  uint32_t head_dim;     /* 1..256 */
  okv_dtype_t kv_dtype;  /* default OKV_DTYPE_F32 */
  uint32_t block_tokens; /* must be 16 (OKV_BLOCK_TOKENS) */
  /* Policy. */
  okv_mode_t mode;        /* default OKV_MODE_OASIS */
  uint32_t budget_blocks; /* K: blocks per KV head in the working set, besides the active block; default 128 */
  double fetch_ratio;     /* in (0, 1]; cap C = ceil(fetch_ratio * K) new blocks per KV head per step; default 0.05.
                             With fetch_ratio_auto it is the maximum the self-tuning cap may choose. */
  bool fetch_ratio_auto;  /* self-tuning cap (beyond the paper, which tunes the ratio by hand): each layer's C is
                             chosen per step from the measured HOST->DEVICE link bandwidth and the measured time
                             between a layer's uses, so that a step's transfers fit in 80% of the step at that
                             bandwidth; 1 <= C <= ceil(fetch_ratio * K). Default false. docs/api.md "Fetch ratio". */
  uint32_t dense_threshold_blocks; /* a sequence keeps all its KV resident until its context exceeds this
                                      many blocks; default = budget_blocks (must be <= budget_blocks) */
  /* Sizing. */
  uint32_t max_seqs;            /* sequences alive at once; default 64 */
  uint32_t max_context_tokens;  /* tokens per sequence, 1..1,048,576; default 131072 */
  uint64_t device_pool_bytes;   /* DEVICE bytes for the slot pool; 0 = room for max_seqs full working sets */
  uint64_t host_capacity_bytes; /* HOST tier bytes the runtime may use for full KV; 0 = what max_seqs x
                                   max_context_tokens need, capped at half the free HOST bytes and 2 GiB
                                   (docs/api.md) */
  bool track_recall;            /* compute recall: true next-step top-K resident in time (costs a scoring pass) */
} okv_runtime_config_t;

/* Sets every default (shape fields to 0: the caller must set them). */
OKV_API void okv_runtime_config_init(okv_runtime_config_t *config);

/* Validates every field; INVALID_ARGUMENT names the field. */
OKV_API okv_status_t okv_runtime_config_validate(const okv_runtime_config_t *config);

typedef struct okv_runtime_t okv_runtime_t;

/* Creates a runtime on `device` (retained). Allocates the DEVICE slot pool and
 * starts the background pipeline thread. allocator NULL = system.
 * Errors: INVALID_ARGUMENT (config, field named), OUT_OF_MEMORY (tier named),
 * UNAVAILABLE. Thread safety: a runtime is driven by one engine thread; its
 * background pipeline is internal. */
OKV_API okv_status_t okv_runtime_create(okv_hal_device_t *device, const okv_runtime_config_t *config,
                                        const okv_allocator_t *allocator, okv_runtime_t **out_runtime);
/* Waits for in-flight transfers, frees everything. NULL is accepted. */
OKV_API void okv_runtime_destroy(okv_runtime_t *runtime);

/* Effective configuration (defaults resolved). */
OKV_API const okv_runtime_config_t *okv_runtime_config(const okv_runtime_t *runtime);

/* ---- Sequences ---- */

/* Prefilled K/V handed to okv_runtime_seq_add, float32, layout
 * [n_layers][n_tokens][n_kv_heads][head_dim] for k and for v (borrowed for the call). */
typedef struct okv_prefill_t {
  uint32_t n_tokens;
  const float *k;
  const float *v;
} okv_prefill_t;

/* Adds a sequence, optionally with prefilled K/V (bulk-loaded into the HOST
 * tier, summaries built; the initial working set is the last K blocks per head,
 * or everything while under the dense threshold). Writes the new id.
 * Errors: OUT_OF_MEMORY when the slot pool or the HOST tier cannot hold the
 * sequence's working set (nothing is left allocated), INVALID_ARGUMENT. */
OKV_API okv_status_t okv_runtime_seq_add(okv_runtime_t *runtime, const okv_prefill_t *prefill, uint32_t *out_seq_id);

/* Removes a sequence and frees its slots and host blocks, also while its
 * transfers are in flight. Errors: NOT_FOUND. */
OKV_API okv_status_t okv_runtime_seq_remove(okv_runtime_t *runtime, uint32_t seq_id);

/* Context length in tokens. Errors: NOT_FOUND. */
OKV_API okv_status_t okv_runtime_seq_length(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t *out_n_tokens);

/* Lists the logical blocks resident and readable for (seq, layer, kv_head),
 * ascending, active block included (unless its last write failed); writes up to
 * `capacity` and the count. For tests and analysis. Errors: NOT_FOUND, INVALID_ARGUMENT. */
OKV_API okv_status_t okv_runtime_seq_resident(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t layer,
                                              uint32_t kv_head, uint32_t *out_blocks, uint32_t capacity,
                                              uint32_t *out_count);

/* ---- Decode step ----
 * A step processes one real token per sequence of a batch, stacked with
 * n_query_tokens - 1 draft tokens (OKV_MODE_OASIS needs >= 2; other modes accept 1..4).
 * Usage per step: okv_runtime_step_begin, then for l = 0..n_layers-1
 * okv_runtime_step_layer, then okv_runtime_step_end.
 * okv_runtime_step_begin: seq_ids [n_seqs] (borrowed), n_seqs >= 1 and <= max_seqs, no duplicates.
 * Errors: INVALID_ARGUMENT (a step already begun, n_seqs, n_query_tokens out of range or < 2 in
 * OKV_MODE_OASIS, a duplicate id), NOT_FOUND (an unknown sequence id), OUT_OF_MEMORY (a sequence
 * already holds max_context_tokens: it cannot take another token). */
OKV_API okv_status_t okv_runtime_step_begin(okv_runtime_t *runtime, uint32_t n_seqs, const uint32_t *seq_ids,
                                            uint32_t n_query_tokens);

/* Layer l of the current step (layers in order 0..n_layers-1):
 *  1. waits only for layer l's transfers issued in the previous step (layer-local sync) and commits
 *     them to the map (failed transfers map nothing; their blocks stay misses);
 *  2. appends the real token's K/V (k_new, v_new: f32 [n_seqs][n_kv_heads][head_dim]) to the HOST tier
 *     (committed), then its block summary, then refreshes the active block's slot from the HOST tier;
 *  3. OKV_MODE_ONDEMAND selects with the real query and fetches every miss now;
 *  4. runs sparse attention for the T stacked tokens over the readable working set:
 *     q: f32 [n_seqs][T][n_q_heads][head_dim]; draft_kv: f32 [n_seqs][T-1][2][n_kv_heads][head_dim]
 *     (the draft tokens' own K then V, never committed; may be NULL when T == 1);
 *     out: f32 [n_seqs][T][n_q_heads][head_dim];
 *  5. hands layer l to the background pipeline (predict with the draft queries in OASIS, the real
 *     query in PROXY; select with capped eviction; one batched HOST->DEVICE copy; one event).
 * Contract (docs/api.md "Faults"): OK exactly when `out` is valid. Attention reads a slot only for the
 * tokens a completed write put there, so `out` never includes stale or another sequence's K/V. Failed
 * fetches and predictions are absorbed (the step returns OK; stats pipeline_errors / failed_blocks).
 * Errors (then every element of `out` is NaN, except when no step is in progress: the runtime then
 * does not know the batch, and `out` is left untouched):
 *  INVALID_ARGUMENT, OUT_OF_MEMORY (HOST extents, DEVICE slots in dense mode, host allocator): nothing
 *    committed for this layer; the same layer may be called again;
 *  COPY_FAILED (the active-block refresh failed twice), INTERNAL (a kernel, event or stream failed):
 *    the token is committed to the HOST tier, attention did not run; the slots the failed write covered
 *    stay unreadable and are repaired by the next append. The step may go on with layer l + 1. */
OKV_API okv_status_t okv_runtime_step_layer(okv_runtime_t *runtime, uint32_t layer, const float *k_new,
                                            const float *v_new, const float *q, const float *draft_kv, float *out);

/* Ends the step (every layer must have run); writes this step's stats when out_stats is not NULL.
 * Errors: INVALID_ARGUMENT (no step begun, layers missing). */
typedef struct okv_step_stats_t okv_step_stats_t;
OKV_API okv_status_t okv_runtime_step_end(okv_runtime_t *runtime, okv_step_stats_t *out_stats);

/* Read-only attention over what is readable now for a batch, without
 * committing anything or touching the pipeline (e.g. the self drafter's extra
 * uncommitted forward). Same layouts as okv_runtime_step_layer with T = n_query_tokens and
 * inflight_kv: f32 [n_seqs][T][2][n_kv_heads][head_dim] for all T tokens (token t sees
 * in-flight tokens 0..t). Commits layer l's pending transfer first (a failed one is absorbed).
 * Returns OK exactly when `out` is valid; on any error every element of `out` is NaN.
 * Errors: INVALID_ARGUMENT (shapes, layer, NULL pointers), NOT_FOUND (an unknown sequence id),
 * COPY_FAILED / INTERNAL (staging or the attention kernel failed). Not thread-safe (the engine thread). */
OKV_API okv_status_t okv_runtime_peek_layer(okv_runtime_t *runtime, uint32_t n_seqs, const uint32_t *seq_ids,
                                            uint32_t layer, uint32_t n_query_tokens, const float *q,
                                            const float *inflight_kv, float *out);

/* ---- Stats ---- */
struct okv_step_stats_t {
  uint64_t hits;                                        /* predicted blocks already resident (no traffic) */
  uint64_t misses;                                      /* predicted blocks not resident */
  uint64_t admitted;                                    /* misses scheduled for transfer (<= C per KV head) */
  uint64_t deferred;                                    /* misses left for later steps by the cap */
  uint64_t evicted;                                     /* victims replaced */
  uint64_t failed_blocks;                               /* transfers that failed (blocks stay misses) */
  uint64_t blocks_moved;                                /* blocks copied HOST->DEVICE */
  uint64_t bytes_moved[OKV_TIER_COUNT][OKV_TIER_COUNT]; /* [src][dst] */
  double stall_seconds;                                 /* foreground time waiting on transfers */
  uint64_t recall_hits; /* true next-step top-K blocks resident in time (track_recall) */
  uint64_t recall_total;
  uint64_t steps;             /* steps summed (1 for a step's stats) */
  uint64_t deferred_steps;    /* steps where the cap deferred at least one block */
  double bookkeeping_seconds; /* host time in the runtime's own code paths (mapping, selection, scheduling,
                                 plan building), foreground + background thread; excludes kernels, copies and
                                 waits on them */
  double attention_seconds;   /* foreground time from enqueueing attention to its completion */
  uint64_t append_bytes;      /* HOST->DEVICE bytes copied to keep active blocks' slots current (not in
                                 bytes_moved, which counts fetched blocks only) */
  double append_seconds;      /* foreground time writing the real tokens' K/V into the HOST tier (data movement that
                                 a GPU does with its copy engine; not part of bookkeeping_seconds) */
  uint64_t pipeline_errors;   /* absorbed failures of a fetch batch or of a prediction (background pipeline, or the
                                 on-demand / recall pass): its blocks stayed misses, attention ran without them */
  uint64_t retried_writes;    /* active-block refresh batches that failed once and succeeded when retried */
};

/* Cumulative stats over the runtime's life (layer = UINT32_MAX) or for one layer, since creation
 * or the last okv_runtime_stats_reset. Errors: INVALID_ARGUMENT (NULL pointers, layer >= n_layers
 * and not UINT32_MAX). */
OKV_API okv_status_t okv_runtime_stats(const okv_runtime_t *runtime, uint32_t layer, okv_step_stats_t *out_stats);
/* Clears cumulative stats. */
OKV_API void okv_runtime_stats_reset(okv_runtime_t *runtime);

/* State of the cap (docs/api.md "Fetch ratio"). link_bytes_per_second and
 * layer_interval_seconds are the self-tuning cap's running estimates (0 until
 * measured, and always 0 without fetch_ratio_auto): HOST->DEVICE bytes per second
 * of the background transfers (bytes of a layer's batch / its duration between two
 * events on the copy stream, exponentially averaged with weight 0.3) and the wall
 * time between two uses of the same layer (step_layer calls). cap_blocks is the C
 * the latest job of each layer used, averaged over layers; cap_max_blocks is
 * ceil(fetch_ratio * K). */
typedef struct okv_cap_state_t {
  double link_bytes_per_second;
  double layer_interval_seconds;
  double cap_blocks;
  uint32_t cap_max_blocks;
} okv_cap_state_t;

/* Reads the cap state. Call from the engine thread between calls (not thread-safe
 * against a concurrent step). Errors: INVALID_ARGUMENT (NULL runtime or out_state). */
OKV_API okv_status_t okv_runtime_cap_state(const okv_runtime_t *runtime, okv_cap_state_t *out_state);

/* ---- Capacity ---- */

/* How many more sequences with a prefill of `n_tokens` tokens okv_runtime_seq_add
 * would accept now: bounded by free sequence entries (max_seqs), free DEVICE
 * slots (sparse modes reserve K + 1 + C slots per layer and KV head at
 * seq_add; OKV_MODE_DENSE needs one per block) and free HOST extents. An
 * estimate only in that HOST extents may fragment. Errors: INVALID_ARGUMENT. */
OKV_API okv_status_t okv_runtime_seq_capacity(const okv_runtime_t *runtime, uint32_t n_tokens, uint32_t *out_n_seqs);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_OASISKV_H */
