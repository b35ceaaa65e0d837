/* Internal to hal/: the fault-injection checks every HAL entry point makes
 * (the public interface is include/oasiskv/fault.h). */
#ifndef OASISKV_HAL_FAULT_H
#define OASISKV_HAL_FAULT_H

#include "hal_impl.h"
#include "oasiskv/fault.h"

bool okv_hal_fault_op(const okv_hal_device_t *device, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst);
/* Internal to hal/: the status a failed synchronous operation returns. */
okv_status_t okv_hal_fault_status(okv_hal_op_t op, okv_tier_t src, okv_tier_t dst);

/* Internal to hal/: returns the injected failure of a synchronous operation
 * from the calling function when the fail_op hook asks for one. */
#define OKV_HAL_FAULT_SYNC(dev, op, src, dst)                                                         \
  do {                                                                                                \
    if (okv_hal_fault_op((dev), (op), (src), (dst))) return okv_hal_fault_status((op), (src), (dst)); \
  } while (0)

/* Internal to hal/: returns `call` (a blocking backend call on `dev`) from
 * the calling function; when the fail_op hook asks for a failure at `op`, the
 * call still completes (its status is consumed) and the injected failure is
 * returned instead. */
#define OKV_HAL_FAULT_AFTER(dev, op, call)                               \
  do {                                                                   \
    if (okv_hal_fault_op((dev), (op), OKV_TIER_COUNT, OKV_TIER_COUNT)) { \
      okv_status_free(call);                                             \
      return okv_hal_fault_status((op), OKV_TIER_COUNT, OKV_TIER_COUNT); \
    }                                                                    \
    return (call);                                                       \
  } while (0)

#endif
