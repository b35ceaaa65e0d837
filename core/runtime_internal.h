/* Internal structures and helpers of the OasisKV runtime, shared by its files:
 *   runtime_config.c  modes, config, stats
 *   host_store.c      the HOST-tier store (host_store.h)
 *   seq.c             sequences: add, remove, length, readable blocks, debug accessors
 *   pipeline.c        background pipeline: predict, select, transfer; layer-local commit
 *   step.c            the decode step: begin, layer, end, peek; working sets; on-demand fetch
 *   step_append.c     the append and its write-currency bookkeeping
 *   remote_seq.c      remote sequences: admission, reads through a KV source, read_kv
 *   runtime.c         create / destroy
 * Not installed. Exposed to tests/core so property tests can check the maps directly. */
#ifndef OASISKV_CORE_RUNTIME_INTERNAL_H
#define OASISKV_CORE_RUNTIME_INTERNAL_H

#include <pthread.h>

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "block_map.h"
#include "cap_ctl.h"
#include "host_store.h"
#include "select.h"
#include "oasiskv/oasiskv.h"

/* Config sentinels (runtime_config.c). */
#define OKV_DENSE_THRESHOLD_DEFAULT UINT32_MAX /* resolves to budget_blocks */
#define OKV_MAX_CONTEXT_LIMIT       (16u * 65536u)

/* HOST-tier blocks are handed out in extents of this many blocks (fewer when
 * max_context_tokens is small) so that the summaries of one (sequence, layer,
 * KV head) — summary index == host block index — stay in few contiguous runs,
 * which the scoring kernel reads one run per launch. */
#define OKV_CORE_EXTENT_BLOCKS 64u

/* What the per-step passes read of every head, mirrored out of okv_head_t into one array laid out like the
 * slot tables ([n_layers][max_seqs][n_kv_heads], rt->head_hot): a layer's batch reads it as consecutive lines
 * the hardware prefetcher streams in, where the heads' structs and extents sit in one allocation per
 * sequence and head and are cold by the time the background pipeline runs (the step streams the KV and the
 * summaries through the caches). Written only by okv_rt_head_note_extent / okv_rt_head_note_owned (and zeroed,
 * with its extents pointer set, when the sequence is reserved). */
typedef struct okv_head_hot_t {
  const uint32_t *extents; /* okv_head_t.extents (allocated once, at reserve): read past the leading run */
  uint32_t ext0;           /* extents[0] (0 when n_extents == 0) */
  uint32_t ext_run;        /* okv_head_t.ext_run */
  /* The trailing run: extents[tail_cur .. n_extents) are contiguous from tail_ext = extents[tail_cur], and
   * tail_cur is the least such index (0 and 0 when n_extents == 0). With the leading run it covers a head that
   * took its prefill's extents in one piece and its decode's in another without reading extents[]. */
  uint32_t tail_cur, tail_ext;
  uint32_t owned_base; /* okv_head_t.owned_base */
  int32_t owned_step;  /* okv_head_t.owned_step */
  uint32_t n_owned;    /* okv_head_t.n_owned */
} okv_head_hot_t;

typedef struct okv_head_t {
  /* First, in the struct's first cache line (heads[] is 64-byte aligned, and a head a whole number of lines):
   * what the append reads of every head each step, the map's leading fields (n_blocks, cap_blocks,
   * needs_repair and the active block's mirror). The per-step passes read the rest from the hot mirrors. */
  _Alignas(64) okv_block_map_t map;
  uint32_t *extents; /* [cap_extents] host extent of logical blocks [i*E, (i+1)*E) */
  uint32_t n_extents, cap_extents;
  /* extents[0 .. ext_run) are contiguous (extents[i] == extents[0] + i): the scoring launches list a head's
   * first ext_run extents as one run without reading them. Kept by whoever takes an extent
   * (okv_rt_head_note_extent). */
  uint32_t ext_run;
  uint32_t *owned; /* sparse modes: the slots this head owns, slots_min_per_head .. slots_per_head */
  uint32_t n_owned;
  /* owned[j] == owned_base + owned_step * j for every j < n_owned when owned_step is +1 or -1 (the pool hands
   * out consecutive slots: the usual case), 0 otherwise; okv_rt_owned_slot reads owned[] only then. Kept by
   * whoever changes owned (okv_rt_head_note_owned). */
  int32_t owned_step;
  uint32_t owned_base;
  okv_head_hot_t *hot; /* its mirror in rt->head_hot (set when the sequence is reserved) */
  /* Remote sequences: bit b set = prefill block b (< seq->n_remote_blocks) is in the HOST tier (admitted or
   * read through the source). NULL for a local sequence: every block is present. Written by the thread that
   * reads the source (the worker for its layer's job, the engine thread in ONDEMAND). */
  uint64_t *present;
} okv_head_t;

typedef struct okv_seq_t {
  bool live;
  uint32_t id;
  uint32_t *n_tokens; /* [n_layers] tokens committed per layer */
  okv_head_t *heads;  /* [n_layers * n_kv_heads], layer-major; 64-byte aligned inside heads_mem */
  void *heads_mem;    /* the allocation of heads[] (host allocator) */
  /* Remote sequences (remote_seq.c): prefill blocks [0, n_remote_blocks) of every head are authoritative at
   * `source`. `lost` is the first failed read (then okv_runtime_step_begin refuses the sequence); it is
   * written by the thread that reads the source and read by the engine thread after the jobs drained.
   * `lost_flag` (okv_seq_is_lost) says the same without the drain: the foreground reads it mid-step while the
   * background thread may be setting it. */
  bool remote;
  uint32_t n_remote_blocks;
  okv_kv_source_t source; /* source.name points at source_name */
  char *source_name;
  okv_status_t lost;
  int lost_flag; /* atomic: 1 once `lost` is set */
} okv_seq_t;

