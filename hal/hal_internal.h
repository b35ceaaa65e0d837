/* Private helpers shared by the hal/ sources (not used by backends).
 *
 * Which file owns what (each file's opening comment says more):
 *   hal_backend_registry.c  backends compiled in, lookup by name, enumeration
 *   hal_live.c              live-handle registry and reference counts
 *   hal_device.c            device create / retain / release / queries
 *   hal_fault.c             fault-injection hooks (hal/hal_fault.h)
 *   hal_buffer.c            buffers, tier names, tier capacity accounting
 *   hal_stream.c            streams
 *   hal_event.c             events
 *   hal_copy.c              okv_hal_copy_async / okv_hal_copy_blocks_async
 *   hal_dtype.c             dtype sizes and f16 / bf16 conversions
 *   hal_kernels.c           kernel entry points (dispatch)
 *   hal_kernel_validate.c   kernel descriptor validation
 *   hal_kernel_clone.c      kernel descriptor deep copies
 *   hal_status.c, hal_allocator.c  okv_status_t and the system allocator
 *
 * Functions first declared here with OKV_HAL_HIDDEN are not exported from the
 * shared library: the split into files adds no symbol to its interface. */
#ifndef OASISKV_HAL_INTERNAL_H
#define OASISKV_HAL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "hal_impl.h"

#if defined(__GNUC__)
#define OKV_HAL_HIDDEN __attribute__((visibility("hidden")))
#else
#define OKV_HAL_HIDDEN
#endif

/* ---- Live handles (hal_live.c) ---- */

/* Adds one reference to a live object of `kind`; INVALID_ARGUMENT for a dead
 * or wrong-kind handle (nothing touched). Thread-safe. */
okv_status_t okv_hal_live_retain(void *obj, okv_hal_kind_t kind, const char *arg_name);

/* Drops one reference. When it was the last one, the handle is unregistered
 * (atomically with the decrement, so a concurrent or repeated release fails
 * with INVALID_ARGUMENT) and *out_last is set: the caller then destroys the
 * object. Thread-safe. */
okv_status_t okv_hal_live_release(void *obj, okv_hal_kind_t kind, const char *arg_name, bool *out_last);

/* Like okv_hal_resource_init (ref_count = 1, registered) but reports whether
 * the registry could grow: OUT_OF_MEMORY otherwise. */
okv_status_t okv_hal_resource_register(okv_hal_resource_t *res, okv_hal_kind_t kind);

/* Removes `obj` from the live set (used when a half-built object is torn down). */
void okv_hal_live_forget(const void *obj);

/* Name of a kind ("device", "buffer", "stream", "event"). */
const char *okv_hal_kind_name(okv_hal_kind_t kind);

/* Returns the INVALID_ARGUMENT of okv_hal_check_live from the calling function
 * unless `obj` is a live object of `kind`. */
#define OKV_HAL_CHECK(obj, kind, name) OKV_RETURN_IF_ERROR(okv_hal_check_live((obj), (kind), (name)))

/* ---- Lifetime of HAL objects ---- */

/* Defines okv_hal_<name>_retain and okv_hal_<name>_release for objects of
 * `type` registered as `kind` (errors name the argument #name): references
 * counted by the live-handle registry; the release that drops the last one
 * calls destroy(obj), which frees the object and drops what it holds. */
