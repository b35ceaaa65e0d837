/* GPU streams and events, shared by the CUDA and HIP backends: per-stream
 * retire records (a vendor event after each operation, the buffers it holds,
 * its staging area), the per-stream pool of staging areas for uploaded host
 * arrays, the pending asynchronous error of fault injection, and HAL events
 * with the error they captured at record (see gpu_internal.h for the
 * lifetime and thread-safety rules).
 * Owns: okv_gpu_stream_t, okv_gpu_record_t, okv_gpu_staging_t,
 * okv_gpu_event_t.
 * May touch: the vendor stream, event, memory (staging) calls; buffers only
 * through okv_hal_buffer_retain / okv_hal_buffer_release. */
#include <stdio.h>
#include <string.h>

#include "gpu_internal.h"

/* ---- Staging areas ---- */

static void gpu_staging_destroy(okv_gpu_device_t *dev, okv_gpu_staging_t *st) {
  dev->vendor->host_free(st->host);
  dev->vendor->mem_free(st->dptr);
  okv_free(&dev->base.allocator, st);
}

static void gpu_staging_put(okv_gpu_stream_t *s, okv_gpu_staging_t *st) {
  if (!st) return;
  if (s->n_free_staging >= OKV_GPU_MAX_FREE_STAGING) {
    gpu_staging_destroy(okv_gpu_stream_dev(s), st);
    return;
  }
  st->next = s->free_staging;
  s->free_staging = st;
  s->n_free_staging++;
}

okv_status_t okv_gpu_staging_get(okv_gpu_stream_t *s, size_t bytes, okv_gpu_staging_t **out) {
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  for (okv_gpu_staging_t **pp = &s->free_staging; *pp; pp = &(*pp)->next) {
    if ((*pp)->capacity >= bytes) {
      *out = *pp;
      *pp = (*pp)->next;
      s->n_free_staging--;
      (*out)->next = NULL;
      return OKV_OK;
    }
  }
  if (s->free_staging) { /* none fits: drop one small area so the pool stays bounded */
    okv_gpu_staging_t *old = s->free_staging;
    s->free_staging = old->next;
    s->n_free_staging--;
    gpu_staging_destroy(dev, old);
  }
  size_t cap = OKV_GPU_STAGING_MIN_BYTES;
  while (cap < bytes) cap *= 2;
  okv_gpu_staging_t *st = okv_calloc(&dev->base.allocator, 1, sizeof(*st));
  if (!st) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a staging descriptor");
  okv_status_t r = dev->vendor->host_alloc(cap, &st->host, &(uint64_t){0});
  if (r == OKV_OK) {
    r = dev->vendor->mem_alloc(cap, &st->dptr);
    if (r != OKV_OK) dev->vendor->host_free(st->host);
  }
  if (r != OKV_OK) {
    okv_free(&dev->base.allocator, st);
    return okv_status_annotate(r, "allocating %zu bytes of kernel staging", cap);
  }
  st->capacity = cap;
  *out = st;
  return OKV_OK;
}

/* ---- Retire records ---- */

static void gpu_record_release_buffers(okv_gpu_record_t *r) {
  for (uint32_t i = 0; i < r->n_buffers; ++i) OKV_IGNORE_ERROR(okv_hal_buffer_release(r->buffers[i]));
  r->n_buffers = 0;
}

/* Reclaims completed records (all when `wait`); caller holds the mutex, context bound. */
static void gpu_stream_reclaim(okv_gpu_stream_t *s, bool wait) {
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  while (s->head) {
    okv_gpu_record_t *r = s->head;
    bool done = false;
    okv_status_t q = wait ? dev->vendor->event_synchronize(r->event) : dev->vendor->event_query(r->event, &done);
    if (q != OKV_OK) { /* a sticky vendor error: keep the resources unless tearing down */
      okv_status_free(q);
      if (!wait) return;
    } else if (!wait && !done) {
      return;
    }
    s->head = r->next;
    if (!s->head) s->tail = NULL;
    gpu_record_release_buffers(r);
    gpu_staging_put(s, r->staging);
    r->staging = NULL;
    r->next = s->free_records;
    s->free_records = r;
  }
}