/* Whether a read through the sequence's KV source failed (any thread, any time). */
static inline bool okv_seq_is_lost(const okv_seq_t *s) { return __atomic_load_n(&s->lost_flag, __ATOMIC_ACQUIRE) != 0; }

typedef struct okv_plan_entry_t {
  uint32_t seq_index, seq_id, kv_head, block, slot, victim;
  uint32_t table_slot, table_victim_slot; /* device selection: the plan's slot and victim_slot (table entries) */
} okv_plan_entry_t;

/* One block to read through a KV source: its source index and its plan entry. */
typedef struct okv_rt_read_t {
  uint64_t index;
  uint32_t entry;
} okv_rt_read_t;

/* Host scratch for one scoring + top-K pass. */
typedef struct okv_predict_ctx_t {
  okv_hal_buffer_t *q;      /* DEVICE f32 staging for queries */
  okv_hal_buffer_t *scores; /* DEVICE f32 [max_seqs * n_kv_heads][max_blocks] */
  okv_hal_buffer_t *topk;   /* DEVICE u32 [max_seqs * n_kv_heads][K] */
  okv_hal_buffer_t *counts; /* DEVICE u32 [max_seqs * n_kv_heads] */
  uint64_t *seg_summary_first, *seg_score_first;
  uint32_t *seg_n, *seg_cursor, *topk_n, *excl_offsets, *excl_blocks;
  uint32_t *host_topk, *host_counts;
  uint64_t *sel_scratch; /* selection's LRU keys, slots_per_head + 1 */
  uint32_t *sel_admitted, *sel_victims;
  okv_seq_t **seqs; /* [max_seqs] segment owners (NULL = skip) */
  /* The final top-K stays on the device, unread and not waited for (the worker's context with device selection:
   * the selection kernel reads it behind it on the same stream, and its wait covers both). */
  bool topk_on_device;
  /* Two-level scoring (core/scoring.c): ranges of the second level and the candidates' block ids. */
  uint32_t *r_seg, *r_n;         /* [n_seg * groups_kept] */
  uint64_t *r_sfirst, *r_cfirst; /* [n_seg * groups_kept] */
  uint32_t *cand_block;          /* [n_seg * groups_kept * unit_blocks] index map of the candidate scores */
  uint64_t *cand_bits;           /* [max_blocks / 64 + 1] kept units of one head, to list them in ascending order */
  /* q8 scoring: the first pass's candidates stay on the device (ascending block ids, the second pass's lists and
   * its top-K's index map), and the runs of contiguous HOST extents that map them to summaries. */
  okv_hal_buffer_t *cand;        /* DEVICE u32 [n_seg * groups_kept] */
  okv_hal_buffer_t *cand_scores; /* DEVICE f32 [n_seg * groups_kept]: the exact pass's scores, in a buffer of their own
                                  * so that no head's second pass writes where another head's first pass reads */
  uint32_t *run_offsets;         /* [n_seg + 1] */
  uint32_t *run_first, *run_n;   /* [n_seg * extents per head] */
  uint64_t *run_sfirst;          /* [n_seg * extents per head] */
  uint32_t *run_seg;             /* [n_seg * extents per head] the runs' segments (the 8-bit pass's ranges) */
  uint64_t *run_score_first;     /* [n_seg * extents per head] the runs' first score elements (the same) */
  uint64_t *cand_score_first;    /* [n_seg] the second pass's score offsets (u * groups_kept) */
  /* Recall pass with two-level scoring (track_recall): the two-level top-K of the real query, kept while the
   * flat (reference) pass overwrites host_topk, and a bitmap of one head's flat top-K. */
  uint32_t *agree_topk, *agree_counts; /* [n_seg * K], [n_seg] */
  uint64_t *agree_bits;                /* [max_blocks / 64 + 1], all zero between uses */
  /* Reads through a KV source (remote_seq.c), [n_kv_heads * K] (one sequence's plan entries at most). */
  okv_rt_read_t *rd;
  uint64_t *rd_index;
  void **rd_dst;
} okv_predict_ctx_t;

enum { OKV_JOB_IDLE = 0, OKV_JOB_QUEUED = 1, OKV_JOB_DONE = 2 };

typedef struct okv_layer_job_t {
  int state; /* guarded by runtime->mutex */
  uint32_t step;
  uint32_t n_seqs;
  uint32_t *seq_index, *seq_id; /* [max_seqs] */
  uint32_t n_query_tokens, t_begin, t_end;
  float *q_host; /* [max_seqs][4][n_q_heads][head_dim] */
  /* Results of the background pipeline (read by the foreground once DONE). */
  uint32_t cap;           /* C this job admits at most per head (rt->cap_blocks, or the self-tuning choice) */
  okv_plan_entry_t *plan; /* [max_seqs * n_kv_heads * C]; device selection writes it only for the fetched-share
                             measurement (rt->fg_mass), its other readers use seq_moved / seq_evicted */
  uint32_t n_plan;
  uint32_t n_fresh; /* plan[0..n_fresh) were mapped by the latest commit (the fetched-share measurement) */
  bool uncommitted; /* submitted, and no commit has taken its plan yet (foreground only) */
  bool fresh_ok;    /* the latest commit that took a job: its prediction and transfer succeeded */
  okv_block_copy_t *pairs;
  bool event_recorded, event_waited;
  bool start_recorded;       /* copy_start_events[layer] precedes this plan's copy (auto cap) */
  okv_status_t event_status; /* cached result of waiting on the event */
  okv_status_t error;        /* a predict-stage failure (no plan) */
  okv_step_stats_t stats;    /* selection stats of the job */
  /* Device selection, valid while n_plan > 0: batch entry s's plan entries (seq_moved[s]) and victims among them
   * (seq_evicted[s]), and the change of KV head h's expected table signature once they land (sig_delta[s * H +
   * h]), so that the commit takes a sequence's plan in O(KV heads), not per entry. */
  uint32_t *seq_moved, *seq_evicted; /* [max_seqs] */
  uint64_t *sig_delta;               /* [max_seqs * n_kv_heads] */
  /* Device selection (device_select.c): batch entry s's selection ran on its tables (plan and result in
   * rt->sel_out at the job's layer, read back): the layer's commit applies it there too. */
  uint8_t *sel_ran;            /* [max_seqs] */
  bool sel_undo;               /* the plan's transfer was never issued: the commit undoes the tables' admissions */
  bool stats_pending;          /* stats not yet added to a step (foreground only; docs/api.md "Stats") */
  double remote_t0, remote_t1; /* wall span of the job's reads through KV sources (remote_t1 > 0: some) */
} okv_layer_job_t;

