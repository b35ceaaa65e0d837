/* Public HAL entry points for devices, buffers, streams, events and copies:
 * validate handles (live-handle registry), devices, tiers and byte ranges,
 * account tier capacity, consult fault hooks, then dispatch through the
 * device's vtable. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "hal/hal_fault.h"
#include "hal/hal_internal.h"


const char *okv_tier_name(okv_tier_t tier) {
  switch (tier) {
    case OKV_TIER_DEVICE: return "device";
    case OKV_TIER_HOST: return "host";
    case OKV_TIER_REMOTE: return "remote";
    default: return "unknown";
  }
}

static bool okv_tier_valid(okv_tier_t tier) { return (int)tier >= 0 && (int)tier < OKV_TIER_COUNT; }

/* [offset, offset + bytes) inside a buffer of `size` bytes, without overflow. */
static bool okv_range_ok(uint64_t size, uint64_t offset, uint64_t bytes) {
  return offset <= size && bytes <= size - offset;
}

#define OKV_CHECK(obj, kind, name) OKV_RETURN_IF_ERROR(okv_hal_check_live((obj), (kind), (name)))

/* ---- Devices ---- */

void okv_hal_device_destroy(okv_hal_device_t *device) {
  pthread_mutex_destroy(&device->usage_mutex);
  device->vtable->device_destroy(device);
}

okv_status_t okv_hal_device_info(const okv_hal_device_t *device, okv_hal_device_info_t *out_info) {
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!out_info) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_info: NULL");
  *out_info = device->info;
  return OKV_OK;
}

okv_status_t okv_hal_device_tier_usage(const okv_hal_device_t *device, okv_tier_t tier,
                                       uint64_t *out_capacity_bytes, uint64_t *out_used_bytes) {
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!okv_tier_valid(tier)) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: %d is not a tier", (int)tier);
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

#define OKV_FAULT_SYNC(dev, op, src, dst)                                              \
  do {                                                                                 \
    if (okv_hal_fault_op((dev), (op), (src), (dst))) return okv_hal_fault_status((op), (src), (dst)); \
  } while (0)

okv_status_t okv_hal_device_set_fault_hooks(okv_hal_device_t *device, const okv_hal_fault_hooks_t *hooks) {
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  device->fault_hooks = hooks;
  return OKV_OK;
}

/* ---- Buffers ---- */

static void okv_tier_unreserve(okv_hal_device_t *dev, okv_tier_t tier, uint64_t bytes) {
  pthread_mutex_lock(&dev->usage_mutex);
  dev->used_bytes[tier] = dev->used_bytes[tier] >= bytes ? dev->used_bytes[tier] - bytes : 0;
  pthread_mutex_unlock(&dev->usage_mutex);
}

okv_status_t okv_hal_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                  okv_hal_buffer_t **out_buffer) {
  if (!out_buffer) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_buffer: NULL");
  *out_buffer = NULL;
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  if (!okv_tier_valid(tier)) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: %d is not a tier", (int)tier);
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
    okv_tier_unreserve(device, tier, bytes);
    return s;
  }
  okv_hal_buffer_t *buf = NULL;
  s = device->vtable->buffer_alloc(device, tier, bytes, &buf);
  if (s == OKV_OK && !buf) s = okv_status_make(OKV_STATUS_INTERNAL, "backend returned no buffer");
  if (s == OKV_OK) {
    buf->device = device;
    buf->tier = tier;
    buf->size = bytes;
    s = okv_hal_resource_register(&buf->base, OKV_HAL_KIND_BUFFER);
    if (s != OKV_OK) device->vtable->buffer_destroy(buf);
  }
  if (s != OKV_OK) {
    okv_tier_unreserve(device, tier, bytes);
    okv_status_free(okv_hal_device_release(device));
    return s;
  }
  *out_buffer = buf;
  return OKV_OK;
}

okv_status_t okv_hal_buffer_retain(okv_hal_buffer_t *buffer) {
  return okv_hal_live_retain(buffer, OKV_HAL_KIND_BUFFER, "buffer");
}

