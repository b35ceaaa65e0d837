/* The model side of the oasiskv eval/generate commands: a llama2.c checkpoint
 * loader and a llama-architecture GGUF loader (gguf.h), its BPE tokenizer, a
 * forward pass whose every K/V goes through the OasisKV runtime
 * (okv_engine_*), the look-ahead drafters and the teacher-forced evaluation
 * loop.
 *
 * Architecture (llama2.c "legacy" checkpoints, GGUF `llama`): pre-norm
 * transformer, RMSNorm (config.rms_eps: 1e-5 for llama2.c), rotary position
 * embedding on pairs (2i, 2i+1) of each head with frequency
 * theta^(-2i/head_dim) (taken from the model's RoPE tables: stored in a
 * llama2.c checkpoint, computed at load for GGUF),
 * grouped-query attention (query head h uses KV head h / (n_q_heads/n_kv_heads)),
 * SwiGLU feed-forward w2(silu(w1 x) * w3 x), tied or untied classifier.
 *
 * Thread safety: a model and a tokenizer are read-only after loading and may
 * be shared by threads; an engine is driven by one thread (like its runtime).
 * Every object is created with an allocator (NULL = system) and frees through it.
 */
#ifndef OASISKV_TOOLS_MODEL_MODEL_H
#define OASISKV_TOOLS_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oasiskv/oasiskv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token ids fixed by the llama2.c tokenizers. */
#define OKV_TOKEN_UNK 0u
#define OKV_TOKEN_BOS 1u
#define OKV_TOKEN_EOS 2u
/* Byte-fallback tokens: byte b is token b + OKV_TOKEN_BYTE_BASE. */
#define OKV_TOKEN_BYTE_BASE 3u
/* RMSNorm epsilon of the llama2.c models. */
#define OKV_MODEL_RMS_EPS 1e-5f

/* ---- Default input paths ---- */

typedef enum okv_model_path_kind_e {
  OKV_MODEL_PATH_MODEL = 0,     /* env OKV_MODEL,     file models/stories260K.bin */
  OKV_MODEL_PATH_TOKENIZER = 1, /* env OKV_TOKENIZER, file models/tok512.bin */
  OKV_MODEL_PATH_TEXT = 2,      /* env OKV_TEXT,      file data/tinystories_val.txt */
} okv_model_path_kind_t;

/* Resolves an input path: `flag` when not NULL, else the environment
 * variable, else ../shared/<file> relative to the current directory if it
 * exists, else <source tree>/../shared/<file> (compile-time OKV_SHARED_DIR).
 * Writes a NUL-terminated path into out_path (capacity bytes).
 * Errors: NOT_FOUND (no candidate exists; the message lists what was tried),
 * INVALID_ARGUMENT (path longer than capacity). */
okv_status_t okv_model_path_resolve(okv_model_path_kind_t kind, const char *flag, char *out_path, size_t capacity);

/* ---- Checkpoint ---- */

typedef struct okv_model_config_t {
  uint32_t dim;        /* model width */
  uint32_t hidden_dim; /* FFN width */
  uint32_t n_layers;
  uint32_t n_q_heads;
  uint32_t n_kv_heads; /* divides n_q_heads */
  uint32_t vocab_size;
  uint32_t seq_len;       /* positions the RoPE tables cover */
  uint32_t head_dim;      /* dim / n_q_heads, even, <= 256 */
  bool shared_classifier; /* classifier = token embedding (header vocab_size > 0) */
  float rms_eps;          /* RMSNorm epsilon (llama2.c: OKV_MODEL_RMS_EPS; GGUF: attention.layer_norm_rms_epsilon) */
  float rope_theta;       /* RoPE base: frequency j is theta^(-2j/head_dim) (llama2.c: 10000; GGUF: rope.freq_base) */
  float rope_pos_scale;   /* linear RoPE scaling: positions are multiplied by it (1 = none; GGUF linear scaling
                             factor f gives 1/f) */
} okv_model_config_t;

/* Loaded weights, fp32, row-major ([out][in] for every matrix). Pointers point
 * into one owned allocation. */
