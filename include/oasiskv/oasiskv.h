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

/* Block scoring of the prediction (paper: "Predict", Quest-style min/max bound). */
typedef enum okv_scoring_e {
  OKV_SCORING_FLAT = 0,      /* every block's summary scored: the reference */
  OKV_SCORING_TWO_LEVEL = 1, /* group summaries (OKV_SCORING_GROUP_BLOCKS blocks each) scored first, then only the
                                blocks of each KV head's best scoring_groups groups (an approximation: a block of
                                a group outside them is not predicted); equal to flat while a head has at most
                                scoring_groups groups */
  OKV_SCORING_Q8 = 2,        /* 8-bit summaries (OKV_DTYPE_Q8, a quarter of f32's bytes, u8 x s8 dot products)
                                score every block; each KV head's best K + scoring_groups (0: K / 4 more, at least
                                min(K, 8); at most OKV_TOPK_MAX in all) are rescored on the exact summaries and
                                the top-K taken from them. The 8-bit score is itself an upper bound of the exact
                                one, so the top-K differs from flat only where a block of flat's top-K ranks below
                                those candidates on the 8-bit scale; equal to flat while a head has at most that many
                                blocks, or when no margin fits (K = OKV_TOPK_MAX) (docs/kernels.md "8-bit
                                summaries") */
  OKV_SCORING_C4 = 3,        /* 4-bit block centres (OKV_DTYPE_C4, 76 bytes per block at head_dim 128 against q8's 264)
                                score every block with an estimate of the min/max bound (centre dot product plus the
                                mean half-width times the query's L1 norm), then each KV head's best K +
                                scoring_groups are rescored on the exact summaries as with q8. An approximation
                                beyond the paper: the first pass is not a bound, so a block of flat's top-K can be
                                missed where more than K + margin blocks outrank it on the estimate; equal to flat
                                while a head has at most that many blocks (docs/kernels.md "4-bit centres") */
  OKV_SCORING_COUNT
} okv_scoring_t;
#define OKV_SCORING_GROUP_BLOCKS 16u
/* okv_runtime_config_t.summary_dtype: summaries in the KV dtype. */
#define OKV_SUMMARY_DTYPE_AUTO OKV_DTYPE_COUNT
/* "flat" / "two-level" / "q8" / "c4" (NULL for an invalid value). Pure, thread-safe. */
OKV_API const char *okv_scoring_name(okv_scoring_t scoring);
/* Parses a name of okv_scoring_name. Errors: INVALID_ARGUMENT listing the names. */
OKV_API okv_status_t okv_scoring_parse(const char *name, okv_scoring_t *out_scoring);

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
                             bandwidth; 1 <= C <= ceil(fetch_ratio * K). A head reserves K + 2 slots (not
                             K + 1 + C) and gets the pool's free rest as spares, at most C - 1 more; its C per
                             step is at most its spares. Default false. docs/api.md "Fetch ratio". */
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
  /* Scoring (paper: "Predict"; docs/kernels.md "Scoring at long context"). */
  okv_dtype_t summary_dtype; /* block summaries: OKV_SUMMARY_DTYPE_AUTO (okv_runtime_config_init's default: the
                                KV dtype, which loses nothing: a min/max of stored keys is a stored value), F32,
                                F16 or BF16 (half the bytes; min rounded toward -inf and max toward +inf, so
                                scores stay upper bounds) */
  okv_scoring_t scoring;     /* OKV_SCORING_C4 (okv_runtime_config_init's default since 2026-12-04), OKV_SCORING_Q8,
                                OKV_SCORING_FLAT (the reference) or OKV_SCORING_TWO_LEVEL */
  uint32_t scoring_groups;   /* two-level: groups of OKV_SCORING_GROUP_BLOCKS blocks whose blocks are scored, per
                                KV head and step; 0 = K / 4 (at least 1). q8 and c4: candidates rescored beyond K
                                per KV head; 0 = max(ceil(K / 4), min(K, 8)), 32 at K = 128 (fewer when K + it
                                would pass OKV_TOPK_MAX; docs/kernels.md "Candidate margin"). At most K. Ignored by
                                flat scoring. okv_runtime_config() reads the value in effect: 0 where every block is
                                scored exactly (flat, DENSE, or where q8, c4 or two-level fall back to flat: q8 / c4
                                with no margin below OKV_TOPK_MAX, candidates or kept groups that cover every block of
                                max_context_tokens, or groups of 16 blocks that would straddle the HOST tier's
                                extents, as when max_context_tokens spans under 64 blocks, not a multiple of 16) */
  bool track_fetch_share;    /* OASIS / PROXY (ignored in DENSE and ONDEMAND): measure every step, on one layer (layer
                                (s - 1) mod n_layers in the runtime's s-th step), the attention share of the blocks
                                that layer's commit fetched in the step (selected by the previous step's job; a
                                peek_layer that committed them first leaves them to the step's measurement), for the
                                sequences of the step's batch (okv_step_stats_t.fetched_share). Costs a second pass
                                over that layer's keys in attention, one DEVICE->HOST read of the layer's
                                working-set masses (4 bytes per working-set block and query token) and a DEVICE
                                buffer of max_seqs x n_kv_heads x (K + 1 + C) x 16 bytes (also allocated with
                                fetch_ratio_auto, which measures on its own during the search's probes: docs/api.md
                                "Fetch ratio"). Default false */
  bool device_selection;     /* OASIS / PROXY (ignored in DENSE and ONDEMAND): selection and its commit run as
                                kernels (okv_hal_select_async, okv_hal_slot_commit_async) on a slot table per
                                (sequence, layer, KV head) kept in the DEVICE tier, instead of on the host's maps;
                                the host reads each layer's plan back to drive the transfer. Same decisions as host
                                selection (the slot a block lands in may differ). Not with fetch_ratio_auto (spare
                                slots move between heads) nor remote sequences (okv_runtime_seq_add_remote refuses
                                them). Costs 16 (K + 1 + C) + 16 ceil(max_blocks / 64) bytes of DEVICE memory per
                                (sequence, layer, KV head) for its slot table, plus 16 C + 16 for its plan and
                                result. okv_runtime_config() reads it false in DENSE and ONDEMAND. docs/api.md
                                "Selection on the device". Default false */
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
 * or everything while under the dense threshold). Writes the new id. Waits for the background
 * pipeline's queued jobs first (okv_runtime_step_end does not).
 * Errors: OUT_OF_MEMORY when the slot pool or the HOST tier cannot hold the
 * sequence's working set (nothing is left allocated), INVALID_ARGUMENT. */