okv_status_t okv_hal_buffer_release(okv_hal_buffer_t *buffer) {
  bool last = false;
  OKV_RETURN_IF_ERROR(okv_hal_live_release(buffer, OKV_HAL_KIND_BUFFER, "buffer", &last));
  if (last) {
    okv_hal_device_t *dev = buffer->device;
    okv_tier_t tier = buffer->tier;
    uint64_t size = buffer->size;
    dev->vtable->buffer_destroy(buffer);
    okv_tier_unreserve(dev, tier, size);
    okv_status_free(okv_hal_device_release(dev));
  }
  return OKV_OK;
}

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

okv_status_t okv_hal_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes) {
  OKV_CHECK(buffer, OKV_HAL_KIND_BUFFER, "buffer");
  if (!okv_range_ok(buffer->size, offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s buffer of %" PRIu64 " bytes",
                           offset, bytes, okv_tier_name(buffer->tier), buffer->size);
  if (bytes == 0) return OKV_OK;
  if (!src) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "src: NULL");
  OKV_FAULT_SYNC(buffer->device, OKV_HAL_OP_BUFFER_WRITE, OKV_TIER_HOST, buffer->tier);
  return buffer->device->vtable->buffer_write(buffer, offset, src, bytes);
}

okv_status_t okv_hal_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes) {
  OKV_CHECK(buffer, OKV_HAL_KIND_BUFFER, "buffer");
  if (!okv_range_ok(buffer->size, offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s buffer of %" PRIu64 " bytes",
                           offset, bytes, okv_tier_name(buffer->tier), buffer->size);
  if (bytes == 0) return OKV_OK;
  if (!dst) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "dst: NULL");
  OKV_FAULT_SYNC(buffer->device, OKV_HAL_OP_BUFFER_READ, buffer->tier, OKV_TIER_HOST);
  return buffer->device->vtable->buffer_read(buffer, offset, dst, bytes);
}

/* ---- Streams ---- */

okv_status_t okv_hal_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream) {
  if (!out_stream) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_stream: NULL");
  *out_stream = NULL;
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  OKV_FAULT_SYNC(device, OKV_HAL_OP_STREAM_CREATE, OKV_TIER_COUNT, OKV_TIER_COUNT);
  OKV_RETURN_IF_ERROR(okv_hal_device_retain(device));
  okv_hal_stream_t *stream = NULL;
  okv_status_t s = device->vtable->stream_create(device, &stream);
  if (s == OKV_OK && !stream) s = okv_status_make(OKV_STATUS_INTERNAL, "backend returned no stream");
  if (s == OKV_OK) {
    stream->device = device;
    s = okv_hal_resource_register(&stream->base, OKV_HAL_KIND_STREAM);
    if (s != OKV_OK) device->vtable->stream_destroy(stream);
  }
  if (s != OKV_OK) {
    okv_status_free(okv_hal_device_release(device));
    return s;
  }
  *out_stream = stream;
  return OKV_OK;
}

okv_status_t okv_hal_stream_retain(okv_hal_stream_t *stream) {
  return okv_hal_live_retain(stream, OKV_HAL_KIND_STREAM, "stream");
}

okv_status_t okv_hal_stream_release(okv_hal_stream_t *stream) {
  bool last = false;
  OKV_RETURN_IF_ERROR(okv_hal_live_release(stream, OKV_HAL_KIND_STREAM, "stream", &last));
  if (last) {
    okv_hal_device_t *dev = stream->device;
    dev->vtable->stream_destroy(stream);
    okv_status_free(okv_hal_device_release(dev));
  }
  return OKV_OK;
}

okv_status_t okv_hal_stream_synchronize(okv_hal_stream_t *stream) {
  OKV_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_STREAM_SYNC, OKV_TIER_COUNT, OKV_TIER_COUNT)) {
    /* The stream's work is finished (and its pending error consumed) but the call fails. */
    okv_status_free(stream->device->vtable->stream_synchronize(stream));
    return okv_hal_fault_status(OKV_HAL_OP_STREAM_SYNC, OKV_TIER_COUNT, OKV_TIER_COUNT);
  }
  return stream->device->vtable->stream_synchronize(stream);
}