typedef struct okv_model_t {
  okv_model_config_t config;
  okv_allocator_t allocator;
  float *storage;
  const float *token_embedding;   /* [vocab][dim] */
  const float *rms_att;           /* [n_layers][dim] */
  const float *wq;                /* [n_layers][n_q_heads*head_dim][dim] */
  const float *wk;                /* [n_layers][n_kv_heads*head_dim][dim] */
  const float *wv;                /* [n_layers][n_kv_heads*head_dim][dim] */
  const float *wo;                /* [n_layers][dim][n_q_heads*head_dim] */
  const float *rms_ffn;           /* [n_layers][dim] */
  const float *w1;                /* [n_layers][hidden][dim] */
  const float *w2;                /* [n_layers][dim][hidden] */
  const float *w3;                /* [n_layers][hidden][dim] */
  const float *rms_final;         /* [dim] */
  const float *rope_cos;          /* [seq_len][head_dim/2] (legacy freq_cis_real) */
  const float *rope_sin;          /* [seq_len][head_dim/2] (legacy freq_cis_imag) */
  const float *classifier;        /* [vocab][dim] */
  const float *rope_freq_factors; /* [head_dim/2] frequency j is divided by it (GGUF rope_freqs, Llama 3); NULL: none */
} okv_model_t;

/* Loads a model file: a GGUF file (first bytes "GGUF", see
 * okv_model_load_gguf) or a llama2.c legacy (version 0) checkpoint: 7 little-endian int32
 * (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
 * negative vocab_size means an unshared classifier stored last), then the fp32
 * weights in the order of okv_model_t, including the RoPE tables.
 * Errors: NOT_FOUND (file missing), IO_ERROR (read failed), INVALID_ARGUMENT
 * (a header field out of range, naming the field and the file; file size not
 * matching the header, stating both sizes; non-finite weights).
 * The caller frees *out_model with okv_model_free. */
okv_status_t okv_model_load(const char *path, const okv_allocator_t *allocator, okv_model_t **out_model);
/* The same from memory: `data` holds the whole file (`n_bytes`), `name`
 * names it in messages (NULL: "<memory>"). The weights are copied, so data
 * may be freed afterwards. Every size the header declares is checked against
 * n_bytes (overflow-safe) before anything that large is allocated.
 * Errors: INVALID_ARGUMENT (as okv_model_load), OUT_OF_MEMORY. */
okv_status_t okv_model_load_memory(const void *data, size_t n_bytes, const char *name, const okv_allocator_t *allocator,
                                   okv_model_t **out_model);
/* NULL is accepted. */
void okv_model_free(okv_model_t *model);

/* ---- GGUF models (llama architecture) ---- */

typedef struct okv_gguf_t okv_gguf_t; /* tools/model/gguf.h */

typedef struct okv_model_load_options_t {
  /* Positions the model covers (its seq_len): 0 = the file's (llama2.c
   * seq_len, GGUF <arch>.context_length). A llama2.c checkpoint takes at most
   * its seq_len (its RoPE tables end there); a GGUF model any value in
   * [1, 2^20] (its tables are computed), e.g. to run past a context_length
   * written smaller than the training length, or to cap a 128K model. */
  uint32_t context_length;
} okv_model_load_options_t;

/* okv_model_load with options (NULL = defaults). Both loaders dispatch on the
 * first 4 bytes: "GGUF" is read by okv_model_load_gguf (the file mapped with
 * okv_gguf_open and unmapped before returning), anything else as a llama2.c
 * checkpoint. Errors: as okv_model_load and okv_model_load_gguf;
 * INVALID_ARGUMENT for a context_length out of range. */
okv_status_t okv_model_load_ex(const char *path, const okv_model_load_options_t *options,
                               const okv_allocator_t *allocator, okv_model_t **out_model);