struct okv_runtime_t {
  okv_runtime_config_t cfg;
  okv_allocator_t alloc;
  okv_hal_device_t *device;
  uint64_t block_bytes, summary_bytes;
  uint32_t max_blocks;     /* ceil(max_context_tokens / 16) per head */
  uint32_t extent_blocks;  /* E */
  uint32_t cap_blocks;     /* C = ceil(fetch_ratio * K) */
  uint32_t slots_per_head; /* sparse modes: K + 1 + C, the most slots a head owns */
  /* Sparse modes: the slots a head is guaranteed, K + 1 + C for a fixed ratio. With the self-tuning cap,
   * K + 2 (C = 1, the controller's floor): a head owns K + 2 .. K + 1 + C_max slots, the spares above K + 2
   * spread over the heads from what no further sequence fits into (okv_rt_spares_*), and its cap per step
   * is its spares. So the self-tuning cap never costs a sequence that a cap of 1 would have admitted. */
  uint32_t slots_min_per_head;
  uint32_t group_size;

  okv_host_store_t host; /* HOST tier: the authoritative full KV */

  /* DEVICE tier */
  okv_hal_buffer_t *summaries; /* cfg.summary_dtype, one per host block */
  /* Two-level scoring: one summary per group of OKV_SCORING_GROUP_BLOCKS host blocks (host group g = host
   * blocks 16g..16g+15, one head's consecutive logical blocks since extents hold multiples of 16), NULL in flat. */
  okv_hal_buffer_t *group_summaries;
  uint32_t groups_kept;   /* two-level: groups scored in full per head; q8: candidates per head; 0 = flat */
  uint32_t unit_blocks;   /* blocks per unit of group_summaries: OKV_SCORING_GROUP_BLOCKS (two-level), 1 (q8, c4) */
  okv_dtype_t unit_dtype; /* of group_summaries: cfg.summary_dtype (two-level), OKV_DTYPE_Q8 / _C4 (q8 / c4) */
  uint32_t *ones;         /* q8: [max_seqs * n_kv_heads] of 1 (src_n of the appended blocks' re-encode) */
  okv_hal_buffer_t *pool; /* slots */
  uint64_t n_slots;
  uint32_t *free_slots; /* global stack */
  uint64_t n_free_slots;
  okv_hal_buffer_t *fg_inflight, *fg_out;
  /* Fetched-share measurement (cfg.track_fetch_share, fetch_ratio_auto): attention's per-block mass of the
   * measured layer, read back, and a sequence's place in the step's batch. */
  okv_hal_buffer_t *fg_mass;
  float *mass_host;         /* [ws_capacity * 4] */
  uint32_t *mass_seq_pos;   /* [max_seqs], UINT32_MAX outside a measurement */
  uint32_t share_layer;     /* the layer the step measures; UINT32_MAX: none */
  bool share_measured;      /* the step's measurement was taken (0 blocks fetched counts as taken) */
  okv_predict_ctx_t fg, wk; /* foreground (recall, ondemand) and worker scratch */
  bool fg_predict;          /* fg scoring buffers allocated */

  okv_hal_stream_t *compute, *predict, *copy;
  okv_hal_event_t **layer_events;
  /* Self-tuning cap (cfg.fetch_ratio_auto): copy-start events per layer and the running estimates. */
  okv_hal_event_t **copy_start_events; /* [n_layers], auto only */
  double link_bps, layer_interval_s;   /* 0 = not measured yet */
  double *last_use_s;                  /* [n_layers] wall time of the layer's latest step_layer */
  okv_cap_ctl_t cap_ctl;               /* the search over C below the link ceiling (cap_ctl.h) */
  double step_begin_s;                 /* wall time of the step's okv_runtime_step_begin */
  uint32_t cap_ceiling_last;           /* link ceiling of the latest step_end (0: none yet); the controller got it
                                          at most spares_max */
  uint32_t spares_max;                 /* the most spares a head holds after the latest spread (0: no head) */
  okv_hal_event_t *append_event;

