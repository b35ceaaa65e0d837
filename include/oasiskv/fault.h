/* OasisKV fault injection: a documented testing interface of the installed
 * library (in the manner of SQLite's test-control interface), for engine
 * integrators to test their own error paths and for OasisKV's fault sweep
 * (docs/api.md "Faults"). A device can be given hooks that make chosen HAL
 * operations fail, without a real fault.
 *
 * Thread safety: install or remove hooks before the device is shared between
 * threads, or while no other thread uses it; the hooks themselves are called
 * from whichever thread makes the operation and must be thread-safe then.
 * Ownership: `hooks` is borrowed and must outlive the device or the next call. */
#ifndef OASISKV_FAULT_H
#define OASISKV_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oasiskv/api.h"
#include "oasiskv/hal.h"
#include "oasiskv/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every HAL operation the fault hooks can see, for SQLite-style sweeps: run a
 * workload once counting operations, then fail the N-th one. */
typedef enum okv_hal_op_e {
  OKV_HAL_OP_BUFFER_ALLOC = 0, /* fails with OUT_OF_MEMORY, nothing allocated */
  OKV_HAL_OP_BUFFER_WRITE,     /* synchronous host -> buffer write; fails with COPY_FAILED, nothing written */
  OKV_HAL_OP_BUFFER_READ,      /* synchronous buffer -> host read; fails with COPY_FAILED */
  OKV_HAL_OP_STREAM_CREATE,    /* fails with UNAVAILABLE */
  OKV_HAL_OP_STREAM_SYNC,      /* fails with INTERNAL (the stream's work may or may not have run) */
  OKV_HAL_OP_EVENT_CREATE,     /* fails with UNAVAILABLE */
  OKV_HAL_OP_EVENT_RECORD,     /* fails with INTERNAL, nothing recorded */
  OKV_HAL_OP_EVENT_WAIT,       /* fails with INTERNAL */
  OKV_HAL_OP_COPY,             /* okv_hal_copy_async / okv_hal_copy_blocks_async: the call returns OK, nothing is
                                  copied, the stream's next event / synchronize reports COPY_FAILED */
  OKV_HAL_OP_KERNEL,           /* any kernel launch: returns OK, the kernel does not run, the stream's next
                                  event / synchronize reports INTERNAL. Tiers OKV_TIER_COUNT, except the token
                                  write (okv_hal_kv_write_tokens_async): src HOST, dst the slots' tier */
  OKV_HAL_OP_COUNT
} okv_hal_op_t;

/* "buffer_alloc", "copy", "kernel", ...; "unknown" outside the enum. Thread-safe. */
OKV_API const char *okv_hal_op_name(okv_hal_op_t op);

typedef struct okv_hal_fault_hooks_t {
  void *user;
  /* Return true to make okv_hal_buffer_alloc(tier, bytes) fail with
   * OUT_OF_MEMORY (nothing allocated). NULL = never. */
  bool (*fail_alloc)(void *user, okv_tier_t tier, uint64_t bytes);
  /* Return true to make this copy (okv_hal_copy_async, or one whole
   * okv_hal_copy_blocks_async batch with n_blocks blocks) fail: nothing is
   * copied, the call itself returns OK, and the stream's next event / synchronize
   * reports COPY_FAILED. NULL = never. */
  bool (*fail_copy)(void *user, okv_tier_t src_tier, okv_tier_t dst_tier, size_t n_blocks, uint64_t bytes);
  /* Called once for every operation of the kinds above (after argument
   * validation, so invalid calls are not counted), from the calling thread;
   * return true to make it fail as described at okv_hal_op_t. `src`/`dst` are
   * the tiers involved (OKV_TIER_COUNT where none). Consulted after fail_alloc /
   * fail_copy. NULL = never. Must be thread-safe if the device is shared. */
  bool (*fail_op)(void *user, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst);
} okv_hal_fault_hooks_t;

/* Installs (or, with NULL, removes) hooks on `device`; `hooks` is borrowed and
 * must outlive the device or the next call.
 * Errors: INVALID_ARGUMENT for a dead or NULL device handle. */
OKV_API okv_status_t okv_hal_device_set_fault_hooks(okv_hal_device_t *device, const okv_hal_fault_hooks_t *hooks);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_FAULT_H */
