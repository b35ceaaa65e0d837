/* Streams: creation, reference counting and synchronize; the same-device
 * check every entry taking a stream and another object uses.
 * Owns: the hal/ part of okv_hal_stream_t (base, device reference).
 * May touch: the backend's stream_* hooks, the device's reference count and
 * fault hooks (read). Never touches buffers or events. */
#include "hal_fault.h"
#include "hal_internal.h"

/* okv_hal_stream_create, okv_hal_stream_retain, okv_hal_stream_release. */
OKV_HAL_DEFINE_DEVICE_CHILD(stream, OKV_HAL_KIND_STREAM, OKV_HAL_OP_STREAM_CREATE)

okv_status_t okv_hal_stream_synchronize(okv_hal_stream_t *stream) {
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  /* Under an injected fault the stream's work is finished (and its pending
   * error consumed) but the call fails. */
  OKV_HAL_FAULT_AFTER(stream->device, OKV_HAL_OP_STREAM_SYNC, stream->device->vtable->stream_synchronize(stream));
}

okv_status_t okv_hal_stream_batch_begin(okv_hal_stream_t *stream) {
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  if (atomic_fetch_add(&stream->batch_depth, 1u) == 0u && stream->device->vtable->stream_batch)
    stream->device->vtable->stream_batch(stream, true);
  return OKV_OK;
}

okv_status_t okv_hal_stream_batch_end(okv_hal_stream_t *stream) {
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  unsigned depth = atomic_load(&stream->batch_depth);
  do {
    if (depth == 0u)
      return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "okv_hal_stream_batch_end: no batch is open on the stream");
  } while (!atomic_compare_exchange_weak(&stream->batch_depth, &depth, depth - 1u));
  if (depth == 1u && stream->device->vtable->stream_batch) stream->device->vtable->stream_batch(stream, false);
  return OKV_OK;
}

okv_status_t okv_hal_stream_same_device(const okv_hal_stream_t *stream, const okv_hal_device_t *other,
                                        const char *arg) {
  if (stream->device != other)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: belongs to another device than the stream", arg);
  return OKV_OK;
}