/* Loads a `llama`-architecture GGUF model (Llama 1/2/3, TinyLlama, SmolLM2,
 * llama2.c exports) from an open file: hyperparameters llama.block_count,
 * embedding_length, feed_forward_length, attention.head_count,
 * attention.head_count_kv (default head_count), attention.layer_norm_rms_epsilon,
 * rope.dimension_count (must be head_dim), rope.freq_base (default 10000),
 * context_length, rope.scaling.type none|linear with rope.scaling.factor (or
 * the older rope.scale_linear); the vocabulary size is the token embedding's
 * rows (tokenizer.ggml.tokens and llama.vocab_size must agree when present).
 * Tensors token_embd, output_norm, output (absent: tied to the embedding),
 * rope_freqs (optional, Llama 3), blk.N.{attn_norm, attn_q, attn_k, attn_v,
 * attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up}, each ".weight", of type
 * F32, F16, BF16, Q8_0 or Q4_0, dequantised to f32 at load: the model takes 4
 * bytes per parameter whatever the file's type (a Q4_0 file grows about 7x, a
 * F16 one 2x). Q/K rows are used as stored: GGUF llama files hold them in the
 * adjacent-pair RoPE order this forward pass uses (llama.cpp's converter
 * permutes Hugging Face checkpoints into it; llama2.c exports already are).
 * The RoPE tables are computed in f32 as llama2.c's exporter does: angle =
 * f32(pos * pos_scale) * f32(1 / theta^(f32(2j)/head_dim) / factor_j), then
 * cos/sin rounded from double, so they can differ from a llama2.c
 * checkpoint's stored tables in the last bit (see docs/evaluation.md).
 * `g` is only read during the call. Errors: INVALID_ARGUMENT, one line naming
 * the file and what is wrong (architecture not llama, a missing or
 * out-of-range hyperparameter, a missing, misshapen, unexpected or unsupported-
 * type tensor, a vocabulary disagreeing with the embedding, rope scaling of an
 * unsupported type, a non-finite weight), OUT_OF_MEMORY. */
okv_status_t okv_model_load_gguf(const okv_gguf_t *g, const okv_model_load_options_t *options,
                                 const okv_allocator_t *allocator, okv_model_t **out_model);
/* Every check of okv_model_load_gguf (hyperparameters, tensor names, shapes
 * and types, the vocabulary) without reading or allocating weights: the
 * config the model would have and *out_f32_bytes (may be NULL), the bytes its
 * f32 storage would take (weights, RoPE tables). Used by `oasiskv info`.
 * Errors: as okv_model_load_gguf, less OUT_OF_MEMORY and non-finite weights. */
okv_status_t okv_model_gguf_config(const okv_gguf_t *g, const okv_model_load_options_t *options,
                                   okv_model_config_t *out_config, uint64_t *out_f32_bytes);

/* ---- Tokenizer ----
 * One handle for every kind: llama2.c files (below) and the GGUF
 * vocabularies of tools/model/tokenizer_gguf.h (okv_tokenizer_load_gguf),
 * whose encode/piece semantics that header states; free, vocab_size, encode
 * and piece work for all. */

typedef struct okv_tokenizer_t okv_tokenizer_t;

/* Loads a llama2.c tokenizer file: int32 max_token_length, then per token a
 * float score, an int32 length and that many bytes. `vocab_size` is the
 * model's: the file must hold exactly that many tokens.
 * Errors: NOT_FOUND, IO_ERROR, INVALID_ARGUMENT (truncated, trailing bytes —
 * a tokenizer of another vocabulary size —, a token length out of range,
 * NUL bytes in a token). */
okv_status_t okv_tokenizer_load(const char *path, uint32_t vocab_size, const okv_allocator_t *allocator,
                                okv_tokenizer_t **out_tokenizer);
/* The same from memory: `data` holds the whole file (`n_bytes`, at most
 * 64 MiB like a file), `name` names it in messages (NULL: "<memory>").
 * Nothing of data is kept. Errors: INVALID_ARGUMENT (as okv_tokenizer_load),
 * OUT_OF_MEMORY. */