okv_status_t okv_gpu_stream_retire(okv_gpu_stream_t *s, okv_gpu_staging_t *staging, okv_hal_buffer_t *const *buffers,
                                   uint32_t n_buffers) {
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const okv_gpu_vendor_t *v = dev->vendor;
  okv_gpu_record_t *r = s->free_records;
  okv_status_t st = OKV_OK;
  if (r) {
    s->free_records = r->next;
  } else {
    r = okv_calloc(&dev->base.allocator, 1, sizeof(*r));
    if (!r) st = okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a stream record");
    if (st == OKV_OK) {
      st = v->event_create(false, &r->event);
      if (st != OKV_OK) okv_free(&dev->base.allocator, r);
    }
  }
  if (st == OKV_OK) {
    st = v->event_record(r->event, s->vstream);
    if (st != OKV_OK) {
      r->next = s->free_records;
      s->free_records = r;
    }
  }
  if (st != OKV_OK) {
    if (staging) {
      okv_status_free(v->stream_synchronize(s->vstream));
      gpu_staging_put(s, staging);
    }
    return st;
  }
  r->next = NULL;
  r->n_buffers = 0;
  for (uint32_t i = 0; i < n_buffers && i < OKV_GPU_MAX_RECORD_BUFFERS; ++i) {
    if (!buffers[i]) continue;
    if (okv_hal_buffer_retain(buffers[i]) == OKV_OK) r->buffers[r->n_buffers++] = buffers[i];
  }
  r->staging = staging;
  if (s->tail) {
    s->tail->next = r;
  } else {
    s->head = r;
  }
  s->tail = r;
  return OKV_OK;
}

/* ---- Streams ---- */

okv_status_t okv_gpu_stream_enter(okv_gpu_stream_t *s) {
  pthread_mutex_lock(&s->mutex);
  okv_status_t st = okv_gpu_bind(okv_gpu_stream_dev(s));
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  gpu_stream_reclaim(s, false);
  return OKV_OK;
}

/* ---- Creation of streams and events ---- */

/* A new stream or event (kind): zeroed, its mutex initialised and its
 * vendor handle made with the context bound. hal/ sets the device of its HAL
 * part afterwards. */
static okv_status_t gpu_object_new(okv_hal_device_t *device, okv_hal_kind_t kind, void **out) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  const bool is_stream = kind == OKV_HAL_KIND_STREAM;
  void *obj = okv_calloc(&device->allocator, 1, is_stream ? sizeof(okv_gpu_stream_t) : sizeof(okv_gpu_event_t));
  if (!obj)
    return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate %s",
                           is_stream ? "a stream" : "an event");
  pthread_mutex_t *mutex = is_stream ? &((okv_gpu_stream_t *)obj)->mutex : &((okv_gpu_event_t *)obj)->mutex;
  if (pthread_mutex_init(mutex, NULL) != 0) {
    okv_free(&device->allocator, obj);
    return okv_status_make(OKV_STATUS_INTERNAL, "%s: pthread_mutex_init failed", is_stream ? "stream" : "event");
  }
  okv_status_t st = okv_gpu_bind(dev);
  if (st == OKV_OK && is_stream) st = dev->vendor->stream_create(&((okv_gpu_stream_t *)obj)->vstream);
  if (st == OKV_OK && !is_stream) st = dev->vendor->event_create(true, &((okv_gpu_event_t *)obj)->vevent);
  if (st != OKV_OK) {
    pthread_mutex_destroy(mutex);
    okv_free(&device->allocator, obj);
    return st;
  }
  *out = obj;
  return OKV_OK;
}

okv_status_t okv_gpu_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream) {
  void *obj = NULL;
  okv_status_t st = gpu_object_new(device, OKV_HAL_KIND_STREAM, &obj);
  if (st == OKV_OK) *out_stream = &((okv_gpu_stream_t *)obj)->base;
  return st;
}

okv_status_t okv_gpu_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event) {
  void *obj = NULL;
  okv_status_t st = gpu_object_new(device, OKV_HAL_KIND_EVENT, &obj);
  if (st == OKV_OK) *out_event = &((okv_gpu_event_t *)obj)->base;
  return st;
}

