/* Streams: creation, reference counting and synchronize; the same-device
 * check every entry taking a stream and another object uses.
 * Owns: the hal/ part of okv_hal_stream_t (base, device reference).
 * May touch: the backend's stream_* hooks, the device's reference count and
 * fault hooks (read). Never touches buffers or events. */
#include "hal_fault.h"
#include "hal_internal.h"

okv_status_t okv_hal_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream) {
  if (!out_stream) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_stream: NULL");
  *out_stream = NULL;
  OKV_HAL_CHECK(device, OKV_HAL_KIND_DEVICE, "device");
  OKV_HAL_FAULT_SYNC(device, OKV_HAL_OP_STREAM_CREATE, OKV_TIER_COUNT, OKV_TIER_COUNT);
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
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  if (okv_hal_fault_op(stream->device, OKV_HAL_OP_STREAM_SYNC, OKV_TIER_COUNT, OKV_TIER_COUNT)) {
    /* The stream's work is finished (and its pending error consumed) but the call fails. */
    okv_status_free(stream->device->vtable->stream_synchronize(stream));
    return okv_hal_fault_status(OKV_HAL_OP_STREAM_SYNC, OKV_TIER_COUNT, OKV_TIER_COUNT);
  }
  return stream->device->vtable->stream_synchronize(stream);
}

okv_status_t okv_hal_stream_same_device(const okv_hal_stream_t *stream, const okv_hal_device_t *other,
                                        const char *arg) {
  if (stream->device != other)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: belongs to another device than the stream", arg);
  return OKV_OK;
}