okv_status_t okv_tokenizer_load_memory(const void *data, size_t n_bytes, const char *name, uint32_t vocab_size,
                                       const okv_allocator_t *allocator, okv_tokenizer_t **out_tokenizer);
/* NULL is accepted. */
void okv_tokenizer_free(okv_tokenizer_t *tokenizer);
uint32_t okv_tokenizer_vocab_size(const okv_tokenizer_t *tokenizer);

/* Encodes `n_bytes` of UTF-8 `text` the sentencepiece way of llama2.c:
 * optional BOS, a dummy-prefix space (for non-empty text), every code point
 * looked up as a token or else split into byte-fallback tokens (byte + 3;
 * UNK where the vocabulary is too small to have that id), then greedy merges
 * of the adjacent pair whose merged string is a token with the highest score
 * (first such pair on ties) until none merges; O(n log n) in the text length.
 * Writes up to `capacity` ids; *out_n_tokens gets the full count even when it
 * exceeds capacity (then OKV_OK is still returned and the caller may retry).
 * Errors: INVALID_ARGUMENT (text not valid UTF-8, naming the byte offset; a
 * NUL byte), OUT_OF_MEMORY. */
okv_status_t okv_tokenizer_encode(const okv_tokenizer_t *tokenizer, const char *text, size_t n_bytes, bool bos,
                                  uint32_t *out_tokens, size_t capacity, size_t *out_n_tokens);

/* The text of `token` following `prev_token`: byte tokens give their byte,
 * the leading space of a piece right after BOS (or after OKV_TOKEN_NONE,
 * UINT32_MAX: the start of a text) is dropped (the dummy prefix),
 * BOS/EOS/UNK and out-of-range ids give "". Writes into out_piece (a
 * NUL-terminated string, at most `capacity` bytes including the NUL) and the
 * byte count to *out_n_bytes (a byte token may be "\0": check the count).
 * Errors: INVALID_ARGUMENT (capacity too small). */
okv_status_t okv_tokenizer_piece(const okv_tokenizer_t *tokenizer, uint32_t prev_token, uint32_t token, char *out_piece,
                                 size_t capacity, size_t *out_n_bytes);

/* ---- Engine: the forward pass over the runtime ---- */

typedef struct okv_engine_t okv_engine_t;

/* Creates an engine running `model` with its KV cache in `runtime` (both
 * borrowed; they must outlive the engine). The runtime's shape must match
 * the model (n_layers, n_q_heads, n_kv_heads, head_dim).
 * max_seqs: the largest batch a step takes; max_drafts: draft tokens per
 * sequence per step (0..3).
 * Errors: INVALID_ARGUMENT (shape mismatch naming the field), OUT_OF_MEMORY. */
okv_status_t okv_engine_create(const okv_model_t *model, okv_runtime_t *runtime, uint32_t max_seqs, uint32_t max_drafts,
                               const okv_allocator_t *allocator, okv_engine_t **out_engine);
/* NULL is accepted. */
void okv_engine_destroy(okv_engine_t *engine);
/* Starts a runtime config an engine on `model_config` accepts: its shape
 * (n_layers, n_q_heads, n_kv_heads, head_dim), f32 K/V in blocks of
 * OKV_BLOCK_TOKENS, okv_runtime_config_init's defaults for the rest. */
void okv_model_runtime_config(const okv_model_config_t *model_config, okv_runtime_config_t *out);

/* One decode step for a batch: sequence seq_ids[i] takes its real token
 * tokens[i] at position = its current length (committed: its K/V is appended
 * to the runtime in every layer), stacked with n_drafts draft tokens
 * draft_tokens[i*n_drafts + j] at the following positions (their K/V is passed
 * as draft_kv and never committed). Writes the real tokens' logits:
 * out_logits f32 [n_seqs][vocab]; out_step_stats may be NULL.
 * Method: stacked real + look-ahead queries, arXiv 2608.08097 sec. 3.
 * Errors: INVALID_ARGUMENT (token id >= vocab, position >= seq_len, batch or
 * n_drafts over the engine's maxima, mode OASIS with n_drafts == 0), the
 * runtime's errors (a layer that does not return OK ends the step there and
 * its error is returned: the logits are not valid; layers before it keep the
 * token, docs/api.md "Faults"). */
