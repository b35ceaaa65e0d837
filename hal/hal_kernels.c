/* Kernel entry points of the HAL: validate the descriptor completely
 * (hal_kernel_validate.c), then dispatch through the device vtable; an
 * injected kernel fault (hal/hal_fault.h) is enqueued as an asynchronous
 * failure instead, and a backend without the kernel answers UNAVAILABLE.
 * Semantics of each kernel: include/oasiskv/kernels.h and docs/kernels.md.
 * Owns: nothing; it holds no state.
 * May touch: the stream's device (vtable, info.backend, fault hooks: read)
 * and the backend's kernel and enqueue_failure hooks. */
#include <stdio.h>

#include "hal_fault.h"
#include "hal_internal.h"

/* An injected kernel failure: asynchronous, like a real launch failure. */
static okv_status_t kernel_fault(okv_hal_stream_t *stream, const char *what) {
  char msg[96];
  snprintf(msg, sizeof msg, "injected kernel failure: %s did not run", what);
  return stream->device->vtable->enqueue_failure(stream, OKV_STATUS_INTERNAL, msg);
}

static okv_status_t unimplemented(const okv_hal_stream_t *stream, const char *what) {
  return okv_status_make(OKV_STATUS_UNAVAILABLE, "backend '%s' does not implement %s", stream->device->info.backend,
                         what);
}

/* Returns from the calling entry point (validation passed): UNAVAILABLE when
 * the backend lacks kernel `hook`; an injected kernel fault enqueued instead
 * of the kernel; else the backend's hook(stream, ...). */
#define DISPATCH_KERNEL(stream, hook, ...)                                                     \
  do {                                                                                         \
    if ((stream)->device->vtable->hook == NULL) return unimplemented((stream), #hook);         \
    if (okv_hal_fault_op((stream)->device, OKV_HAL_OP_KERNEL, OKV_TIER_COUNT, OKV_TIER_COUNT)) \
      return kernel_fault((stream), #hook);                                                    \
    return (stream)->device->vtable->hook((stream), __VA_ARGS__);                              \
  } while (0)

okv_status_t okv_hal_attention_async(okv_hal_stream_t *stream, const okv_attention_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_attention(stream, desc));
  DISPATCH_KERNEL(stream, attention, desc);
}

okv_status_t okv_hal_summarize_blocks_async(okv_hal_stream_t *stream, const okv_summary_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_summary(stream, desc));
  if (desc->n_blocks == 0) return OKV_OK;
  DISPATCH_KERNEL(stream, summarize_blocks, desc);
}

/* The append of a validated, non-empty desc: the backend's summary_append_ex,
 * or its f32-only summary_append for f32 summaries. */
static okv_status_t summary_append_dispatch(okv_hal_stream_t *stream, const okv_summary_append_desc_t *d) {
  if (stream->device->vtable->summary_append_ex == NULL && d->summary_dtype == OKV_DTYPE_F32) {
    DISPATCH_KERNEL(stream, summary_append, d->summaries, d->head_dim, d->kv_dtype, d->n, d->summary_index, d->keys,
                    d->first);
  }
  DISPATCH_KERNEL(stream, summary_append_ex, d);
}

okv_status_t okv_hal_summary_append_ex_async(okv_hal_stream_t *stream, const okv_summary_append_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_summary_append(stream, desc, "okv_hal_summary_append_ex_async"));
  if (desc->n == 0) return OKV_OK;
  return summary_append_dispatch(stream, desc);
}

okv_status_t okv_hal_summary_append_async(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                          okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index,
                                          const float *keys, const uint8_t *first) {
  const okv_summary_append_desc_t d = {.summaries = summaries,
                                       .head_dim = head_dim,
                                       .kv_dtype = kv_dtype,
                                       .n = n,
                                       .summary_index = summary_index,
                                       .keys = keys,
                                       .first = first,
                                       .summary_dtype = OKV_DTYPE_F32};
  OKV_RETURN_IF_ERROR(okv_hal_validate_summary_append(stream, &d, "okv_hal_summary_append_async"));
  if (n == 0) return OKV_OK;
  return summary_append_dispatch(stream, &d);
}

okv_status_t okv_hal_summary_reduce_async(okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_summary_reduce(stream, desc));
  if (desc->n == 0) return OKV_OK;
  DISPATCH_KERNEL(stream, summary_reduce, desc);
}

okv_status_t okv_hal_kv_write_tokens_async(okv_hal_stream_t *stream, const okv_kv_write_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_kv_write(stream, desc));
  if (desc->n == 0) return OKV_OK;
  /* Not DISPATCH_KERNEL: the fault hooks see the tiers this kernel moves data between (host arrays into kv). */
  if (stream->device->vtable->kv_write == NULL) return unimplemented(stream, "kv_write");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_KERNEL, OKV_TIER_HOST, desc->kv->tier))
    return kernel_fault(stream, "kv_write");
  return stream->device->vtable->kv_write(stream, desc);
}

okv_status_t okv_hal_score_blocks_async(okv_hal_stream_t *stream, const okv_score_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_score(stream, desc));
  DISPATCH_KERNEL(stream, score_blocks, desc);
}

okv_status_t okv_hal_topk_async(okv_hal_stream_t *stream, const okv_topk_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_topk(stream, desc));
  DISPATCH_KERNEL(stream, topk, desc);
}

okv_status_t okv_hal_select_async(okv_hal_stream_t *stream, const okv_select_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_select(stream, desc));
  DISPATCH_KERNEL(stream, select, desc);
}

okv_status_t okv_hal_slot_commit_async(okv_hal_stream_t *stream, const okv_slot_commit_desc_t *desc) {
  OKV_RETURN_IF_ERROR(okv_hal_validate_slot_commit(stream, desc));
  DISPATCH_KERNEL(stream, slot_commit, desc);
}