void okv_gpu_stream_destroy(okv_hal_stream_t *stream) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const okv_gpu_vendor_t *v = dev->vendor;
  pthread_mutex_lock(&s->mutex);
  OKV_IGNORE_ERROR(okv_gpu_bind(dev));
  okv_status_free(v->stream_synchronize(s->vstream));
  gpu_stream_reclaim(s, true);
  while (s->free_records) {
    okv_gpu_record_t *r = s->free_records;
    s->free_records = r->next;
    v->event_destroy(r->event);
    okv_free(&stream->device->allocator, r);
  }
  while (s->free_staging) {
    okv_gpu_staging_t *st = s->free_staging;
    s->free_staging = st->next;
    gpu_staging_destroy(dev, st);
  }
  v->stream_destroy(s->vstream);
  pthread_mutex_unlock(&s->mutex);
  pthread_mutex_destroy(&s->mutex);
  okv_free(&stream->device->allocator, s);
}

static okv_status_t gpu_take_pending(okv_gpu_stream_t *s) {
  if (s->pending_code == OKV_STATUS_OK) return OKV_OK;
  okv_status_t e = okv_status_make(s->pending_code, "%s", s->pending_message);
  s->pending_code = OKV_STATUS_OK;
  s->pending_message[0] = '\0';
  return e;
}

okv_status_t okv_gpu_stream_synchronize(okv_hal_stream_t *stream) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  okv_status_t st = dev->vendor->stream_synchronize(s->vstream);
  if (st == OKV_OK) {
    gpu_stream_reclaim(s, false);
    st = gpu_take_pending(s);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

okv_status_t okv_gpu_enqueue_failure(okv_hal_stream_t *stream, okv_status_code_t code, const char *message) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  pthread_mutex_lock(&s->mutex);
  if (s->pending_code == OKV_STATUS_OK && code != OKV_STATUS_OK) {
    s->pending_code = code;
    snprintf(s->pending_message, sizeof(s->pending_message), "%s", message ? message : "asynchronous failure");
  }
  pthread_mutex_unlock(&s->mutex);
  return OKV_OK;
}

/* ---- Events ---- */

void okv_gpu_event_destroy(okv_hal_event_t *event) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) dev->vendor->event_destroy(e->vevent);
  pthread_mutex_destroy(&e->mutex);
  okv_free(&event->device->allocator, e);
}

okv_status_t okv_gpu_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  pthread_mutex_lock(&e->mutex);
  okv_status_t st = okv_gpu_stream_dev(s)->vendor->event_record(e->vevent, s->vstream);
  if (st == OKV_OK) {
    e->recorded = true;
    e->code = s->pending_code;
    snprintf(e->message, sizeof(e->message), "%s", s->pending_message);
    s->pending_code = OKV_STATUS_OK;
    s->pending_message[0] = '\0';
  }
  pthread_mutex_unlock(&e->mutex);
  pthread_mutex_unlock(&s->mutex);
  return st;
}

static okv_status_t gpu_event_captured(okv_gpu_event_t *e) {
  pthread_mutex_lock(&e->mutex);
  okv_status_t st = e->code == OKV_STATUS_OK ? OKV_OK : okv_status_make(e->code, "%s", e->message);
  pthread_mutex_unlock(&e->mutex);
  return st;
}

okv_status_t okv_gpu_event_query(okv_hal_event_t *event, bool *out_done) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  bool done = false;
  OKV_RETURN_IF_ERROR(dev->vendor->event_query(e->vevent, &done));
  *out_done = done;
  return done ? gpu_event_captured(e) : OKV_OK;
}

okv_status_t okv_gpu_event_wait(okv_hal_event_t *event) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  OKV_RETURN_IF_ERROR(dev->vendor->event_synchronize(e->vevent));
  return gpu_event_captured(e);
}

okv_status_t okv_gpu_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_status_t st = okv_gpu_stream_dev(s)->vendor->stream_wait_event(s->vstream, e->vevent);
  pthread_mutex_unlock(&s->mutex);
  return st;
}

okv_status_t okv_gpu_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds) {
  okv_gpu_event_t *a = (okv_gpu_event_t *)start, *b = (okv_gpu_event_t *)end;
  if (!a->recorded || !b->recorded)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "%s: event was never recorded", a->recorded ? "end" : "start");
  okv_gpu_device_t *dev = okv_gpu_dev(start->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  float ms = 0.0f;
  OKV_RETURN_IF_ERROR(dev->vendor->event_elapsed_ms(a->vevent, b->vevent, &ms));
  *out_seconds = (double)ms * 1e-3;
  return OKV_OK;
}
