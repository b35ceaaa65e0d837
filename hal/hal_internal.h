/* Private helpers shared by the hal/ sources (not used by backends). */
#ifndef OASISKV_HAL_INTERNAL_H
#define OASISKV_HAL_INTERNAL_H

#include <stdbool.h>

#include "hal/hal_impl.h"

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

/* Destroys a device whose last reference was dropped (hal_device.c). */
void okv_hal_device_destroy(okv_hal_device_t *device);

#endif
