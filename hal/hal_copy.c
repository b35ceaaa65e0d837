/* Copies: okv_hal_copy_async and okv_hal_copy_blocks_async. Validates the
 * handles, the tier pair against the device's copy_mask and every byte range
 * (overflow-safe) before anything is enqueued, consults the copy fault hooks,
 * then dispatches to the backend.
 * Owns: nothing; it holds no state.
 * May touch: buffers and streams read-only (device, tier, size), the device's
 * info.copy_mask and fault hooks (read), the backend's copy / copy_blocks /
 * enqueue_failure hooks. */
#include <inttypes.h>
#include <stdio.h>

#include "hal_fault.h"
#include "hal_internal.h"

static okv_status_t copy_check_common(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst) {
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_HAL_CHECK(src, OKV_HAL_KIND_BUFFER, "src");
  OKV_HAL_CHECK(dst, OKV_HAL_KIND_BUFFER, "dst");
  OKV_RETURN_IF_ERROR(okv_hal_stream_same_device(stream, src->device, "src"));
  OKV_RETURN_IF_ERROR(okv_hal_stream_same_device(stream, dst->device, "dst"));
  const okv_hal_device_info_t *info = &stream->device->info;
  if (!(info->copy_mask[src->tier] & OKV_TIER_BIT(dst->tier)))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "src/dst: the %s backend cannot copy %s -> %s", info->backend,
                           okv_tier_name(src->tier), okv_tier_name(dst->tier));
  return OKV_OK;
}

static bool fault_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst, size_t n_blocks,
                       uint64_t bytes) {
  const okv_hal_fault_hooks_t *hooks = stream->device->fault_hooks;
  if (hooks && hooks->fail_copy && hooks->fail_copy(hooks->user, src->tier, dst->tier, n_blocks, bytes)) return true;
  return okv_hal_fault_op(stream->device, OKV_HAL_OP_COPY, src->tier, dst->tier);
}

static okv_status_t enqueue_copy_failure(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                         size_t n_blocks, uint64_t bytes) {
  char msg[160];
  snprintf(msg, sizeof(msg), "injected copy failure: %s -> %s, %zu block(s), %" PRIu64 " bytes",
           okv_tier_name(src->tier), okv_tier_name(dst->tier), n_blocks, bytes);
  return stream->device->vtable->enqueue_failure(stream, OKV_STATUS_COPY_FAILED, msg);
}

okv_status_t okv_hal_copy_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                                okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes) {
  OKV_RETURN_IF_ERROR(copy_check_common(stream, src, dst));
  if (!okv_hal_range_ok(src->size, src_offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "src_offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s source of %" PRIu64 " bytes",
                           src_offset, bytes, okv_tier_name(src->tier), src->size);
  if (!okv_hal_range_ok(dst->size, dst_offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "dst_offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s destination of %" PRIu64
                           " bytes",
                           dst_offset, bytes, okv_tier_name(dst->tier), dst->size);
  if (bytes == 0) return OKV_OK;
  if (fault_copy(stream, src, dst, 1, bytes)) return enqueue_copy_failure(stream, src, dst, 1, bytes);
  return stream->device->vtable->copy(stream, src, src_offset, dst, dst_offset, bytes);
}

okv_status_t okv_hal_copy_blocks_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                       uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs) {
  OKV_RETURN_IF_ERROR(copy_check_common(stream, src, dst));
  if (n_blocks == 0) return OKV_OK;
  if (!pairs) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "pairs: NULL with n_blocks %zu", n_blocks);
  if (block_bytes == 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "block_bytes: 0 with n_blocks %zu", n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) {
    if (!okv_hal_range_ok(src->size, pairs[i].src_offset, block_bytes))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "pairs[%zu].src_offset: [%" PRIu64 ", +%" PRIu64 ") outside the %s source of %" PRIu64
                             " bytes",
                             i, pairs[i].src_offset, block_bytes, okv_tier_name(src->tier), src->size);
    if (!okv_hal_range_ok(dst->size, pairs[i].dst_offset, block_bytes))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "pairs[%zu].dst_offset: [%" PRIu64 ", +%" PRIu64 ") outside the %s destination of %" PRIu64
                             " bytes",
                             i, pairs[i].dst_offset, block_bytes, okv_tier_name(dst->tier), dst->size);
  }
  uint64_t total = (n_blocks > UINT64_MAX / block_bytes) ? UINT64_MAX : (uint64_t)n_blocks * block_bytes;
  if (fault_copy(stream, src, dst, n_blocks, total)) return enqueue_copy_failure(stream, src, dst, n_blocks, total);
  return stream->device->vtable->copy_blocks(stream, src, dst, block_bytes, n_blocks, pairs);
}
