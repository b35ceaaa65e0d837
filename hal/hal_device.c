/* Devices: parameter checks, creation (through the backend registry),
 * reference counting, destruction, the device queries (info, tier usage,
 * allocator) and the emulated link's run-time setting.
 * Owns: the hal/ part of okv_hal_device_t (base, fault_hooks reset, allocator,
 * capacity_bytes, used_bytes reset, usage_mutex, n_threads) and the link fields
 * of info after creation (written under usage_mutex); see the field ownership
 * note at the end of hal/hal_impl.h.
 * May touch: the backend's create / device_destroy / set_link hooks, the live-handle
 * registry (hal_live.c); reads used_bytes under usage_mutex (written by
 * hal_buffer.c). Never touches buffers, streams or events. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "hal_internal.h"

void okv_hal_device_params_init(okv_hal_device_params_t *params) {
  if (!params) return;
  memset(params, 0, sizeof(*params));
  params->ordinal = 0;
  params->n_threads = 0;
}

static int hal_online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* A link value: finite and >= 0. */
static okv_status_t link_value_check(const char *field, double v) {
  if (!isfinite(v) || v < 0.0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: %g must be finite and >= 0 (0 = unpaced)", field, v);
  return OKV_OK;
}

/* Non-zero link values on a backend whose link is real. */
static okv_status_t link_refused(const char *backend, const char *field) {
  return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                         "%s: the %s backend's HOST<->DEVICE link is real; link emulation is a cpu-backend feature",
                         field, backend);
}

okv_status_t okv_hal_device_params_check(const okv_hal_backend_t *b, const okv_hal_device_params_t *params) {
  if (params->ordinal < 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "params->ordinal: %d is negative", params->ordinal);
  if (params->n_threads < 0)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "params->n_threads: %d is negative", params->n_threads);
  OKV_RETURN_IF_ERROR(link_value_check("params->link_bytes_per_s", params->link_bytes_per_s));
  OKV_RETURN_IF_ERROR(link_value_check("params->link_latency_s", params->link_latency_s));
  if (!b->link_emulation && (params->link_bytes_per_s != 0.0 || params->link_latency_s != 0.0))
    return link_refused(b->name,
                        params->link_bytes_per_s != 0.0 ? "params->link_bytes_per_s" : "params->link_latency_s");
  return OKV_OK;
}

okv_status_t okv_hal_device_create(const char *backend_name, const okv_hal_device_params_t *params,
                                   const okv_allocator_t *allocator, okv_hal_device_t **out_device) {
  if (!out_device) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_device: NULL");
  *out_device = NULL;
  okv_hal_device_params_t defaults;
  okv_hal_device_params_init(&defaults);
  if (!params) params = &defaults;
  if (allocator && (!allocator->malloc_fn || !allocator->free_fn))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "allocator: malloc_fn and free_fn are required");
  const okv_hal_backend_t *b = NULL;
  OKV_RETURN_IF_ERROR(okv_hal_backend_lookup(backend_name, &b));
  OKV_RETURN_IF_ERROR(okv_hal_device_params_check(b, params));

  okv_allocator_t alloc = allocator ? *allocator : okv_allocator_system();
  okv_hal_device_t *dev = NULL;
  OKV_RETURN_IF_ERROR(okv_status_annotate(b->create(params, &alloc, &dev), "creating a %s device", b->name));
  if (!dev || !dev->vtable) return okv_status_make(OKV_STATUS_INTERNAL, "backend '%s' returned no device", b->name);

  dev->fault_hooks = NULL;
  dev->allocator = alloc;
  for (int t = 0; t < OKV_TIER_COUNT; ++t) {
    uint64_t cap = params->capacity_bytes[t];
    if (cap == 0) cap = dev->capacity_bytes[t];
    if (cap == 0)
      cap = (t == OKV_TIER_DEVICE && dev->info.physical_bytes[t]) ? dev->info.physical_bytes[t] : UINT64_MAX;
    dev->capacity_bytes[t] = cap;
    dev->used_bytes[t] = 0;
  }
  dev->n_threads = params->n_threads > 0 ? params->n_threads : hal_online_cpus();
  if (pthread_mutex_init(&dev->usage_mutex, NULL) != 0) {
    dev->vtable->device_destroy(dev);
    return okv_status_make(OKV_STATUS_INTERNAL, "device: pthread_mutex_init failed");
  }
  okv_status_t s = okv_hal_resource_register(&dev->base, OKV_HAL_KIND_DEVICE);
  if (s != OKV_OK) {
    pthread_mutex_destroy(&dev->usage_mutex);
    dev->vtable->device_destroy(dev);
    return s;
  }
  *out_device = dev;
  return OKV_OK;
}

void okv_hal_device_destroy(okv_hal_device_t *device) {
  pthread_mutex_destroy(&device->usage_mutex);
  device->vtable->device_destroy(device);
}

/* okv_hal_device_retain, okv_hal_device_release. */
OKV_HAL_DEFINE_REFCOUNT(device, okv_hal_device_t, OKV_HAL_KIND_DEVICE, okv_hal_device_destroy)

okv_status_t okv_hal_device_info(const okv_hal_device_t *device, okv_hal_device_info_t *out_info) {
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!out_info) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_info: NULL");
  okv_hal_device_t *dev = (okv_hal_device_t *)device;
  pthread_mutex_lock(&dev->usage_mutex); /* okv_hal_device_set_link may update the link fields */
  *out_info = device->info;
  pthread_mutex_unlock(&dev->usage_mutex);
  return OKV_OK;
}

okv_status_t okv_hal_device_set_link(okv_hal_device_t *device, double bytes_per_s, double latency_s) {
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  OKV_RETURN_IF_ERROR(link_value_check("bytes_per_s", bytes_per_s));
  OKV_RETURN_IF_ERROR(link_value_check("latency_s", latency_s));
  if (!device->vtable->set_link) return link_refused(device->info.backend, "device");
  device->vtable->set_link(device, bytes_per_s, latency_s);
  pthread_mutex_lock(&device->usage_mutex);
  device->info.link_bytes_per_s = bytes_per_s;
  device->info.link_latency_s = latency_s;
  pthread_mutex_unlock(&device->usage_mutex);
  return OKV_OK;
}

okv_status_t okv_hal_device_tier_usage(const okv_hal_device_t *device, okv_tier_t tier, uint64_t *out_capacity_bytes,
                                       uint64_t *out_used_bytes) {
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!okv_hal_tier_valid(tier))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: %d is not a tier", (int)tier);
  okv_hal_device_t *dev = (okv_hal_device_t *)device;
  pthread_mutex_lock(&dev->usage_mutex);
  uint64_t cap = dev->capacity_bytes[tier], used = dev->used_bytes[tier];
  pthread_mutex_unlock(&dev->usage_mutex);
  if (out_capacity_bytes) *out_capacity_bytes = cap;
  if (out_used_bytes) *out_used_bytes = used;
  return OKV_OK;
}

const okv_allocator_t *okv_hal_device_allocator(const okv_hal_device_t *device) {
  okv_status_t s = okv_hal_check_live(device, OKV_HAL_KIND_DEVICE, "device");
  if (s != OKV_OK) {
    okv_status_free(s);
    return NULL;
  }
  return &device->allocator;
}
