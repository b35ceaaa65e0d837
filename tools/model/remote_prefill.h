/* Prefill/decode disaggregation over the remote tier (include/oasiskv/remote.h): what `oasiskv serve` (the
 * prefill node) and `oasiskv eval --remote` / `--disaggregated` (the decode node) exchange on top of the
 * transport, and the decode side's KV source.
 *
 *  - A prefill job (the payload of okv_remote_client_submit): the tokens to prefill, the decode
 *    runtime's budget K and the decode node's model fingerprint (okv_prefill_model_fingerprint; the server
 *    refuses a job whose model is not its own). Little-endian: "OKVPRE02", u32 budget_blocks, u32
 *    prefill_tokens P, u32 n_tokens (P + 2: the prefill, token P whose queries score the initial working
 *    set, and one more, as okv_eval_prefill takes a window), u64 model_fingerprint, u32 tokens [n_tokens].
 *    At most 65536 bytes (P <= 16375).
 *  - okv_prefill_job_run: the server's work for one job: okv_eval_prefill of that one window (dense),
 *    okv_admission_build with K, okv_admission_pack: the KV region to publish (okv_kv_blocks_t data,
 *    block ((layer * n_kv_heads + kv_head) * n_blocks + b) at byte offset index * block_bytes) and the
 *    admission blob, the same bytes `eval --prefill-tokens` builds in process.
 *  - okv_remote_kv_source_t: an okv_kv_source_t whose read_blocks reads a request's blocks through the
 *    client's batched reads (one batch per call, every block in flight at once).
 *
 * Thread safety: every function is reentrant; a source is used by one runtime thread at a time (the KV
 * source contract) and the client serializes its own calls. */
#ifndef OASISKV_TOOLS_MODEL_REMOTE_PREFILL_H
#define OASISKV_TOOLS_MODEL_REMOTE_PREFILL_H

#include <stdint.h>

#include "oasiskv/oasiskv.h"
#include "oasiskv/remote.h"
#include "model/admission.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OKV_PREFILL_JOB_HEADER_BYTES 28u
#define OKV_PREFILL_JOB_MAX_BYTES    65536u /* the transport's SUBMIT limit */

/* A parsed job. tokens: [n_tokens], owned by whoever filled the struct (okv_prefill_job_parse: allocated with
 * its allocator, free with okv_prefill_job_free). */
typedef struct okv_prefill_job_t {
  uint32_t budget_blocks; /* K of the decode runtime (every block listed when K >= blocks - 1) */
  uint32_t prefill_tokens;
  uint32_t n_tokens;          /* prefill_tokens + 2 */
  uint64_t model_fingerprint; /* the decode node's okv_prefill_model_fingerprint */
  uint32_t *tokens;
  okv_allocator_t allocator;
} okv_prefill_job_t;

/* A 64-bit fingerprint of what the model computes: FNV-1a over its shape, RMS epsilon, RoPE base, scaling
 * and frequency factors, and every weight (f32 bits; the classifier whether or not it is stored apart from
 * the embedding; the RoPE tables are derived and seq_len only bounds positions, both left out). Equal
 * fingerprints: the same weights for all practical purposes (not a cryptographic check). Reads every
 * weight once (about 50 ms for 60 MB). Thread-safe. */
uint64_t okv_prefill_model_fingerprint(const okv_model_t *model);
/* The job's size in bytes for P prefill tokens: 28 + 4 (P + 2). */
uint64_t okv_prefill_job_size(uint32_t prefill_tokens);
/* Writes the job for tokens [0, P + 2) of `tokens` (P = prefill_tokens, >= 1), budget K and the decode
 * node's model fingerprint into buf. Errors: INVALID_ARGUMENT (NULL, P 0, K 0, capacity under
 * okv_prefill_job_size(P), a job over 65536 bytes). */
okv_status_t okv_prefill_job_pack(const uint32_t *tokens, uint32_t prefill_tokens, uint32_t budget_blocks,
                                  uint64_t model_fingerprint, void *buf, uint64_t capacity);
/* Parses a job of exactly n bytes (untrusted: every field checked, n_tokens == P + 2, P >= 1, K >= 1).
 * Errors: INVALID_ARGUMENT naming what is wrong, OUT_OF_MEMORY. */
okv_status_t okv_prefill_job_parse(const void *buf, uint64_t n, const okv_allocator_t *allocator,
                                   okv_prefill_job_t *out);
/* Frees what okv_prefill_job_parse allocated; a zeroed struct is accepted. */
void okv_prefill_job_free(okv_prefill_job_t *job);