okv_status_t okv_engine_step(okv_engine_t *engine, uint32_t n_seqs, const uint32_t *seq_ids, const uint32_t *tokens,
                             uint32_t n_drafts, const uint32_t *draft_tokens, float *out_logits,
                             okv_step_stats_t *out_step_stats);

/* An uncommitted forward of tokens[i] (at each sequence's current length)
 * over what is resident now (okv_runtime_peek_layer, the token's own K/V as
 * the in-flight token); nothing is appended. Writes out_logits f32
 * [n_seqs][vocab]. Used by the self drafter.
 * Errors: as okv_engine_step. */
okv_status_t okv_engine_peek(okv_engine_t *engine, uint32_t n_seqs, const uint32_t *seq_ids, const uint32_t *tokens,
                             float *out_logits);

/* What okv_engine_step hands to runtime layer `layer` of a step, for
 * recording attention traces (oasiskv eval --trace, tools/kv_trace.h). Every
 * pointer is borrowed for the call: q f32 [n_seqs][n_query_tokens][n_q_heads]
 * [head_dim] (row 0 of a sequence is its real token, rows 1.. its draft
 * tokens; RoPE applied), k f32 [n_seqs][n_kv_heads][head_dim] (the real
 * tokens' keys, RoPE applied), positions [n_seqs] (the real tokens'),
 * seq_ids [n_seqs] (runtime sequence ids; okv_eval_run's trace gets window
 * indices instead). */
typedef struct okv_engine_trace_t {
  uint32_t layer, n_seqs, n_query_tokens;
  const uint32_t *seq_ids;
  const uint32_t *positions;
  const float *q;
  const float *k;
} okv_engine_trace_t;
typedef void (*okv_engine_trace_fn)(void *user, const okv_engine_trace_t *trace);

/* Calls fn(user, ...) in okv_engine_step for every layer, before the runtime's
 * step_layer (not in okv_engine_peek); fn NULL removes it. Errors: none (NULL
 * engine ignored). Not thread-safe: the engine's thread; fn runs on it. */
void okv_engine_set_trace(okv_engine_t *engine, okv_engine_trace_fn fn, void *user);

/* ---- Drafters: the look-ahead token stacked behind the real one ---- */

typedef enum okv_drafter_e {
  OKV_DRAFTER_NONE = 0,   /* no draft (dense, proxy, ondemand) */
  OKV_DRAFTER_ORACLE = 1, /* the true next token of the text (teacher-forced eval only) */
  OKV_DRAFTER_SELF = 2,   /* the model's greedy next token from an uncommitted peek forward */
  OKV_DRAFTER_NGRAM = 3,  /* prompt lookup over the sequence's own history */
  OKV_DRAFTER_COUNT
} okv_drafter_t;

/* "none", "oracle", "self", "ngram". */
const char *okv_drafter_name(okv_drafter_t drafter);
/* Errors: INVALID_ARGUMENT for an unknown name (listing the valid ones). */
okv_status_t okv_drafter_parse(const char *name, okv_drafter_t *out_drafter);

/* The n-gram (prompt lookup) draft after history[0..n_history): for n = 3,
 * then 2, then 1, find the latest earlier occurrence of the last n tokens
 * (ending before the last token) and return the token that followed it; when
 * nothing matches, repeat the last token. n_history >= 1. */
uint32_t okv_drafter_ngram_next(const uint32_t *history, size_t n_history);

/* Index of the largest logit (the lowest index on ties). */
uint32_t okv_logits_argmax(const float *logits, uint32_t n);

/* ---- Teacher-forced evaluation ---- */

typedef struct okv_eval_window_t {
  const uint32_t *tokens; /* BOS first */
  uint32_t n_tokens;      /* >= 2, <= seq_len */
} okv_eval_window_t;