OKV_API okv_status_t okv_runtime_seq_add(okv_runtime_t *runtime, const okv_prefill_t *prefill, uint32_t *out_seq_id);

/* Removes a sequence and frees its slots and host blocks, also while its
 * transfers are in flight (waits for the background pipeline's queued jobs). Errors: NOT_FOUND. */
OKV_API okv_status_t okv_runtime_seq_remove(okv_runtime_t *runtime, uint32_t seq_id);

/* Context length in tokens. Errors: NOT_FOUND. */
OKV_API okv_status_t okv_runtime_seq_length(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t *out_n_tokens);

/* Lists the logical blocks resident and readable for (seq, layer, kv_head),
 * ascending, active block included (unless its last write failed); writes up to
 * `capacity` and the count. For tests and analysis. With device selection the slot tables are the record
 * (docs/api.md "Selection on the device"): the call reads the layer's tables back when a selection changed
 * them since the last read (a device synchronization and read). Errors: NOT_FOUND, INVALID_ARGUMENT; with
 * device selection, a failed read's error (nothing changed: a later call reads again). */
OKV_API okv_status_t okv_runtime_seq_resident(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t layer,
                                              uint32_t kv_head, uint32_t *out_blocks, uint32_t capacity,
                                              uint32_t *out_count);

/* ---- Remote sequences (prefill/decode disaggregation; docs/api.md "Remote sequences") ----
 * A remote sequence's prefill KV stays authoritative at a KV source (a prefill node, a KV server):
 * the decode node admits it with the block summaries and an initial working set only, and the
 * runtime reads further prefill blocks through the source when a plan first needs them, into the
 * sequence's own HOST blocks, so each block crosses the network at most once per sequence. Tokens
 * decoded locally are stored locally. Paper arXiv 2608.08097, "PD disaggregation". */

