/* Fault injection for tests (hal/hal_fault.h): the operation names, the
 * hook query every public entry makes, the status an injected synchronous
 * failure returns, and installing hooks on a device.
 * Owns: okv_hal_device_t.fault_hooks (set here; reset by device creation).
 * May touch: nothing else of a device; it only reads the hooks and calls
 * them. The asynchronous failures (copies, kernels) are enqueued by
 * hal_copy.c and hal_kernels.c through the backend's enqueue_failure. */
#include "hal_fault.h"
#include "hal_internal.h"

static const char *const k_op_names[OKV_HAL_OP_COUNT] = {
    "buffer_alloc", "buffer_write", "buffer_read", "stream_create", "stream_synchronize",
    "event_create", "event_record", "event_wait",  "copy",          "kernel"};

const char *okv_hal_op_name(okv_hal_op_t op) { return (unsigned)op < OKV_HAL_OP_COUNT ? k_op_names[op] : "unknown"; }

bool okv_hal_fault_op(const okv_hal_device_t *device, okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  const okv_hal_fault_hooks_t *hooks = device ? device->fault_hooks : NULL;
  return hooks && hooks->fail_op && hooks->fail_op(hooks->user, op, src, dst);
}

okv_status_t okv_hal_fault_status(okv_hal_op_t op, okv_tier_t src, okv_tier_t dst) {
  okv_status_code_t code = OKV_STATUS_INTERNAL;
  if (op == OKV_HAL_OP_BUFFER_ALLOC) code = OKV_STATUS_OUT_OF_MEMORY;
  if (op == OKV_HAL_OP_BUFFER_WRITE || op == OKV_HAL_OP_BUFFER_READ || op == OKV_HAL_OP_COPY)
    code = OKV_STATUS_COPY_FAILED;
  if (op == OKV_HAL_OP_STREAM_CREATE || op == OKV_HAL_OP_EVENT_CREATE) code = OKV_STATUS_UNAVAILABLE;
  return okv_status_make(code, "injected %s failure (%s -> %s)", okv_hal_op_name(op),
                         (unsigned)src < OKV_TIER_COUNT ? okv_tier_name(src) : "-",
                         (unsigned)dst < OKV_TIER_COUNT ? okv_tier_name(dst) : "-");
}

okv_status_t okv_hal_device_set_fault_hooks(okv_hal_device_t *device, const okv_hal_fault_hooks_t *hooks) {
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  device->fault_hooks = hooks;
  return OKV_OK;
}