/* Runs `job` on `model`/`device`: out_kv receives the prefill KV (okv_kv_blocks_free), *out_blob the packed
 * admission (allocated with `allocator`, *out_blob_bytes bytes; free with okv_free). Errors: those of
 * okv_eval_prefill (INVALID_ARGUMENT for tokens out of the vocabulary or a job longer than seq_len),
 * okv_admission_build, OUT_OF_MEMORY; nothing is left allocated on error. Not thread-safe against other
 * uses of `device`. */
okv_status_t okv_prefill_job_run(const okv_model_t *model, okv_hal_device_t *device, const okv_prefill_job_t *job,
                                 const okv_allocator_t *allocator, okv_kv_blocks_t *out_kv, void **out_blob,
                                 uint64_t *out_blob_bytes);

/* The decode side's KV source over an open request of a KV server. */
typedef struct okv_remote_kv_source_t {
  okv_remote_client_t *client; /* borrowed */
  uint64_t request_id;
  uint64_t block_bytes;          /* okv_block_bytes(kv_dtype, head_dim) */
  uint64_t n_blocks;             /* blocks in the request's region: n_layers * n_kv_heads * n_prefill_blocks */
  double timeout_s;              /* how long one read_blocks waits for its batch (> 0) */
  uint64_t calls, blocks, bytes; /* what it read (successful calls) */
} okv_remote_kv_source_t;

/* read_blocks of the remote source (user: an okv_remote_kv_source_t): reads blocks block_index[i] (byte
 * offset block_index[i] * block_bytes of the region) into dst[i] as one batch and waits for it. Errors:
 * INVALID_ARGUMENT (a block index past the region, NULL arrays), UNAVAILABLE naming the server (connection
 * lost, or the batch not done within timeout_s), OUT_OF_MEMORY; dst unspecified then. */
okv_status_t okv_remote_kv_read(void *user, uint32_t n, const uint64_t *block_index, void *const *dst);
/* A source of `state` (initialised here) named `name` (borrowed; the runtime copies it). */
okv_kv_source_t okv_remote_kv_source(okv_remote_kv_source_t *state, okv_remote_client_t *client, uint64_t request_id,
                                     uint64_t block_bytes, uint64_t n_blocks, double timeout_s, const char *name);

/* A sequence admitted from a prefill (okv_prefill_admit): its KV source's state and, with a remote prefill,
 * the open request. The runtime reads through the source until the sequence is removed or the runtime
 * destroyed: keep the struct alive and unmoved until then. Zero it before okv_prefill_admit. */
typedef struct okv_prefill_seq_t {
  okv_kv_blocks_source_t local;  /* local prefill: the in-memory source over prefill->kv[w] */
  okv_remote_kv_source_t remote; /* remote prefill: the source over the request */
  uint64_t request_id;           /* the open request on prefill->remote (0: none) */
  uint64_t admitted_bytes;       /* summaries + initial working set of this admission (exact) */
  uint64_t full_kv_bytes;        /* what a full transfer of its prefill KV would move */
} okv_prefill_seq_t;

/* Admits window w of `prefill` into `rt` (configured as *rc) as a remote sequence, *out_id its id:
 *  - local (prefill->remote NULL): the admission of prefill->kv[w] and prefill->q[w] built for
 *    K = rc->budget_blocks (every block in dense mode), packed into its wire format and unpacked as a KV
 *    server's would be, admitted with an in-memory KV source (seq->local);
 *  - remote: the prefill job of tokens [0, P + 2) (tokens: [P + 2], P = prefill->prefill_tokens; token
 *    P + 1 is carried, not prefilled) submitted to prefill->remote for K, the request opened
 *    (seq->request_id set from then on, also on a later error), its admission checked against rc's shape
 *    and P, admitted with a remote KV source over the request (seq->remote), waits bounded by
 *    prefill->remote_timeout_s.
 * seq->admitted_bytes / full_kv_bytes are set on success. Errors: the admission's (INVALID_ARGUMENT,
 * OUT_OF_MEMORY), INVALID_ARGUMENT naming the server when its KV shape or token count is not the decode
 * runtime's, the client's (UNAVAILABLE naming the server), okv_runtime_seq_add_remote's. */
okv_status_t okv_prefill_admit(okv_runtime_t *rt, const okv_runtime_config_t *rc, const okv_eval_prefill_t *prefill,
                               uint32_t w, const uint32_t *tokens, const okv_allocator_t *allocator,
                               okv_prefill_seq_t *seq, uint32_t *out_id);
/* Closes seq's open request on prefill->remote (if any; errors ignored: the server frees it with the
 * connection), once the runtime no longer reads through it (the sequence removed or the runtime destroyed).
 * NULL prefill or seq, and a sequence without a request, are accepted. */
void okv_prefill_seq_close(const okv_eval_prefill_t *prefill, okv_prefill_seq_t *seq);

#ifdef __cplusplus
}
#endif
#endif