/* A KV source: the authoritative store of a remote sequence's prefill blocks.
 * read_blocks(user, n, block_index, dst) copies n prefill blocks into host memory:
 *  - block_index [n]: distinct, ascending; block ((layer * n_kv_heads + kv_head) * n_prefill_blocks + block),
 *    n_prefill_blocks = ceil(n_tokens / 16) of the okv_remote_prefill_t that admitted the sequence;
 *  - dst [n]: HOST memory of okv_block_bytes(kv_dtype, head_dim) bytes each, owned by the runtime and valid
 *    for the call only; block i is written to dst[i] in the runtime's slot layout (K transposed
 *    [head_dim][16], then V [16][head_dim], in the runtime's kv_dtype), the same bytes the source would
 *    have handed over as initial_kv.
 * Returns OK when every block was written; any other status (UNAVAILABLE naming the peer for a lost
 * server, COPY_FAILED for a failed or short read, ...) leaves dst unspecified: the blocks stay not fetched
 * and the sequence is marked lost (okv_runtime_step_begin then refuses it).
 * Called from the runtime's background pipeline thread (OKV_MODE_OASIS, PROXY) or from the engine thread
 * inside okv_runtime_step_layer (OKV_MODE_ONDEMAND): one call per (sequence, layer job) with all that
 * sequence's missing blocks of the batch, never two calls at once from one runtime, and only between
 * okv_runtime_seq_add_remote and the return of okv_runtime_seq_remove (or okv_runtime_destroy) for that
 * sequence. It must be thread-safe against the caller's own use of `user`, must not call into the runtime,
 * and blocks the calling thread until done (the runtime times it: stats remote_seconds).
 * `name` (e.g. "kv server 127.0.0.1:7000") names the source in errors; NULL = "unnamed source". */
typedef struct okv_kv_source_t {
  void *user; /* borrowed: must stay valid while the sequence exists */
  okv_status_t (*read_blocks)(void *user, uint32_t n, const uint64_t *block_index, void *const *dst);
  const char *name; /* copied at okv_runtime_seq_add_remote */
} okv_kv_source_t;

/* Admission of a remote sequence (borrowed for the call; the runtime copies what it keeps).
 * L = n_layers, H = n_kv_heads, hd = head_dim, nb = ceil(n_tokens / 16) prefill blocks per KV head. */
typedef struct okv_remote_prefill_t {
  uint32_t n_tokens; /* prefill tokens, 1..max_context_tokens */
  /* f32 [L][H][nb][2][hd]: per block the elementwise min then max of its valid keys (as stored in kv_dtype,
   * widened to f32), exactly the summaries the runtime would compute itself; finite, min <= max. */
  const float *summaries;
  /* The initial working set, CSR over the heads u = layer * H + kv_head: initial_offsets [L*H + 1],
   * initial_offsets[0] == 0, non-decreasing; head u lists initial_blocks[initial_offsets[u] ..
   * initial_offsets[u+1]), strictly ascending, < nb, ending with the active block nb - 1, at most K + 1
   * (budget_blocks plus the active block). A sequence the runtime keeps whole (OKV_MODE_DENSE, or
   * nb <= dense_threshold_blocks) must list every block. */
  const uint32_t *initial_offsets;
  const uint32_t *initial_blocks;
  /* The listed blocks' bytes, in CSR order, okv_block_bytes(kv_dtype, head_dim) bytes each, in the slot
   * layout of okv_kv_source_t (the active block's bytes past its valid tokens are ignored). */
  const void *initial_kv;
  okv_kv_source_t source; /* the rest of the prefill blocks */
} okv_remote_prefill_t;

/* Adds a remote sequence: reserves its HOST extents for the whole context (as okv_runtime_seq_add does),
 * writes the listed blocks into the HOST tier (marked present) and the summaries of every block, maps the
 * listed blocks into slots and copies them HOST->DEVICE (the initial working set); every other prefill
 * block is read through prefill->source when a plan first needs it (docs/api.md "Remote sequences").
 * Writes the new id. Errors: INVALID_ARGUMENT (one line naming the field: prefill, n_tokens, summaries
 * (NULL, non-finite, min > max), initial_offsets, initial_blocks (order, range, count, missing active
 * block), initial_kv, source.read_blocks), OUT_OF_MEMORY (slot pool, HOST tier, max_seqs, host allocator:
 * nothing stays allocated), COPY_FAILED / INTERNAL (loading the initial working set failed: the sequence is
 * not added). Not thread-safe (the engine thread). */