/* ---- Events ---- */

okv_status_t okv_hal_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event) {
  if (!out_event) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_event: NULL");
  *out_event = NULL;
  OKV_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  OKV_FAULT_SYNC(device, OKV_HAL_OP_EVENT_CREATE, OKV_TIER_COUNT, OKV_TIER_COUNT);
  OKV_RETURN_IF_ERROR(okv_hal_device_retain(device));
  okv_hal_event_t *event = NULL;
  okv_status_t s = device->vtable->event_create(device, &event);
  if (s == OKV_OK && !event) s = okv_status_make(OKV_STATUS_INTERNAL, "backend returned no event");
  if (s == OKV_OK) {
    event->device = device;
    s = okv_hal_resource_register(&event->base, OKV_HAL_KIND_EVENT);
    if (s != OKV_OK) device->vtable->event_destroy(event);
  }
  if (s != OKV_OK) {
    okv_status_free(okv_hal_device_release(device));
    return s;
  }
  *out_event = event;
  return OKV_OK;
}

okv_status_t okv_hal_event_retain(okv_hal_event_t *event) {
  return okv_hal_live_retain(event, OKV_HAL_KIND_EVENT, "event");
}

okv_status_t okv_hal_event_release(okv_hal_event_t *event) {
  bool last = false;
  OKV_RETURN_IF_ERROR(okv_hal_live_release(event, OKV_HAL_KIND_EVENT, "event", &last));
  if (last) {
    okv_hal_device_t *dev = event->device;
    dev->vtable->event_destroy(event);
    okv_status_free(okv_hal_device_release(dev));
  }
  return OKV_OK;
}

static okv_status_t okv_same_device(const okv_hal_stream_t *stream, const okv_hal_device_t *other, const char *arg) {
  if (stream->device != other)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: belongs to another device than the stream", arg);
  return OKV_OK;
}

okv_status_t okv_hal_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream) {
  OKV_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  OKV_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_RETURN_IF_ERROR(okv_same_device(stream, event->device, "event"));
  OKV_FAULT_SYNC(stream->device, OKV_HAL_OP_EVENT_RECORD, OKV_TIER_COUNT, OKV_TIER_COUNT);
  return stream->device->vtable->event_record(event, stream);
}

okv_status_t okv_hal_event_query(okv_hal_event_t *event, bool *out_done) {
  OKV_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  if (!out_done) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_done: NULL");
  *out_done = false;
  return event->device->vtable->event_query(event, out_done);
}

okv_status_t okv_hal_event_wait(okv_hal_event_t *event) {
  OKV_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  if (okv_hal_fault_op(event->device, OKV_HAL_OP_EVENT_WAIT, OKV_TIER_COUNT, OKV_TIER_COUNT)) {
    /* The wait itself completes (the event's error, if any, is consumed) but the call fails. */
    okv_status_free(event->device->vtable->event_wait(event));
    return okv_hal_fault_status(OKV_HAL_OP_EVENT_WAIT, OKV_TIER_COUNT, OKV_TIER_COUNT);
  }
  return event->device->vtable->event_wait(event);
}

okv_status_t okv_hal_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event) {
  OKV_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  OKV_RETURN_IF_ERROR(okv_same_device(stream, event->device, "event"));
  return stream->device->vtable->stream_wait_event(stream, event);
}

okv_status_t okv_hal_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds) {
  OKV_CHECK(start, OKV_HAL_KIND_EVENT, "start");
  OKV_CHECK(end, OKV_HAL_KIND_EVENT, "end");
  if (!out_seconds) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_seconds: NULL");
  *out_seconds = 0.0;
  if (start->device != end->device)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "end: belongs to another device than start");
  return start->device->vtable->event_elapsed(start, end, out_seconds);
}

/* ---- Copies ---- */