  /* Foreground scratch */
  okv_head_hot_t *head_hot; /* [n_layers][max_seqs][n_kv_heads]: the heads' hot mirrors (okv_head_hot_t) */
  uint32_t *ws_offsets, *ws_slots;
  uint8_t *ws_valid;
  uint64_t ws_capacity;
  okv_block_copy_t *append_pairs; /* [wr_capacity] whole-block copies of active blocks (after a failed write) and
                                     repairs */
  okv_block_map_t **wr_map;       /* [wr_capacity] target of each pair (slot currency on completion) */
  uint32_t *wr_block;
  uint8_t *wr_tokens;
  uint32_t wr_capacity; /* max_seqs * n_kv_heads + repair room */
  uint64_t *tok_block;  /* [max_seqs * n_kv_heads] HOST block of each appended token */
  /* Token writes into active slots (okv_hal_kv_write_tokens_async), [max_seqs * n_kv_heads] each. */
  uint64_t *tw_slot;
  uint8_t *tw_pos;
  float *tw_keys, *tw_values; /* [max_seqs * n_kv_heads][head_dim]: rows gathered when not in k_new's order */
  okv_block_map_t **tw_map;
  uint32_t *tw_block;
  uint32_t *tw_src;                         /* k_new / v_new row of each token write */
  const float *app_tw_keys, *app_tw_values; /* the batch's token-write rows: k_new / v_new, or tw_keys / _values */
  /* The layer's append batch (step_append.c): entry counts, the keys of its summary updates, and whether
   * it was enqueued without a wait (okv_rt_layer_append_finish checks it after attention). */
  uint32_t app_n_tw, app_n_cp, app_n_app, app_n_reb;
  const float *app_keys;
  bool app_pending;
  uint64_t *reb_index; /* [reb_capacity] summaries rebuilt from the HOST tier (repairs) */
  uint8_t *reb_valid;
  okv_block_map_t **reb_map;
  uint32_t *reb_block;
  uint32_t reb_capacity;
  uint64_t *append_index;
  uint8_t *append_first;
  float *append_keys;
  uint32_t *append_src;       /* [max_seqs * n_kv_heads] k_new row of each summary update */
  uint64_t *append_gindex;    /* two-level: group summary of each update */
  uint8_t *append_gfirst;     /* two-level: 1 = the group's first token */
  okv_block_copy_t *od_pairs; /* ondemand fetch pairs */
  okv_plan_entry_t *od_plan;

  okv_seq_t *seqs; /* [max_seqs] */
  uint32_t next_id;

  /* Step state */
  bool in_step;
  uint32_t step; /* current step number, from 1 */
  uint32_t step_n_seqs, step_T, next_layer;
  uint32_t *step_seq_index, *step_seq_id;
  okv_seq_t **batch_seqs; /* [max_seqs] scratch for a batch's sequences */

  /* Stats */
  okv_step_stats_t *layer_step; /* [n_layers] this step */
  okv_step_stats_t *layer_cum;  /* [n_layers] */
  okv_step_stats_t total_cum;
  /* deferred_steps of the pipeline modes: selecting steps whose jobs deferred, each counted once when its
   * first such job is collected (okv_rt_job_collect); this step's count, and the latest step counted. */
  uint64_t step_deferred_steps;
  uint32_t deferred_step_mark;

  /* Device selection (cfg.device_selection in OASIS / PROXY; device_select.c, docs/api.md "Selection on the
   * device"): one slot table per (sequence, layer, KV head) in the DEVICE tier, table j <-> the head's owned[j].
   * The tables hold the selection's state (residency, last-selected steps, free slots) and are the record;
   * the host maps lag them (sel_lag below) but for each head's active block, and a new active block is placed
   * on the tables themselves (okv_rt_dsel_activate). */
  bool dev_sel;
  uint32_t sel_R, sel_W;        /* slots (K + 1 + C) and bitmap words of a table */
  uint64_t sel_table_bytes;     /* okv_slot_table_bytes(sel_R, sel_W) */
  okv_hal_buffer_t *sel_tables; /* DEVICE [n_layers][max_seqs][n_kv_heads] tables */
  /* DEVICE u32, per layer the results [max_seqs * n_kv_heads][OKV_SELECT_RESULT_U32S] then the plans [max_seqs *
   * n_kv_heads][C][OKV_SELECT_PLAN_U32S], so that a job reads both back in one call (sel_out_host alike). */
  okv_hal_buffer_t *sel_out;
  uint32_t *sel_slot_index;       /* [n_slots] j of a pool slot in its head's owned[] */
  uint32_t *sel_tab_host;         /* foreground: n_kv_heads tables' words (rewrite, LRU refresh) */
  uint8_t *sel_landed;            /* foreground: [max_seqs * n_kv_heads] */
  uint32_t *sel_active, *sel_cap; /* worker: [max_seqs * n_kv_heads] */
  uint32_t *sel_out_host;         /* worker: a job's results and plans read back (one layer's part) */
  uint8_t *sel_dirty;             /* [n_layers] the layer's tables may differ from the maps (a failed device operation):
                         rewritten from the maps at the layer's next commit; the worker does not select on them */
  /* The tables are authoritative for residency: a commit applies a plan to them only, and the maps of a
   * (layer, sequence) lag (sel_lag) until the host reads them, when okv_rt_dsel_sync rebuilds them from the
   * tables. sel_sig: each table's signature as the host expects it (okv_slot_table_sig_term), from the tables
   * it wrote and the plans it committed; a selection that finds another, or a rebuild that reads another,
   * treats the table as corrupt. */
  uint8_t *sel_lag;  /* [n_layers][max_seqs] */
  uint64_t *sel_sig; /* [n_layers][max_seqs][n_kv_heads], like the tables */
  /* Append: new active blocks placed on the tables' images (okv_rt_dsel_activate) without rebuilding the maps:
   * per step entry i, whether it was (act_done[i]) and the pool slot of each KV head's new block. */
  uint8_t *act_done;     /* [max_seqs] */
  uint32_t *act_slot;    /* [max_seqs * n_kv_heads] */
  uint32_t *act_evicted; /* [max_seqs] blocks the placement evicted (counted in the layer's evicted) */
  uint64_t *act_sig;     /* [n_kv_heads] scratch: the tables' signatures after the placement */
  /* The commit kernel is not waited for: commit_event, recorded behind it, is checked once attention ran
   * (okv_rt_dsel_commit_finish); commit_pending: a commit of layer commit_layer awaits that check. */
  okv_hal_event_t *commit_event;
  bool commit_pending;
  uint32_t commit_layer;
  /* Attention reads the working sets from the tables (okv_attention_desc_t.tables): the pool slot of every
   * table entry, and per layer whether an append changed the write currency of a block other than the
   * active one (a failed batch, a repair copy), so that the tables' token counts must follow the maps
   * before attention reads them (okv_rt_dsel_ws_ready). */
  okv_hal_buffer_t *sel_slot_map;           /* DEVICE u32 [n_layers][max_seqs][n_kv_heads][sel_R], like the tables */
  uint32_t *sel_slot_map_host;              /* foreground: n_kv_heads rows of it (rewrite) */
  uint8_t *sel_tok_stale;                   /* [n_layers] */
  uint32_t *ws_table_index, *ws_seq_tokens; /* foreground: [max_seqs], attention's table mode */

