/* Events: creation, reference counting, record / query / wait, stream waits
 * on an event, and elapsed time between two events.
 * Owns: the hal/ part of okv_hal_event_t (base, device reference).
 * May touch: the backend's event_* and stream_wait_event hooks, the device's
 * reference count and fault hooks (read), a stream's device (read, for the
 * same-device check). */
#include "hal_fault.h"
#include "hal_internal.h"

/* okv_hal_event_create, okv_hal_event_retain, okv_hal_event_release. */
OKV_HAL_DEFINE_DEVICE_CHILD(event, OKV_HAL_KIND_EVENT, OKV_HAL_OP_EVENT_CREATE)

okv_status_t okv_hal_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream) {
  OKV_HAL_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_RETURN_IF_ERROR(okv_hal_stream_same_device(stream, event->device, "event"));
  OKV_HAL_FAULT_SYNC(stream->device, OKV_HAL_OP_EVENT_RECORD, OKV_TIER_COUNT, OKV_TIER_COUNT);
  return stream->device->vtable->event_record(event, stream);
}

okv_status_t okv_hal_event_query(okv_hal_event_t *event, bool *out_done) {
  OKV_HAL_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  if (!out_done) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_done: NULL");
  *out_done = false;
  return event->device->vtable->event_query(event, out_done);
}

okv_status_t okv_hal_event_wait(okv_hal_event_t *event) {
  OKV_HAL_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  /* Under an injected fault the wait itself completes (the event's error, if
   * any, is consumed) but the call fails. */
  OKV_HAL_FAULT_AFTER(event->device, OKV_HAL_OP_EVENT_WAIT, event->device->vtable->event_wait(event));
}

okv_status_t okv_hal_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event) {
  OKV_HAL_CHECK(stream, OKV_HAL_KIND_STREAM, "stream");
  OKV_HAL_CHECK(event, OKV_HAL_KIND_EVENT, "event");
  OKV_RETURN_IF_ERROR(okv_hal_stream_same_device(stream, event->device, "event"));
  return stream->device->vtable->stream_wait_event(stream, event);
}

okv_status_t okv_hal_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds) {
  OKV_HAL_CHECK(start, OKV_HAL_KIND_EVENT, "start");
  OKV_HAL_CHECK(end, OKV_HAL_KIND_EVENT, "end");
  if (!out_seconds) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_seconds: NULL");
  *out_seconds = 0.0;
  if (start->device != end->device)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "end: belongs to another device than start");
  return start->device->vtable->event_elapsed(start, end, out_seconds);
}