/* Dense logits kept to compare the other modes against. */
typedef struct okv_eval_reference_t {
  uint32_t n_windows, vocab_size;
  uint32_t *offsets; /* [n_windows + 1] position offsets of each window's rows */
  float *logits;     /* [offsets[n_windows]][vocab], as the dense run produced them */
  okv_allocator_t allocator;
} okv_eval_reference_t;

typedef struct okv_eval_config_t {
  okv_mode_t mode;
  okv_drafter_t drafter;  /* used in OKV_MODE_OASIS only; NONE there is an error */
  uint32_t budget_blocks; /* K */
  double fetch_ratio;
  /* Called after each step with (done, total) positions; may be NULL. */
  void (*progress)(void *user, uint64_t done, uint64_t total);
  void *progress_user;
  /* Called for every layer of every step (okv_engine_set_trace) with seq_ids
   * replaced by window indices; may be NULL. */
  okv_engine_trace_fn trace;
  void *trace_user;
  bool scoring_set;        /* scoring given: otherwise the runtime's default */
  okv_scoring_t scoring;   /* okv_runtime_config_t.scoring when scoring_set */
  uint32_t scoring_groups; /* okv_runtime_config_t.scoring_groups (0: the runtime's default; <= budget_blocks) */
  bool device_selection;   /* okv_runtime_config_t.device_selection (OASIS / PROXY runs; default false) */
} okv_eval_config_t;

typedef struct okv_eval_result_t {
  okv_mode_t mode;
  okv_drafter_t drafter;
  uint32_t budget_blocks;
  double fetch_ratio;        /* as okv_eval_config_t's: negative = the self-tuning cap, at most -fetch_ratio */
  okv_scoring_t scoring;     /* the prediction's block scoring the run's runtime used (okv_runtime_config_t) */
  uint32_t scoring_groups;   /* okv_runtime_config_t.scoring_groups in effect (0: every block scored exactly) */
  bool device_selection;     /* the run selected on the device (okv_runtime_config_t.device_selection, effective) */
  uint64_t tokens_evaluated; /* predicted positions over all windows */
  double mean_nll;           /* nats per token */
  double perplexity;         /* exp(mean_nll) */
  double top1_agreement;     /* fraction of positions whose argmax equals dense's (NAN without reference) */
  double kl_vs_dense;        /* mean KL(dense || mode) in nats (NAN without reference) */
  double recall;             /* recall_hits / recall_total over all layers (NAN when not tracked) */
  uint32_t n_layers;
  double recall_per_layer[64]; /* first n_layers entries (min(n_layers, 64)) */
  uint64_t bytes_moved;        /* HOST->DEVICE bytes over the run */
  uint64_t blocks_moved;
  double blocks_moved_per_token;
  uint64_t deferred_steps; /* steps where the cap deferred at least one block (summed over layers) */
  uint64_t hits, misses;
  double stall_seconds;
  double elapsed_s;
  double tokens_per_second; /* tokens_evaluated / elapsed_s (drafter work included) */
  /* With a prefill (okv_eval_run_prefilled; 0 otherwise): admission and remote reads, summed over windows. */
  uint32_t prefill_tokens;     /* P: tokens [0, P) of each window prefilled, positions P.. decoded */
  uint64_t admitted_bytes;     /* summaries + initial working sets (okv_admission_t.admitted_bytes) */
  uint64_t full_kv_bytes;      /* what a full transfer of the prefill KV would move */
  double admission_ratio;      /* full_kv_bytes / admitted_bytes */
  uint64_t remote_blocks;      /* prefill blocks read through the KV source during decode */
  uint64_t remote_bytes;       /* their bytes */
  double remote_seconds;       /* time inside the source's reads */
  double remote_stall_seconds; /* foreground time waiting on them (okv_step_stats_t) */
  double remote_gbps;          /* remote_bytes / remote_seconds / 1e9 (NAN when nothing was read) */
} okv_eval_result_t;

/* Runs `config` over the windows, batched (one runtime sequence per window),
 * on `device`. When out_reference is not NULL (dense run) the logits are
 * stored there (free with okv_eval_reference_free); when `reference` is not
 * NULL the top-1 agreement and KL are computed against it.
 * Errors: INVALID_ARGUMENT (config, windows), the runtime's and engine's. */