  /* Background pipeline */
  okv_layer_job_t *jobs; /* [n_layers] */
  uint32_t *queue;       /* ring of layers */
  uint32_t q_head, q_len;
  bool stop, worker_started;
  pthread_t worker;
  pthread_mutex_t mutex;
  pthread_cond_t work_cv, done_cv;
};

/* ---- Helpers shared by the runtime's files (not API) ---- */

#define OKV_RT_INVALID(...)   okv_status_make(OKV_STATUS_INVALID_ARGUMENT, __VA_ARGS__)
#define OKV_RT_HOST_OOM(what) okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "runtime: host allocator failed for %s", what)

/* Wall clock (stalls, attention). */
static inline double okv_rt_wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Clock of bookkeeping intervals: the calling thread's CPU time, so that time
 * the thread spends preempted (the kernels' own threads, other processes) does
 * not count as runtime overhead. On this VM a read is a system call of about
 * 1.3 us (the vDSO wall clock costs 30 ns but, with kernels running on every
 * core during the background prediction, charged preemption to bookkeeping:
 * 250 us per KV head at 128K); the runtime reads it about 16 times per
 * layer-step (adjacent intervals share a read), which bounds what
 * bookkeeping_ns_per_head can show. */
static inline double okv_rt_bk_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void okv_rt_free(const okv_allocator_t *a, void *p) {
  if (p != NULL) okv_free(a, p);
}

static inline uint32_t ceil_div_u32(uint32_t a, uint32_t b) { return (a + b - 1u) / b; }
static inline uint32_t n_blocks_of(uint32_t n_tokens) { return ceil_div_u32(n_tokens, OKV_BLOCK_TOKENS); }

static inline bool is_sparse_mode(const okv_runtime_t *rt) { return rt->cfg.mode != OKV_MODE_DENSE; }
/* The self-tuning cap's spare slots are in use: heads reserve K + 2 and own up to slots_per_head. */
static inline bool has_spares(const okv_runtime_t *rt) {
  return is_sparse_mode(rt) && rt->slots_min_per_head < rt->slots_per_head;
}
static inline bool has_pipeline(const okv_runtime_t *rt) {
  return rt->cfg.mode == OKV_MODE_OASIS || rt->cfg.mode == OKV_MODE_PROXY;
}

/* Records that extent n - 1 of head hd (n = hd->n_extents) was just taken: the leading contiguous run grows
 * when it reached it and the new extent follows it. */
static inline void okv_rt_head_note_extent(okv_head_t *hd) {
  uint32_t n = hd->n_extents;
  if (n == 0) {
    hd->ext_run = 0;
  } else if (hd->ext_run == n - 1u && hd->extents[n - 1u] == hd->extents[0] + (n - 1u)) {
    hd->ext_run = n;
  }
  okv_head_hot_t *k = hd->hot;
  k->extents = hd->extents;
  k->ext0 = n > 0 ? hd->extents[0] : 0;
  k->ext_run = hd->ext_run;
  /* Extents are only ever appended one at a time, each noted here: the trailing run grows or starts anew. */
  if (n == 0) {
    k->tail_cur = k->tail_ext = 0;
  } else if (n == 1 || hd->extents[n - 1u] != hd->extents[n - 2u] + 1u) {
    k->tail_cur = n - 1u;
    k->tail_ext = hd->extents[n - 1u];
  }
}

/* The run of contiguous extents of a head from extents[cur] (cur < need <= n_extents), from its hot mirror: its
 * length, at most need - cur, and its first extent in *start; the leading and trailing runs without reading
 * extents[] (a middle run stops before the trailing one: that one is maximal). */
static inline uint32_t okv_rt_hot_run(const okv_head_hot_t *k, uint32_t cur, uint32_t need, uint32_t *start) {
  if (cur < k->ext_run) {
    *start = k->ext0 + cur;
    return (k->ext_run < need ? k->ext_run : need) - cur;
  }
  if (cur >= k->tail_cur) { /* need <= n_extents: the trailing run reaches it */
    *start = k->tail_ext + (cur - k->tail_cur);
    return need - cur;
  }
  const uint32_t first = k->extents[cur];
  uint32_t run = 1;
  while (cur + run < need && k->extents[cur + run] == first + run) run++;
  *start = first;
  return run;
}

/* Recomputes owned_step / owned_base after hd->owned changed. */
static inline void okv_rt_head_note_owned(okv_head_t *hd) {
  hd->owned_step = 0;
  hd->owned_base = hd->n_owned > 0 ? hd->owned[0] : 0;
  int64_t step = hd->n_owned > 1 ? (int64_t)hd->owned[1] - (int64_t)hd->owned[0] : 1;
  bool regular = hd->n_owned > 0 && (step == 1 || step == -1);
  for (uint32_t j = 2; regular && j < hd->n_owned; j++)
    regular = (int64_t)hd->owned[j] == (int64_t)hd->owned[0] + step * (int64_t)j;
  if (regular) hd->owned_step = (int32_t)step;
  hd->hot->owned_base = hd->owned_base;
  hd->hot->owned_step = hd->owned_step;
  hd->hot->n_owned = hd->n_owned;
}

/* The hot mirror (okv_head_hot_t) of KV head h of layer `layer` of rt->seqs[seq_index]. */
static inline const okv_head_hot_t *head_hot(const okv_runtime_t *rt, uint32_t seq_index, uint32_t layer, uint32_t h) {
  return &rt->head_hot[((size_t)layer * rt->cfg.max_seqs + seq_index) * rt->cfg.n_kv_heads + h];
}

/* Requests every cache line of [p, p + bytes) (a prefetch each: the misses overlap). */
static inline void okv_rt_prefetch_range(const void *p, size_t bytes) {
  const char *end = (const char *)p + bytes;
  for (const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63); c < end; c += 64) __builtin_prefetch(c);
}

