/* Synthetic attention with structure for `oasiskv bench serve`: keys, values
 * and queries whose attention looks like a decoder's (a recent window, a sink
 * block, a few heavy blocks per head whose set drifts slowly as the query's
 * focus moves, per-head differences, a token-to-token query innovation and a
 * look-ahead draft query that knows part of it), so that recall and traffic
 * are not those of noise. docs/performance.md ("The attention generator")
 * gives the model and its constants.
 *
 * Everything is a pure function of (seed, layer, KV head, sequence stream,
 * position): a key can be regenerated later (e.g. for exact attention) without
 * being stored. Keys of the prefill are shared by every sequence (stream 0);
 * sequences differ by their query focus and by their decoded tokens' noise.
 *
 * Thread safety: a generator is read-only after okv_attn_gen_create; calls may
 * run concurrently. Units: positions in tokens; vectors f32 [head_dim]. */
#ifndef OASISKV_BENCH_ATTN_GEN_H
#define OASISKV_BENCH_ATTN_GEN_H

#include <stdint.h>

#include "oasiskv/status.h"

typedef struct okv_attn_gen_params_t {
  uint32_t n_layers, n_kv_heads;
  uint32_t group_size; /* query heads per KV head */
  uint32_t head_dim;   /* even, 32..256 */
  uint64_t seed;
  double draft_rho; /* correlation of the draft query's innovation with the next real query's, in [0, 1]
                       (1 = the draft knows the next query exactly; default 0.7) */
} okv_attn_gen_params_t;

typedef struct okv_attn_gen_t okv_attn_gen_t;

/* Defaults: seed 1, draft_rho 0.7 (the shape fields are 0: the caller sets them). */
void okv_attn_gen_params_init(okv_attn_gen_params_t *p);

/* Builds the per-(layer, KV head) tables (topic directions, positional
 * frequencies, head profile). The caller owns *out (okv_attn_gen_destroy).
 * Errors: INVALID_ARGUMENT (a shape field 0, head_dim odd or outside 32..256,
 * draft_rho outside [0, 1]), OUT_OF_MEMORY. */
okv_status_t okv_attn_gen_create(const okv_attn_gen_params_t *p, okv_attn_gen_t **out);
/* NULL is accepted. */
void okv_attn_gen_destroy(okv_attn_gen_t *g);

/* Key and value of the token at `pos` of KV head (layer, kv_head), for
 * sequence noise stream `stream` (0 = the shared prefill; a decoded token of
 * sequence s uses stream s + 1): k, v f32 [head_dim]. Either may be NULL. */
void okv_attn_gen_kv(const okv_attn_gen_t *g, uint32_t layer, uint32_t kv_head, uint64_t stream, uint32_t pos, float *k,
                     float *v);

/* The queries of the G query heads of (layer, kv_head) for the real token of
 * sequence `seq` at position `pos`: q f32 [group_size][head_dim]. */
void okv_attn_gen_query(const okv_attn_gen_t *g, uint32_t seq, uint32_t layer, uint32_t kv_head, uint32_t pos,
                        float *q);

/* The draft (look-ahead) token's queries made at position `pos`: a prediction
 * of okv_attn_gen_query at pos + 1 whose innovation is correlated draft_rho
 * with the true one. q f32 [group_size][head_dim]. */
void okv_attn_gen_draft_query(const okv_attn_gen_t *g, uint32_t seq, uint32_t layer, uint32_t kv_head, uint32_t pos,
                              float *q);

/* Short description of the head profile of (layer, kv_head), e.g.
 * "W=256 tau=128 heavy=6.0 recent=4.0 sink=3.0"; static storage per call is
 * not used: writes into buf (n bytes). */
void okv_attn_gen_describe(const okv_attn_gen_t *g, uint32_t layer, uint32_t kv_head, char *buf, unsigned n);

#endif