OKV_API okv_status_t okv_runtime_seq_add_remote(okv_runtime_t *runtime, const okv_remote_prefill_t *prefill,
                                                uint32_t *out_seq_id);

/* Reads the committed K and V of tokens [first_token, first_token + n_tokens) of one layer of a sequence
 * from the HOST tier, converted to f32: k_out, v_out f32 [n_tokens][n_kv_heads][head_dim] (the layout of
 * okv_prefill_t's per-layer slice). Used to hand a dense prefill's KV to another runtime or to a KV server.
 * Waits for the background pipeline to finish its queued selections first. For a remote sequence only
 * prefill blocks already fetched (or admitted) are readable.
 * Errors: INVALID_ARGUMENT (NULL runtime or outputs with n_tokens > 0, layer >= n_layers, a range past the
 * layer's committed tokens), NOT_FOUND (no such sequence; a token in a remote prefill block not fetched
 * yet: nothing is written then). Not thread-safe (the engine thread; between steps or layers). */
OKV_API okv_status_t okv_runtime_seq_read_kv(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t layer,
                                             uint32_t first_token, uint32_t n_tokens, float *k_out, float *v_out);

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
 *     (committed), then its block summary, then writes it into the active block's DEVICE slot (the
 *     token only, by a kernel on the compute stream; the whole block from the HOST tier after a failed
 *     write);
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
 *  COPY_FAILED (the active block's whole-block copy failed twice), INTERNAL (a kernel, e.g. the token
 *    write, an event or a stream failed twice): the token is committed to the HOST tier, attention's
 *    output is not valid (it may have run before the failure was known); the slots the failed write covered
 *    stay unreadable and are repaired by the next append. The step may go on with layer l + 1. */
OKV_API okv_status_t okv_runtime_step_layer(okv_runtime_t *runtime, uint32_t layer, const float *k_new,
                                            const float *v_new, const float *q, const float *draft_kv, float *out);

/* Ends the step (every layer must have run); writes this step's stats when out_stats is not NULL.
 * Does not wait for the background pipeline: the step's last jobs (predict + select of its last layers)
 * may still run; layer l's job is waited for by layer l's next commit. A job's selection stats (hits,
 * misses, admitted, deferred, predict time, remote reads) land in the step that collects them: this one
 * when the job is done by now, else the step of its layer's next commit (docs/api.md "Stats").
 * Errors: INVALID_ARGUMENT (no step begun, layers missing). */
typedef struct okv_step_stats_t okv_step_stats_t;
OKV_API okv_status_t okv_runtime_step_end(okv_runtime_t *runtime, okv_step_stats_t *out_stats);

/* Waits, between steps, until the background pipeline is idle: every queued
 * layer job (predict, top-K, select; paper Sec. 4, "background pipeline per
 * layer") has run and every transfer it issued (HOST->DEVICE, the copy stream)
 * has completed. It maps, releases and reports nothing: a transfer that failed
 * is still absorbed and counted by its layer's next commit, exactly as without
 * the call (docs/api.md "Faults"), so the step after it returns the same
 * outputs and the same counts (hits, misses, admitted, failed_blocks, bytes);
 * only timing moves: what the next commit would have waited for is waited for
 * here, out of its stall_seconds. With fetch_ratio_auto the time from this call
 * to the next step is treated as a pause: no layer interval is measured across
 * it (docs/api.md "Fetch ratio"). For a caller that needs the host quiet
 * between steps (a benchmark that interleaves runtimes, a checkpoint); a
 * serving loop does not call it (its next step's layers wait only for their
 * own transfers). Otherwise a no-op in OKV_MODE_DENSE and OKV_MODE_ONDEMAND (no
 * pipeline). Engine thread, not during a step in any mode (not thread-safe
 * against a concurrent call on the runtime).
 * Errors: INVALID_ARGUMENT (NULL runtime, a step in progress). */