/* The head's owned slot j (j < n_owned) from its hot mirror; `hd` is read only for irregular owned lists. */
static inline uint32_t okv_rt_owned_slot_hot(const okv_head_hot_t *k, const okv_head_t *hd, uint32_t j) {
  if (k->owned_step != 0) return (uint32_t)((int64_t)k->owned_base + (int64_t)k->owned_step * (int64_t)j);
  return hd->owned[j];
}
/* The head's owned slot j (j < n_owned). */
static inline uint32_t okv_rt_owned_slot(const okv_head_t *hd, uint32_t j) {
  return okv_rt_owned_slot_hot(hd->hot, hd, j);
}

/* The head whose map is `m`. */
static inline const okv_head_t *head_of_map(const okv_block_map_t *m) {
  return (const okv_head_t *)(const void *)((const char *)m - offsetof(okv_head_t, map));
}

static inline okv_head_t *seq_head(const okv_runtime_t *rt, const okv_seq_t *s, uint32_t layer, uint32_t h) {
  return &s->heads[(size_t)layer * rt->cfg.n_kv_heads + h];
}

static inline bool seq_layer_sparse(const okv_runtime_t *rt, const okv_seq_t *s, uint32_t layer) {
  return is_sparse_mode(rt) && n_blocks_of(s->n_tokens[layer]) > rt->cfg.dense_threshold_blocks;
}

/* host_block_of from the head's hot mirror alone (block < n_extents * E): the two runs without a division,
 * other blocks through the mirror's extents pointer. */
static inline uint64_t host_block_hot(const okv_runtime_t *rt, const okv_head_hot_t *k, uint32_t block) {
  const uint32_t E = rt->host.extent_blocks; /* no division on the two runs' paths (ext_run * E <= max_blocks) */
  if (block < k->ext_run * E) return (uint64_t)k->ext0 * E + block;
  const uint32_t tail_first = k->tail_cur * E;
  if (block >= tail_first) return (uint64_t)k->tail_ext * E + (block - tail_first);
  return okv_host_store_block(&rt->host, k->extents, block);
}

/* The HOST block of a head's logical `block` (< n_extents * E). */
static inline uint64_t host_block_of(const okv_runtime_t *rt, const okv_head_t *h, uint32_t block) {
  return host_block_hot(rt, h->hot, block);
}

/* Sequence i of the current step, NULL when it was removed during the step. */
static inline okv_seq_t *step_seq(const okv_runtime_t *rt, uint32_t i) {
  okv_seq_t *s = &rt->seqs[rt->step_seq_index[i]];
  return s->live && s->id == rt->step_seq_id[i] ? s : NULL;
}

/* Allocates `count` zeroed elements into `ptr` from rt->alloc; on failure sets
 * `st` to OUT_OF_MEMORY naming the array and jumps to `fail`. */
