/* Buffers and the memory tiers they live in: allocation against the device's
 * per-tier capacity, reference counting, the accessors, and the blocking
 * host <-> buffer reads and writes.
 * Owns: the hal/ part of okv_hal_buffer_t (base, device reference, tier,
 * size) and the device's used_bytes accounting (reserve / unreserve under
 * usage_mutex); okv_tier_name.
 * May touch: the device's capacity_bytes / used_bytes (under usage_mutex),
 * its fault hooks (read), the backend's buffer_* hooks, the device's
 * reference count. Never touches streams or events. */
#include <inttypes.h>

#include "hal_fault.h"
#include "hal_internal.h"

const char *okv_tier_name(okv_tier_t tier) {
  switch (tier) {
    case OKV_TIER_DEVICE: return "device";
    case OKV_TIER_HOST: return "host";
    case OKV_TIER_REMOTE: return "remote";
    default: return "unknown";
  }
}

static void tier_unreserve(okv_hal_device_t *dev, okv_tier_t tier, uint64_t bytes) {
  pthread_mutex_lock(&dev->usage_mutex);
  dev->used_bytes[tier] = dev->used_bytes[tier] >= bytes ? dev->used_bytes[tier] - bytes : 0;
  pthread_mutex_unlock(&dev->usage_mutex);
}

okv_status_t okv_hal_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                  okv_hal_buffer_t **out_buffer) {
  if (!out_buffer) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_buffer: NULL");
  *out_buffer = NULL;
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!okv_hal_tier_valid(tier))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: %d is not a tier", (int)tier);
  if (!(device->info.alloc_tiers & OKV_TIER_BIT(tier)))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: the %s backend cannot allocate the %s tier",
                           device->info.backend, okv_tier_name(tier));
  if (bytes == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "bytes: 0 (must be > 0)");
  if (bytes > (uint64_t)SIZE_MAX)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s tier: %" PRIu64 " bytes exceed the address space",
                           okv_tier_name(tier), bytes);
  const okv_hal_fault_hooks_t *hooks = device->fault_hooks;
  if (hooks && hooks->fail_alloc && hooks->fail_alloc(hooks->user, tier, bytes))
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s tier: injected allocation failure of %" PRIu64 " bytes",
                           okv_tier_name(tier), bytes);
  if (okv_hal_fault_op(device, OKV_HAL_OP_BUFFER_ALLOC, OKV_TIER_COUNT, tier))
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "%s tier: injected buffer_alloc failure of %" PRIu64 " bytes",
                           okv_tier_name(tier), bytes);

  /* Reserve capacity first, so concurrent allocations cannot overshoot. */
  pthread_mutex_lock(&device->usage_mutex);
  uint64_t cap = device->capacity_bytes[tier], used = device->used_bytes[tier];
  if (used > cap || bytes > cap - used) {
    pthread_mutex_unlock(&device->usage_mutex);
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY,
                           "%s tier full: requested %" PRIu64 " bytes, %" PRIu64 " of %" PRIu64 " used",
                           okv_tier_name(tier), bytes, used, cap);
  }
  device->used_bytes[tier] = used + bytes;
  pthread_mutex_unlock(&device->usage_mutex);

  okv_status_t s = okv_hal_device_retain(device);
  if (s != OKV_OK) {
    tier_unreserve(device, tier, bytes);
    return s;
  }
  okv_hal_buffer_t *buf = NULL;
  s = device->vtable->buffer_alloc(device, tier, bytes, &buf);
  if (s == OKV_OK && buf) {
    buf->tier = tier;
    buf->size = bytes;
  }
  OKV_HAL_ADOPT(s, buf, device, OKV_HAL_KIND_BUFFER, buffer);
  if (s != OKV_OK) {
    tier_unreserve(device, tier, bytes);
    OKV_IGNORE_ERROR(okv_hal_device_release(device));
    return s;
  }
  *out_buffer = buf;
  return OKV_OK;
}

/* Frees a buffer whose last reference went: the backend's part, its tier
 * capacity, its device reference. */
static void hal_buffer_destroy(okv_hal_buffer_t *buffer) {
  okv_hal_device_t *dev = buffer->device;
  okv_tier_t tier = buffer->tier;
  uint64_t size = buffer->size;
  dev->vtable->buffer_destroy(buffer);
  tier_unreserve(dev, tier, size);
  OKV_IGNORE_ERROR(okv_hal_device_release(dev));
}

/* okv_hal_buffer_retain, okv_hal_buffer_release. */
OKV_HAL_DEFINE_REFCOUNT(buffer, okv_hal_buffer_t, OKV_HAL_KIND_BUFFER, hal_buffer_destroy)

uint64_t okv_hal_buffer_size(const okv_hal_buffer_t *buffer) {
  if (okv_status_consume(okv_hal_check_live(buffer, OKV_HAL_KIND_BUFFER, "buffer")) != OKV_STATUS_OK) return 0;
  return buffer->size;
}

okv_tier_t okv_hal_buffer_tier(const okv_hal_buffer_t *buffer) {
  if (okv_status_consume(okv_hal_check_live(buffer, OKV_HAL_KIND_BUFFER, "buffer")) != OKV_STATUS_OK)
    return OKV_TIER_COUNT;
  return buffer->tier;
}

void *okv_hal_buffer_host_ptr(const okv_hal_buffer_t *buffer) {
  if (okv_status_consume(okv_hal_check_live(buffer, OKV_HAL_KIND_BUFFER, "buffer")) != OKV_STATUS_OK) return NULL;
  return buffer->host_ptr;
}

/* The blocking host transfers: `src` into the buffer when writing, the
 * buffer into `dst` when reading. */
static okv_status_t hal_buffer_io(okv_hal_buffer_t *buffer, uint64_t offset, uint64_t bytes, bool write,
                                  const void *src, void *dst) {
  OKV_HAL_CHECK(buffer, OKV_HAL_KIND_BUFFER, "buffer");
  if (!okv_hal_range_ok(buffer->size, offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s buffer of %" PRIu64 " bytes",
                           offset, bytes, okv_tier_name(buffer->tier), buffer->size);
  if (bytes == 0) return OKV_OK;
  if (write ? !src : !dst) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: NULL", write ? "src" : "dst");
  if (write) {
    OKV_HAL_FAULT_SYNC(buffer->device, OKV_HAL_OP_BUFFER_WRITE, OKV_TIER_HOST, buffer->tier);
    return buffer->device->vtable->buffer_write(buffer, offset, src, bytes);
  }
  OKV_HAL_FAULT_SYNC(buffer->device, OKV_HAL_OP_BUFFER_READ, buffer->tier, OKV_TIER_HOST);
  return buffer->device->vtable->buffer_read(buffer, offset, dst, bytes);
}

okv_status_t okv_hal_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes) {
  return hal_buffer_io(buffer, offset, bytes, true, src, NULL);
}

okv_status_t okv_hal_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes) {
  return hal_buffer_io(buffer, offset, bytes, false, NULL, dst);
}