okv_status_t okv_eval_run(const okv_model_t *model, okv_hal_device_t *device, const okv_eval_window_t *windows,
                          uint32_t n_windows, const okv_eval_config_t *config, const okv_eval_reference_t *reference,
                          const okv_allocator_t *allocator, okv_eval_reference_t *out_reference,
                          okv_eval_result_t *out_result);
void okv_eval_reference_free(okv_eval_reference_t *reference);

/* Prefill/decode disaggregation (oasiskv eval --prefill-tokens; tools/model/admission.h): every window's
 * tokens [0, P) prefilled densely, with the first decode query of each layer. */
typedef struct okv_kv_blocks_t okv_kv_blocks_t;
typedef struct okv_eval_prefill_t {
  uint32_t n_windows, prefill_tokens; /* prefill_tokens: P */
  okv_kv_blocks_t *kv;                /* [n_windows] the prefill KV in block format (f32, the model's shape) */
  float *q;                           /* [n_windows][n_layers][n_q_heads][head_dim] token P's query per layer */
  okv_allocator_t allocator;
  /* Remote prefill (eval --remote / --disaggregated): when set, kv and q are unused (NULL) and each run
   * submits every window's prefill job to this KV server (borrowed client, tools/model/remote_prefill.h),
   * admits the request's admission blob and reads further blocks through the client. */
  struct okv_remote_client_t *remote;
  double remote_timeout_s;    /* a job's answer and each remote read (> 0) */
  uint64_t model_fingerprint; /* sent with every job (okv_prefill_model_fingerprint of the decode node's model) */
} okv_eval_prefill_t;

/* Prefills tokens [0, P) of every window densely on `device`: a dense runtime and the engine step the
 * windows as one batch through position P - 1, then token P (its queries, RoPE applied, are the first
 * decode query of the admission); the KV of [0, P) is read back with okv_runtime_seq_read_kv. Every window
 * needs at least P + 2 tokens (P decoded positions and one scored). Free *out with okv_eval_prefill_free.
 * Errors: INVALID_ARGUMENT (P 0, a window too short or invalid, NULL arguments), the runtime's and
 * engine's errors, OUT_OF_MEMORY. */
okv_status_t okv_eval_prefill(const okv_model_t *model, okv_hal_device_t *device, const okv_eval_window_t *windows,
                              uint32_t n_windows, uint32_t prefill_tokens, const okv_allocator_t *allocator,
                              okv_eval_prefill_t *out);
/* NULL and a zeroed struct are accepted. */
void okv_eval_prefill_free(okv_eval_prefill_t *prefill);

/* okv_eval_run with a prefill (NULL: exactly okv_eval_run): every window is admitted into the run's
 * runtime as a remote sequence (okv_admission_build with the run's K — every block in dense mode — then
 * okv_runtime_seq_add_remote with an in-memory KV source over prefill->kv; with prefill->remote the KV
 * server builds the same admission from its own prefill and the source reads through the client; the
 * requests are closed at the end of the run), and positions P.. are decoded
 * and scored (tokens_evaluated = sum of n_tokens - 1 - P); a reference must come from a run with the same
 * prefill. Fills the result's admission and remote fields. Errors: as okv_eval_run; INVALID_ARGUMENT when
 * the prefill does not match the windows (or the server's KV shape is not the model's); with a remote
 * prefill the client's errors (UNAVAILABLE naming the server when it is gone). */
okv_status_t okv_eval_run_prefilled(const okv_model_t *model, okv_hal_device_t *device,
                                    const okv_eval_window_t *windows, uint32_t n_windows,
                                    const okv_eval_config_t *config, const okv_eval_prefill_t *prefill,
                                    const okv_eval_reference_t *reference, const okv_allocator_t *allocator,
                                    okv_eval_reference_t *out_reference, okv_eval_result_t *out_result);

#ifdef __cplusplus
}
#endif
#endif