OKV_API okv_status_t okv_runtime_synchronize(okv_runtime_t *runtime);

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
  uint64_t hits;          /* predicted blocks already resident (no traffic) */
  uint64_t misses;        /* predicted blocks not resident */
  uint64_t admitted;      /* misses scheduled for transfer (<= C per KV head and sequence per job; a step may
                        collect two jobs of a layer: docs/api.md "Stats") */
  uint64_t deferred;      /* misses left for later steps by the cap */
  uint64_t evicted;       /* victims replaced */
  uint64_t failed_blocks; /* transfers that failed (blocks stay misses) */
  uint64_t blocks_moved;  /* blocks copied HOST->DEVICE */
  uint64_t bytes_moved[OKV_TIER_COUNT][OKV_TIER_COUNT]; /* [src][dst] */
  double stall_seconds;                                 /* foreground time waiting on transfers */
  uint64_t recall_hits; /* true next-step top-K blocks resident in time (track_recall) */
  uint64_t recall_total;
  uint64_t steps;             /* steps summed (1 for a step's stats) */
  uint64_t deferred_steps;    /* steps where the cap deferred at least one block (OASIS / PROXY: counted once per
                                 selecting step, in the step that collects its first job that deferred) */
  double bookkeeping_seconds; /* host time in the runtime's own code paths (mapping, selection, scheduling,
                                 plan building), foreground + background thread; excludes kernels, copies and
                                 waits on them (the device selection's one wait per layer on the predict stream
                                 too, since 2026-12-03) */
  double attention_seconds;   /* foreground time from enqueueing attention to its completion */
  double predict_seconds;     /* background time of the prediction: scoring and top-K from the first launch to the
                                 indices read back (both levels with two-level scoring); with device selection, to
                                 the return of the one wait that covers the top-K and the selection kernel behind
                                 it (the indices stay on the device); the recall pass excluded */
  uint64_t append_bytes;      /* bytes written to keep active blocks' slots current: 2 * head_dim * element
                                 bytes per token write (okv_hal_kv_write_tokens_async), a block per whole-block
                                 HOST->DEVICE copy after a failed write (not in bytes_moved, which counts fetched
                                 blocks only) */
  double append_seconds;      /* foreground time writing the real tokens' K/V into the HOST tier (data movement that
                                 a GPU does with its copy engine; not part of bookkeeping_seconds) */
  uint64_t pipeline_errors;   /* absorbed failures of a fetch batch or of a prediction (background pipeline, or the
                                 on-demand / recall pass): its blocks stayed misses, attention ran without them */
  uint64_t retried_writes;    /* active-block write batches that failed once and succeeded when retried */
  /* Remote sequences (okv_runtime_seq_add_remote; counted by the step that collects the job, as selections). */
  uint64_t remote_blocks;      /* prefill blocks read through a KV source into the HOST tier (each at most once
                                  per sequence) */
  uint64_t remote_bytes;       /* their bytes: remote_blocks x block bytes (also in bytes_moved[REMOTE][HOST]) */
  double remote_seconds;       /* time inside the sources' read_blocks calls (the background thread's, or the
                                  engine thread's in OKV_MODE_ONDEMAND) */
  double remote_stall_seconds; /* foreground time spent waiting while a read_blocks call ran: all of it in
                                  ONDEMAND, in OASIS / PROXY the overlap of a layer commit's wait for its job with
                                  the job's reads (not in stall_seconds) */
  /* Two-level scoring with track_recall: recall_hits / recall_total then count the exact (flat-scored) top-K of the
   * real query, and these count how much of it the two-level top-K of the same query finds. */
  uint64_t topk_agreement_hits;  /* blocks in both the two-level and the flat top-K of the real query */
  uint64_t topk_agreement_total; /* blocks in the flat top-K of the real query */
  /* What the fetches bought (track_fetch_share, or fetch_ratio_auto during its probes): for the blocks a layer's
   * commit fetched, on the layer measured, the real token's attention probability of the block (averaged over
   * its GQA group) times the working-set blocks of its KV head, summed (unitless: 1 per block = an average
   * resident block's share; at most the working-set blocks), and the number of blocks measured; blocks of
   * sequences outside the step's batch are not measured. fetched_share / fetched_share_blocks is the mean. A
   * failed read-back of the masses loses the step's measurement and counts in pipeline_errors. */
  double fetched_share;
  uint64_t fetched_share_blocks;
  /* Parts of bookkeeping_seconds (the same thread CPU clock), so that a change to one is measured in one run:
   * the background selection of a layer job's (sequence, KV head) pairs with its plan (capped eviction, slot
   * picks, copy pairs; OASIS / PROXY; with device selection its launch, the plan's read-back and check, not
   * the wait for the kernel), the layer-local sync's commit of a plan into the maps, and building attention's
   * working sets from the maps. The rest of bookkeeping_seconds is prediction set-up, the append's
   * bookkeeping (its slot-currency marks included), job submission and the on-demand / recall passes. */
  double select_seconds;
  double commit_seconds;
  double working_set_seconds;
  /* Three more parts of bookkeeping_seconds (same clock; since 2026-12-04): a layer job's start and the
   * prediction's host set-up (segment and run lists, launch descriptors; background, OASIS / PROXY), the
   * append's bookkeeping (capacity checks, slot placement, the token-write and summary lists, slot-currency
   * marks; not the HOST writes, which are append_seconds), and the hand-off of a layer to the background
   * pipeline (the device selection's commit check, queueing the job and waking the background thread). What
   * the six parts leave of bookkeeping_seconds is the on-demand and recall passes and the fetched-share
   * measurement. */
  double predict_setup_seconds;
  double append_bookkeeping_seconds;
  double handoff_seconds;
};

