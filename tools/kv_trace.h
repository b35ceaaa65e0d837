/* Attention traces: the per-layer queries (real and draft) and keys of a real
 * model's decode, written by `oasiskv eval --trace FILE` and replayed by
 * `oasiskv bench serve --trace FILE` (docs/performance.md, "Trace mode").
 *
 * File format (little-endian, version 1):
 *   header, 64 bytes: char magic[8] = "OKVTRACE"; u32 version = 1;
 *     u32 n_layers, n_q_heads, n_kv_heads, head_dim; u32 flags (bit 0: the
 *     records carry draft queries); u32 zero[8] (reserved).
 *   then records until the end of the file, each:
 *     u32 window, u32 position, u32 layer, u32 zero (reserved);
 *     f32 k[n_kv_heads][head_dim]   the key of the real token at `position`;
 *     f32 q[n_q_heads][head_dim]    the real token's query;
 *     f32 qd[n_q_heads][head_dim]   only with flag bit 0: the draft token's
 *                                   query (position + 1, made at `position`).
 *   Rotary embeddings are applied (the vectors attention sees); query head h
 *   reads KV head h / (n_q_heads / n_kv_heads). A window is one sequence of the
 *   evaluation; its positions run 0..n-1 without gaps.
 *
 * Thread safety: a writer or a loaded trace is used by one thread at a time
 * (a loaded trace is read-only and may be shared). */
#ifndef OASISKV_TOOLS_KV_TRACE_H
#define OASISKV_TOOLS_KV_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "oasiskv/status.h"

#define OKV_KV_TRACE_MAGIC       "OKVTRACE"
#define OKV_KV_TRACE_VERSION     1u
#define OKV_KV_TRACE_HEADER      64u
#define OKV_KV_TRACE_FLAG_DRAFT  1u
#define OKV_KV_TRACE_MAX_WINDOWS 4096u

typedef struct okv_kv_trace_shape_t {
  uint32_t n_layers, n_q_heads, n_kv_heads, head_dim;
  bool has_draft;
} okv_kv_trace_shape_t;

typedef struct okv_kv_trace_writer_t {
  FILE *f;
  okv_kv_trace_shape_t shape;
  uint64_t n_records;
} okv_kv_trace_writer_t;

/* Creates `path` and writes the header. Errors: INVALID_ARGUMENT (a shape
 * field 0, n_q_heads not a multiple of n_kv_heads), IO_ERROR (naming the path
 * and the reason). On error *w is left closed. */
okv_status_t okv_kv_trace_open(const char *path, const okv_kv_trace_shape_t *shape, okv_kv_trace_writer_t *w);
/* Appends one record: k f32 [n_kv_heads][head_dim], q and qd f32
 * [n_q_heads][head_dim] (qd is ignored without drafts; required with them).
 * Errors: INVALID_ARGUMENT (NULL vectors, layer out of range), IO_ERROR. */
okv_status_t okv_kv_trace_write(okv_kv_trace_writer_t *w, uint32_t window, uint32_t position, uint32_t layer,
                                const float *k, const float *q, const float *qd);
/* Flushes and closes (also after an error). Errors: IO_ERROR. */
okv_status_t okv_kv_trace_close(okv_kv_trace_writer_t *w);

/* A whole trace in memory, indexed by window and position. */
typedef struct okv_kv_trace_t {
  okv_kv_trace_shape_t shape;
  uint32_t n_windows;
  uint32_t *n_positions; /* [n_windows] */
  uint64_t *first;       /* [n_windows] index of (window, position 0, layer 0) in the record arrays */
  float *k;              /* [record][n_kv_heads][head_dim], record = first[w] + position * n_layers + layer */
  float *q;              /* [record][n_q_heads][head_dim] */
  float *qd;             /* [record][n_q_heads][head_dim] or NULL without drafts */
} okv_kv_trace_t;

/* Loads and checks a trace: magic, version, shape (1..4096 layers and heads,
 * head_dim 1..256, n_q_heads a multiple of n_kv_heads), every record complete,
 * windows 0..n-1 each with positions 0..n_w-1 in every layer exactly once,
 * finite values. Errors: NOT_FOUND / IO_ERROR (the file), INVALID_ARGUMENT
 * (the format, naming the byte offset or the missing record), OUT_OF_MEMORY.
 * The caller frees with okv_kv_trace_free. */
okv_status_t okv_kv_trace_load(const char *path, okv_kv_trace_t *out);
/* Frees what okv_kv_trace_load allocated; a zeroed struct is accepted. */
void okv_kv_trace_free(okv_kv_trace_t *t);

/* Pointers into a loaded trace for (window, position, layer); NULL outside it
 * (qd: also NULL without drafts). */
const float *okv_kv_trace_k(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer);
const float *okv_kv_trace_q(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer);
const float *okv_kv_trace_qd(const okv_kv_trace_t *t, uint32_t window, uint32_t position, uint32_t layer);

#endif
