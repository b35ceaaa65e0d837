/* Fault injection for tests: a device can be given hooks that make chosen
 * allocations and copies fail, without a real fault. Internal (not installed),
 * but exported from the library so test programs can use it.
 * Thread safety: install hooks before the device is shared between threads. */
#ifndef OASISKV_HAL_FAULT_H
#define OASISKV_HAL_FAULT_H

#include "hal/hal_impl.h"

struct okv_hal_fault_hooks_t {
  void *user;
  /* Return true to make okv_hal_buffer_alloc(tier, bytes) fail with
   * OUT_OF_MEMORY (nothing allocated). NULL = never. */
  bool (*fail_alloc)(void *user, okv_tier_t tier, uint64_t bytes);
  /* Return true to make this copy (okv_hal_copy_async, or one whole
   * okv_hal_copy_blocks_async batch with n_blocks blocks) fail: nothing is
   * copied, the call itself returns OK, and the stream's next event / synchronize
   * reports COPY_FAILED. NULL = never. */
  bool (*fail_copy)(void *user, okv_tier_t src_tier, okv_tier_t dst_tier, size_t n_blocks, uint64_t bytes);
};

/* Installs (or, with NULL, removes) hooks; `hooks` is borrowed and must outlive
 * the device or the next call. Errors: INVALID_ARGUMENT for a dead handle. */
okv_status_t okv_hal_device_set_fault_hooks(okv_hal_device_t *device, const okv_hal_fault_hooks_t *hooks);

#endif