/* Cumulative stats over the runtime's life (layer = UINT32_MAX) or for one layer, since creation
 * or the last okv_runtime_stats_reset. Waits for the background pipeline and includes the jobs that no
 * step has collected yet (without collecting them: nothing is counted twice), so every job issued so far
 * counts. Not thread-safe (the engine thread). Errors: INVALID_ARGUMENT (NULL pointers, layer >= n_layers
 * and not UINT32_MAX). */
OKV_API okv_status_t okv_runtime_stats(const okv_runtime_t *runtime, uint32_t layer, okv_step_stats_t *out_stats);
/* Clears cumulative stats. Called between steps, it also waits for the background pipeline and drops the
 * selection stats of jobs issued before it that no step has collected yet, so the stats after it count
 * exactly the jobs issued after it (before 2026-12-03 those jobs counted in the step that collected them,
 * and a benchmark that reset after its warm-up counted up to one job per layer too many). Called during a
 * step (between okv_runtime_step_begin and okv_runtime_step_end) it clears only. Not thread-safe (the engine
 * thread). Errors: none (NULL is ignored). */
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
  uint32_t cap_ceiling_blocks; /* auto: the link ceiling of the latest step (0 until a step ended) */
  uint32_t cap_target_blocks;  /* auto: the controller's C for the next step (at most the link ceiling and the most
                                  spares a head holds) */
  double spare_blocks;   /* sparse modes: the heads' spare slots (owned beyond K + 1), mean over the live sequences'
                          heads; a head admits at most its spares per step. C_max for a fixed ratio; with auto,
                          1..C_max as DEVICE memory allows (docs/api.md "Fetch ratio"). 0 without sequences. */
  double marginal_share; /* auto: what the blocks by which the latest finished probe's two C differed drew, each, in
                            average resident blocks' attention shares (docs/api.md "Fetch ratio"); NaN before
                            such a probe or when it measured too few blocks; 0 for a fixed ratio */
} okv_cap_state_t;

/* Reads the cap state. Every field is 0 in OKV_MODE_DENSE and OKV_MODE_ONDEMAND,
 * which have no cap (fetch_ratio and fetch_ratio_auto are accepted there and
 * unused). Call from the engine thread between calls (not thread-safe against a
 * concurrent step). Errors: INVALID_ARGUMENT (NULL runtime or out_state). */
OKV_API okv_status_t okv_runtime_cap_state(const okv_runtime_t *runtime, okv_cap_state_t *out_state);

/* ---- Capacity ---- */

/* How many more sequences with a prefill of `n_tokens` tokens okv_runtime_seq_add
 * would accept now: bounded by free sequence entries (max_seqs), free DEVICE
 * slots (sparse modes reserve K + 1 + C slots per layer and KV head at
 * seq_add, K + 2 with fetch_ratio_auto, whose spare slots above that count as
 * free; OKV_MODE_DENSE needs one per block) and free HOST extents. With
 * fetch_ratio_auto it first waits for the background pipeline to finish its
 * queued jobs (their selection takes spares), as seq_add does, so spares that
 * planned transfers hold are not counted (docs/api.md "Fetch ratio"). An
 * estimate only in that HOST extents may fragment. Engine thread, between
 * steps (not thread-safe against a concurrent call on the runtime).
 * Errors: INVALID_ARGUMENT. */
OKV_API okv_status_t okv_runtime_seq_capacity(const okv_runtime_t *runtime, uint32_t n_tokens, uint32_t *out_n_seqs);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_OASISKV_H */