#define ALLOC_ARR(ptr, count)                                                    \
  do {                                                                           \
    size_t n_alloc_ = (size_t)(count);                                           \
    (ptr) = okv_calloc(&rt->alloc, n_alloc_ > 0 ? n_alloc_ : 1u, sizeof *(ptr)); \
    if ((ptr) == NULL) {                                                         \
      st = OKV_RT_HOST_OOM(#ptr);                                                \
      goto fail;                                                                 \
    }                                                                            \
  } while (0)

/* device_select.c (cfg.device_selection) */
okv_status_t okv_rt_dsel_init(okv_runtime_t *rt);
void okv_rt_dsel_free(okv_runtime_t *rt);
/* Writes the tables of `seq`'s layers [l0, l1) from its maps (admission, after a new active block, repair). */
okv_status_t okv_rt_dsel_write(okv_runtime_t *rt, const okv_seq_t *seq, uint32_t l0, uint32_t l1);
/* Rebuilds the maps of (seq, layer) from its tables when they lag (every read of the maps beyond the active
 * block goes through it): residency, free slots, last-selected steps; token counts stay the host's for blocks
 * the map held in the same slot (the active one included), a block admitted since takes the commit's. A
 * table whose signature or structure is not what the host expects, or a failed
 * read, leaves the head with its active block only (always safe: the host tier is authoritative), marks the
 * layer dirty and counts a pipeline error. The maps are usable afterwards in every case. */
void okv_rt_dsel_sync(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer);
/* Places block `block` (the new active block of every KV head of `seq` at `layer`, its first token about to be
 * appended) on the slot tables themselves, as the append does on current maps: the previous active block is
 * stamped with this step and its write count, and with `sparse` the least recently selected blocks beyond the
 * budget are evicted (ties: lowest block); the new block takes the slot of the last one evicted, else the
 * highest free table entry. The tables are read, checked against their expected signatures and written back
 * whole; the maps are left behind (sel_lag) but for the new block, which the caller maps into
 * rt->act_slot[i * H + h]. Returns false where the caller must take the map path: a dirty layer, or (each
 * counted in pipeline_errors) a table that is not the expected one or has no free entry, a failed read or a
 * failed write-back (after one that landed in part, the map path's rebuild cuts what the expected signatures
 * do not describe; with current maps the tables are rewritten from them). */
bool okv_rt_dsel_activate(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer, uint32_t block, bool sparse, uint32_t i);
/* The same for a reader that may fail instead (`cut` false: a failed read returns its error, the maps still
 * lag and nothing changed; `cut` true: as okv_rt_dsel_sync, OK always). */
okv_status_t okv_rt_dsel_sync_or_fail(okv_runtime_t *rt, okv_seq_t *seq, uint32_t layer, bool cut);
/* The commit of batch entry s's landed plan on the host's side: its heads' expected signatures follow the tables
 * (job->sig_delta). */
void okv_rt_dsel_sig_commit(okv_runtime_t *rt, uint32_t layer, const okv_layer_job_t *job, uint32_t s);
/* The job's selection on the device: fills job->plan / pairs and the stats; *t_ready: the wall time its wait on
 * the predict stream returned (0 when it did not get there); *wait_s: the thread CPU time (okv_rt_bk_s) spent
 * inside that wait, which is not bookkeeping (stats' bookkeeping_seconds exclude waits on kernels). Returns the
 * first error (then the layer is marked dirty); a failure of the prediction's unwaited top-K reports here. */
okv_status_t okv_rt_dsel_select(okv_runtime_t *rt, uint32_t layer, okv_layer_job_t *job, okv_predict_ctx_t *ctx,
                                double *t_ready, double *wait_s);
/* The layer-local commit on the tables (landed: the layer's transfer ran), or their rewrite when dirty. The
 * commit kernel is enqueued on the compute stream, not waited for: okv_rt_dsel_commit_finish checks it. */
void okv_rt_dsel_commit(okv_runtime_t *rt, uint32_t layer, okv_layer_job_t *job, bool landed);
/* Checks the last commit kernel if not checked yet (its event: done once attention of its layer ran). A
 * failure is absorbed: counted in the layer's pipeline_errors, the layer's maps rebuilt and its tables
 * rewritten. Returns true when that happened, so the caller runs attention again over what is readable now. */
bool okv_rt_dsel_commit_finish(okv_runtime_t *rt);
/* Whether attention of `layer` may read its working sets from the tables (not dirty; token counts brought
 * up to date from the maps first when an append changed them: LRU refresh and rewrite of every live
 * sequence's tables of the layer, a failure of which marks the layer dirty and answers false). */
bool okv_rt_dsel_ws_ready(okv_runtime_t *rt, uint32_t layer);
/* Byte offsets of layer `layer`'s tables and slot-map rows of table row 0 (attention's table mode). */
uint64_t okv_rt_dsel_tables_offset(const okv_runtime_t *rt, uint32_t layer);
uint64_t okv_rt_dsel_slot_map_offset(const okv_runtime_t *rt, uint32_t layer);

/* runtime_config.c */
void okv_rt_stats_add(okv_step_stats_t *dst, const okv_step_stats_t *src);
/* seq.c */
okv_seq_t *okv_rt_seq_find(const okv_runtime_t *rt, uint32_t id);
void okv_rt_seq_release(okv_runtime_t *rt, okv_seq_t *s);
/* Self-tuning cap: spreads the pool's free slots over the heads as spares (seq.c). */
void okv_rt_spares_spread(okv_runtime_t *rt);
okv_status_t okv_rt_seq_reserve(okv_runtime_t *rt, uint32_t n_tokens, const char *fn, okv_seq_t **out_seq);
void okv_rt_seq_map_initial(okv_runtime_t *rt, okv_head_t *head, uint32_t block, okv_block_copy_t *out_pair);
okv_status_t okv_rt_seq_load_initial(okv_runtime_t *rt, okv_seq_t *s, okv_status_t st, const okv_block_copy_t *pairs,
                                     uint64_t n_pairs, const char *fn);
void okv_rt_seq_publish(okv_runtime_t *rt, okv_seq_t *s, uint32_t *out_seq_id);
/* remote_seq.c */
uint32_t okv_rt_remote_fill(okv_runtime_t *rt, uint32_t layer, okv_predict_ctx_t *ctx, okv_plan_entry_t *plan,
                            okv_block_copy_t *pairs, uint32_t n_plan, okv_step_stats_t *stats, double *out_t0,
                            double *out_t1);
/* pipeline.c */
okv_status_t okv_rt_predict_topk(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, uint32_t n_seqs,
                                 uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end, double *bk_s);
/* Scores every unit (unit_blocks = 1: block; OKV_SCORING_GROUP_BLOCKS: group) of the listed heads (pipeline.c). */
okv_status_t okv_rt_score_units(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                const okv_score_desc_t *sd, uint32_t n_seqs, uint32_t layer, uint32_t unit_blocks,
                                double *bk_s);
/* The scoring descriptor of a prediction pass over ctx's segments (their seg_* arrays, ctx->q, ctx->scores),
 * reading `summaries` in `dtype` (scoring.c; flat, q8 and two-level prediction share it). */
okv_score_desc_t okv_rt_pass_desc(const okv_runtime_t *rt, const okv_predict_ctx_t *ctx, uint32_t n_seqs, uint32_t T,
                                  uint32_t t_begin, uint32_t t_end, okv_hal_buffer_t *summaries, okv_dtype_t dtype);
/* The final top-K of a prediction (K per segment into ctx->topk / ctx->counts): enqueued, waited for, read
 * back into ctx->host_topk / host_counts (with ctx->topk_on_device: enqueued only); errors annotated
 * "runtime: top-K of layer L". */
okv_status_t okv_rt_final_topk(okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, const okv_topk_desc_t *td,
                               uint32_t layer);
/* Its second half, for a final top-K already enqueued: waited for and read back (n_segments x k indices and
 * the counts), unless ctx->topk_on_device; same errors. */
okv_status_t okv_rt_topk_readback(okv_predict_ctx_t *ctx, okv_hal_stream_t *stream, uint32_t n_segments, uint32_t k,
                                  uint32_t layer);
/* Flat scoring whatever cfg.scoring says (the reference of the recall pass); same contract. */
okv_status_t okv_rt_predict_topk_flat(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                      uint32_t n_seqs, uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end,
                                      double *bk_s);
void *okv_rt_worker_main(void *arg);
void okv_rt_job_wait_selected(okv_runtime_t *rt, uint32_t layer);
void okv_rt_jobs_drain(okv_runtime_t *rt);
void okv_rt_job_collect(okv_runtime_t *rt, uint32_t layer, okv_step_stats_t *dst);
void okv_rt_jobs_collect_done(okv_runtime_t *rt);
double okv_rt_job_wait_event(okv_runtime_t *rt, uint32_t layer);
/* Returns the thread CPU clock (okv_rt_bk_s) read at the end of its bookkeeping interval, 0 when it read none: an
 * interval that follows at once starts there (one clock read, a system call, for both). */
double okv_rt_layer_commit(okv_runtime_t *rt, uint32_t layer, double *bk_s);
/* The step's queries of the layer ([step_n_seqs][step_T][n_q_heads][head_dim] f32) into its job (the layer's
 * previous job is not queued: its commit waited for it); a transfer, not bookkeeping. */
void okv_rt_job_stage_queries(okv_runtime_t *rt, uint32_t layer, const float *q);
/* Queues the layer's job for the worker (its queries staged first). */
void okv_rt_job_submit(okv_runtime_t *rt, uint32_t layer);
void okv_rt_note_layer_use(okv_runtime_t *rt, uint32_t layer);
uint32_t okv_rt_cap_ceiling(const okv_runtime_t *rt, uint32_t n_seqs);
uint32_t okv_rt_choose_cap(const okv_runtime_t *rt, uint32_t n_seqs);
void okv_rt_cap_step_end(okv_runtime_t *rt, const okv_step_stats_t *step);
/* The layer whose fetched blocks' attention share the step now beginning measures (UINT32_MAX: none). */
uint32_t okv_rt_share_layer(const okv_runtime_t *rt);
/* scoring.c */
okv_status_t okv_rt_scoring_init(okv_runtime_t *rt, uint64_t n_host_blocks);
okv_status_t okv_rt_scoring_ctx_init(okv_runtime_t *rt, okv_predict_ctx_t *ctx);
void okv_rt_scoring_ctx_free(okv_runtime_t *rt, okv_predict_ctx_t *ctx);
okv_status_t okv_rt_predict_two_level(okv_runtime_t *rt, okv_predict_ctx_t *ctx, okv_hal_stream_t *stream,
                                      uint32_t n_seqs, uint32_t layer, uint32_t T, uint32_t t_begin, uint32_t t_end,
                                      double *bk_s);
/* Enqueues on `stream` the rebuild of group summaries from block summaries: entry i is group groups[i] of the
 * head whose map is maps[i] (head_of_map), over its first map->n_blocks blocks.
 * No-op in flat scoring. Errors: OUT_OF_MEMORY (host scratch), the kernel's enqueue error. */
okv_status_t okv_rt_groups_rebuild(okv_runtime_t *rt, okv_hal_stream_t *stream, uint32_t n,
                                   okv_block_map_t *const *maps, const uint32_t *groups);
/* Every group of one head (after its block summaries were built). */
okv_status_t okv_rt_groups_rebuild_head(okv_runtime_t *rt, okv_hal_stream_t *stream, okv_head_t *head);
/* step_append.c */
/* With defer, a batch enqueued without error is not waited for: its slots are marked current at once and
 * okv_rt_layer_append_finish must follow the layer's attention (enqueued after it on the compute stream).
 * t_start: okv_rt_bk_s at the start of its bookkeeping interval when the caller's interval just ended there
 * (okv_rt_layer_commit's return), 0 to read the clock. */
okv_status_t okv_rt_layer_append(okv_runtime_t *rt, uint32_t layer, const float *k_new, const float *v_new, bool defer,
                                 double t_start, double *bk_s, bool *out_committed);
/* Checks a deferred append batch (no-op without one): OK, or after a failure its synchronous retry — OK with
 * *out_redo set (attention read the slots before they were written: run it again) — or the error, with the
 * slots it covered unreadable and its summaries stale (repaired by the next append). */
okv_status_t okv_rt_layer_append_finish(okv_runtime_t *rt, uint32_t layer, double *bk_s, bool *out_redo);

/* For tests: the map of (seq, layer, kv_head), NULL when not found. Drains the background
 * thread first (its jobs may outlive okv_runtime_step_end); not thread-safe against a running step. */
const okv_block_map_t *okv_runtime_debug_map(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t layer,
                                             uint32_t kv_head);
/* For tests: host block index of logical block `block` of (seq, layer, kv_head), UINT32_MAX if none. */
uint32_t okv_runtime_debug_host_block(const okv_runtime_t *runtime, uint32_t seq_id, uint32_t layer, uint32_t kv_head,
                                      uint32_t block);
/* For tests (cfg.device_selection): reads every live sequence's tables back and checks them against the maps:
 * the same resident blocks in the same slots, residency bits, free slots; a pending admission (its slot taken
 * off the map's free stack, its block not resident yet) awaits the layer's commit. Drains the pipeline first.
 * OK without device selection. Errors: INTERNAL naming the first difference; a read's error. */
okv_status_t okv_runtime_debug_check_tables(okv_runtime_t *runtime);
/* For tests: free slots in the global pool. */
uint64_t okv_runtime_debug_free_slots(const okv_runtime_t *runtime);
/* For tests: waits until the background pipeline has selected every queued layer. */
void okv_runtime_debug_drain(okv_runtime_t *runtime);

/* Whether the runtime scores in two passes over compact per-block summaries (q8 or c4): group_summaries then
 * holds one compact summary per host block, re-encoded from the exact one whenever it changes. */
static inline bool okv_rt_blockwise_units(const okv_runtime_t *rt) {
  return rt->unit_dtype == OKV_DTYPE_Q8 || rt->unit_dtype == OKV_DTYPE_C4;
}

#endif