#define OKV_HAL_DEFINE_REFCOUNT(name, type, kind, destroy)                                          \
  okv_status_t okv_hal_##name##_retain(type *obj) { return okv_hal_live_retain(obj, kind, #name); } \
  okv_status_t okv_hal_##name##_release(type *obj) {                                                \
    bool last = false;                                                                              \
    OKV_RETURN_IF_ERROR(okv_hal_live_release(obj, kind, #name, &last));                             \
    if (last) destroy(obj);                                                                         \
    return OKV_OK;                                                                                  \
  }

/* After a backend create hook of `device` returned `s` and `obj` (a buffer,
 * stream or event, #name): INTERNAL when it returned no object, else the
 * object gets its device and is registered as `kind`; when that fails the
 * backend's <name>_destroy hook frees it. `s` is updated. */
#define OKV_HAL_ADOPT(s, obj, device, kind, name)                                                          \
  do {                                                                                                     \
    if ((s) == OKV_OK && !(obj)) (s) = okv_status_make(OKV_STATUS_INTERNAL, "backend returned no " #name); \
    if ((s) == OKV_OK) {                                                                                   \
      (obj)->device = (device);                                                                            \
      (s) = okv_hal_resource_register(&(obj)->base, (kind));                                               \
      if ((s) != OKV_OK) (device)->vtable->name##_destroy(obj);                                            \
    }                                                                                                      \
  } while (0)

/* Defines the lifetime of a device's streams or events (name: stream or
 * event, okv_hal_<name>_t): okv_hal_<name>_create (argument checks, the fault
 * point `op`, the backend's <name>_create hook; the object holds a device
 * reference) and okv_hal_<name>_retain / _release (the last release runs the
 * backend's <name>_destroy hook, then drops the device reference). Needs
 * hal_fault.h. */
#define OKV_HAL_DEFINE_DEVICE_CHILD(name, kind, op)                                          \
  static void name##_destroy_last(okv_hal_##name##_t *obj) {                                 \
    okv_hal_device_t *dev = obj->device;                                                     \
    dev->vtable->name##_destroy(obj);                                                        \
    OKV_IGNORE_ERROR(okv_hal_device_release(dev));                                           \
  }                                                                                          \
  okv_status_t okv_hal_##name##_create(okv_hal_device_t *device, okv_hal_##name##_t **out) { \
    if (!out) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_" #name ": NULL");    \
    *out = NULL;                                                                             \
    OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");                                    \
    OKV_HAL_FAULT_SYNC(device, (op), OKV_TIER_COUNT, OKV_TIER_COUNT);                        \
    OKV_RETURN_IF_ERROR(okv_hal_device_retain(device));                                      \
    okv_hal_##name##_t *obj = NULL;                                                          \
    okv_status_t s = device->vtable->name##_create(device, &obj);                            \
    OKV_HAL_ADOPT(s, obj, device, (kind), name);                                             \
    if (s != OKV_OK) {                                                                       \
      OKV_IGNORE_ERROR(okv_hal_device_release(device));                                      \
      return s;                                                                              \
    }                                                                                        \
    *out = obj;                                                                              \
    return OKV_OK;                                                                           \
  }                                                                                          \
  OKV_HAL_DEFINE_REFCOUNT(name, okv_hal_##name##_t, (kind), name##_destroy_last)

/* ---- Backends and devices (hal_backend_registry.c, hal_device.c) ---- */

/* The backend named `name`: OKV_OK and *out_backend, or NOT_FOUND listing the
 * backends of this build (and *out_backend = NULL). */
OKV_HAL_HIDDEN okv_status_t okv_hal_backend_lookup(const char *name, const okv_hal_backend_t **out_backend);

/* Checks device parameters for backend `b` before anything is created:
 * INVALID_ARGUMENT naming the field for a negative ordinal or n_threads, a
 * link value that is negative or not finite, or non-zero link values on a
 * backend without link emulation (its link is real). */
OKV_HAL_HIDDEN okv_status_t okv_hal_device_params_check(const okv_hal_backend_t *b,
                                                        const okv_hal_device_params_t *params);

/* Destroys a device whose last reference was dropped (hal_device.c). */
void okv_hal_device_destroy(okv_hal_device_t *device);

/* ---- Tiers and ranges ---- */

static inline bool okv_hal_tier_valid(okv_tier_t tier) { return (int)tier >= 0 && (int)tier < OKV_TIER_COUNT; }

/* [offset, offset + bytes) inside a buffer of `size` bytes, without overflow. */
static inline bool okv_hal_range_ok(uint64_t size, uint64_t offset, uint64_t bytes) {
  return offset <= size && bytes <= size - offset;
}

/* ---- Streams (hal_stream.c) ---- */

/* INVALID_ARGUMENT "<arg>: belongs to another device than the stream" unless
 * `other` is the stream's device. */
OKV_HAL_HIDDEN okv_status_t okv_hal_stream_same_device(const okv_hal_stream_t *stream, const okv_hal_device_t *other,
                                                       const char *arg);

/* ---- Kernel descriptor validation (hal_kernel_validate.c) ----
 * Each checks everything its okv_hal_*_async entry point needs before
 * dispatch: OKV_OK, or INVALID_ARGUMENT naming the entry point and the field.
 * An empty request (n_blocks / n == 0) is OKV_OK once the stream, shape and
 * buffers are checked; the caller then returns without dispatching. */
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_attention(const okv_hal_stream_t *stream,
                                                       const okv_attention_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_summary(const okv_hal_stream_t *stream, const okv_summary_desc_t *desc);
/* `fn` names the entry point in messages (the _ex one or the f32 wrapper). */
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_summary_append(const okv_hal_stream_t *stream,
                                                            const okv_summary_append_desc_t *desc, const char *fn);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_summary_reduce(const okv_hal_stream_t *stream,
                                                            const okv_summary_reduce_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_kv_write(const okv_hal_stream_t *stream, const okv_kv_write_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_select(const okv_hal_stream_t *stream, const okv_select_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_slot_commit(const okv_hal_stream_t *stream,
                                                         const okv_slot_commit_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_score(const okv_hal_stream_t *stream, const okv_score_desc_t *desc);
OKV_HAL_HIDDEN okv_status_t okv_hal_validate_topk(const okv_hal_stream_t *stream, const okv_topk_desc_t *desc);

#endif