static okv_status_t okv_copy_check_common(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst) {
  OKV_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_CHECK(src, OKV_HAL_KIND_BUFFER, "src");
  OKV_CHECK(dst, OKV_HAL_KIND_BUFFER, "dst");
  OKV_RETURN_IF_ERROR(okv_same_device(stream, src->device, "src"));
  OKV_RETURN_IF_ERROR(okv_same_device(stream, dst->device, "dst"));
  const okv_hal_device_info_t *info = &stream->device->info;
  if (!(info->copy_mask[src->tier] & OKV_TIER_BIT(dst->tier)))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "src/dst: the %s backend cannot copy %s -> %s",
                           info->backend, okv_tier_name(src->tier), okv_tier_name(dst->tier));
  return OKV_OK;
}

static bool okv_fault_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst, size_t n_blocks,
                           uint64_t bytes) {
  const okv_hal_fault_hooks_t *hooks = stream->device->fault_hooks;
  if (hooks && hooks->fail_copy && hooks->fail_copy(hooks->user, src->tier, dst->tier, n_blocks, bytes)) return true;
  return okv_hal_fault_op(stream->device, OKV_HAL_OP_COPY, src->tier, dst->tier);
}

static okv_status_t okv_enqueue_copy_failure(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                             size_t n_blocks, uint64_t bytes) {
  char msg[160];
  snprintf(msg, sizeof(msg), "injected copy failure: %s -> %s, %zu block(s), %" PRIu64 " bytes",
           okv_tier_name(src->tier), okv_tier_name(dst->tier), n_blocks, bytes);
  return stream->device->vtable->enqueue_failure(stream, OKV_STATUS_COPY_FAILED, msg);
}

okv_status_t okv_hal_copy_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                                okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes) {
  OKV_RETURN_IF_ERROR(okv_copy_check_common(stream, src, dst));
  if (!okv_range_ok(src->size, src_offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "src_offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s source of %" PRIu64 " bytes",
                           src_offset, bytes, okv_tier_name(src->tier), src->size);
  if (!okv_range_ok(dst->size, dst_offset, bytes))
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "dst_offset/bytes: [%" PRIu64 ", +%" PRIu64 ") outside the %s destination of %" PRIu64
                           " bytes",
                           dst_offset, bytes, okv_tier_name(dst->tier), dst->size);
  if (bytes == 0) return OKV_OK;
  if (okv_fault_copy(stream, src, dst, 1, bytes)) return okv_enqueue_copy_failure(stream, src, dst, 1, bytes);
  return stream->device->vtable->copy(stream, src, src_offset, dst, dst_offset, bytes);
}

okv_status_t okv_hal_copy_blocks_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                       uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs) {
  OKV_RETURN_IF_ERROR(okv_copy_check_common(stream, src, dst));
  if (n_blocks == 0) return OKV_OK;
  if (!pairs) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "pairs: NULL with n_blocks %zu", n_blocks);
  if (block_bytes == 0) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "block_bytes: 0 with n_blocks %zu", n_blocks);
  for (size_t i = 0; i < n_blocks; ++i) {
    if (!okv_range_ok(src->size, pairs[i].src_offset, block_bytes))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "pairs[%zu].src_offset: [%" PRIu64 ", +%" PRIu64 ") outside the %s source of %" PRIu64
                             " bytes",
                             i, pairs[i].src_offset, block_bytes, okv_tier_name(src->tier), src->size);
    if (!okv_range_ok(dst->size, pairs[i].dst_offset, block_bytes))
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                             "pairs[%zu].dst_offset: [%" PRIu64 ", +%" PRIu64 ") outside the %s destination of %" PRIu64
                             " bytes",
                             i, pairs[i].dst_offset, block_bytes, okv_tier_name(dst->tier), dst->size);
  }
  uint64_t total = (n_blocks > UINT64_MAX / block_bytes) ? UINT64_MAX : (uint64_t)n_blocks * block_bytes;
  if (okv_fault_copy(stream, src, dst, n_blocks, total))
    return okv_enqueue_copy_failure(stream, src, dst, n_blocks, total);
  return stream->device->vtable->copy_blocks(stream, src, dst, block_bytes, n_blocks, pairs);
}
