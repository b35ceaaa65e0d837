/* HAL device logic shared by the CUDA and HIP backends (see gpu_common.h and
 * docs/gpu.md).
 *
 * Lifetime of enqueued work: every operation enqueued on a stream ends with a
 * "retire record": a vendor event recorded right after it, the buffers it uses
 * (retained) and the staging area holding its uploaded host arrays. Records
 * form a FIFO per stream; completed ones are reclaimed (buffers released,
 * staging reused) at the next operation on the stream, at synchronize and at
 * destroy. So a caller may release a buffer right after enqueueing work on it.
 *
 * Asynchronous errors: fault injection (enqueue_failure) stores a pending
 * error in the stream; the next event record moves it into the event, or
 * stream_synchronize returns it. Vendor errors of enqueue calls are returned
 * by the enqueue call itself.
 *
 * Thread safety: a mutex per stream guards its records, staging and pending
 * error; a mutex per event guards its captured error. The vendor context is
 * bound on the calling thread by every entry that calls the vendor.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/gpu_common.h"
#include "kernels/okv_gpu_args.h"

const char *const okv_gpu_kernel_names[OKV_GPU_FN_COUNT] = {
    [OKV_GPU_FN_GATHER] = "okv_gpu_gather_blocks",
    [OKV_GPU_FN_ATTENTION] = "okv_gpu_attention",
    [OKV_GPU_FN_ATTENTION_MASS] = "okv_gpu_attention_mass",
    [OKV_GPU_FN_SUMMARIZE] = "okv_gpu_summarize_blocks",
    [OKV_GPU_FN_SUMMARY_APPEND] = "okv_gpu_summary_append",
    [OKV_GPU_FN_SCORE] = "okv_gpu_score_blocks",
    [OKV_GPU_FN_TOPK] = "okv_gpu_topk",
};

#define OKV_GPU_MAX_RECORD_BUFFERS 6
#define OKV_GPU_STAGING_MIN_BYTES ((size_t)64 * 1024)
#define OKV_GPU_STAGING_ALIGN 16u
#define OKV_GPU_MAX_FREE_STAGING 8
/* Static shared memory of okv_gpu_topk (hist, sel, warp totals, scalars), with slack. */
#define OKV_GPU_TOPK_STATIC_SMEM_BYTES 6144u

typedef struct okv_gpu_device_t {
  okv_hal_device_t base;
  const okv_gpu_vendor_t *vendor;
  int ordinal;
  void *ctx;
  bool ctx_open;
  void *module;
  void *fn[OKV_GPU_FN_COUNT];
  uint32_t smem_max_bytes; /* dynamic shared memory per block for attention / top-K */
} okv_gpu_device_t;

typedef struct okv_gpu_staging_t {
  struct okv_gpu_staging_t *next;
  void *host;      /* pinned */
  uint64_t dptr;   /* device memory of the same size */
  size_t capacity; /* bytes */
} okv_gpu_staging_t;

typedef struct okv_gpu_record_t {
  struct okv_gpu_record_t *next;
  void *event; /* vendor event without timing */
  okv_hal_buffer_t *buffers[OKV_GPU_MAX_RECORD_BUFFERS];
  uint32_t n_buffers;
  okv_gpu_staging_t *staging;
} okv_gpu_record_t;

typedef struct okv_gpu_stream_t {
  okv_hal_stream_t base;
  void *vstream;
  pthread_mutex_t mutex;
  okv_gpu_record_t *head, *tail;   /* in flight, oldest first */
  okv_gpu_record_t *free_records;  /* completed, event kept for reuse */
  okv_gpu_staging_t *free_staging; /* idle staging areas */
  uint32_t n_free_staging;
  okv_status_code_t pending_code;  /* first unreported asynchronous error */
  char pending_message[256];
} okv_gpu_stream_t;

typedef struct okv_gpu_event_t {
  okv_hal_event_t base;
  void *vevent; /* with timing */
  pthread_mutex_t mutex;
  bool recorded;
  okv_status_code_t code; /* error captured at record */
  char message[256];
} okv_gpu_event_t;

static okv_gpu_device_t *okv_gpu_dev(okv_hal_device_t *d) { return (okv_gpu_device_t *)d; }

static okv_status_t okv_gpu_bind(okv_gpu_device_t *dev) {
  return dev->vendor->context_bind(dev->ordinal, dev->ctx);
}

static uint64_t okv_gpu_addr(const okv_hal_buffer_t *b, uint64_t offset) {
  return b ? (uint64_t)(uintptr_t)b->device_ptr + offset : 0;
}

/* ---- Enumerate / create ---- */

static void okv_gpu_fill_info(const okv_gpu_vendor_t *v, int ordinal, okv_hal_device_info_t *info) {
  memset(info, 0, sizeof(*info));
  snprintf(info->backend, sizeof(info->backend), "%s", v->name);
  info->ordinal = ordinal;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  info->physical_bytes[OKV_TIER_HOST] = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : 0;
  info->alloc_tiers = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  const uint32_t both = OKV_TIER_BIT(OKV_TIER_DEVICE) | OKV_TIER_BIT(OKV_TIER_HOST);
  info->copy_mask[OKV_TIER_DEVICE] = both;
  info->copy_mask[OKV_TIER_HOST] = both;
}

okv_status_t okv_gpu_enumerate(const okv_gpu_vendor_t *v, okv_hal_device_info_t *out_infos, size_t capacity,
                               size_t *out_count) {
  if (!out_count) return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_count: NULL");
  *out_count = 0;
  if (capacity > 0 && !out_infos)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "out_infos: NULL with capacity %zu", capacity);
  OKV_RETURN_IF_ERROR(v->load());
  int n = 0;
  OKV_RETURN_IF_ERROR(v->device_count(&n));
  if (n <= 0) return okv_status_make(OKV_STATUS_UNAVAILABLE, "%s: no GPU found by %s", v->name, v->library_name);
  for (int i = 0; i < n && (size_t)i < capacity; ++i) {
    okv_gpu_fill_info(v, i, &out_infos[i]);
    uint32_t smem = 0;
    OKV_RETURN_IF_ERROR(v->device_describe(i, &out_infos[i], &smem));
  }
  *out_count = (size_t)n;
  return OKV_OK;
}

static const okv_hal_device_vtable_t okv_gpu_vtable;

static void okv_gpu_device_free(okv_gpu_device_t *dev, const okv_allocator_t *a) {
  if (dev->module) {
    if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) dev->vendor->module_unload(dev->module);
  }
  if (dev->ctx_open) dev->vendor->context_close(dev->ordinal, dev->ctx);
  okv_free(a, dev);
}

okv_status_t okv_gpu_create(const okv_gpu_vendor_t *v, const okv_hal_device_params_t *params,
                            const okv_allocator_t *allocator, okv_hal_device_t **out_device) {
  *out_device = NULL;
  OKV_RETURN_IF_ERROR(v->load());
  int n = 0;
  OKV_RETURN_IF_ERROR(v->device_count(&n));
  const int ordinal = params ? params->ordinal : 0;
  if (n <= 0) return okv_status_make(OKV_STATUS_UNAVAILABLE, "%s: no GPU found by %s", v->name, v->library_name);
  if (ordinal < 0 || ordinal >= n)
    return okv_status_make(OKV_STATUS_UNAVAILABLE, "ordinal: %s device %d requested, %d present", v->name, ordinal,
                           n);
  okv_gpu_device_t *dev = okv_calloc(allocator, 1, sizeof(*dev));
  if (!dev) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a %s device", v->name);
  dev->vendor = v;
  dev->ordinal = ordinal;
  okv_gpu_fill_info(v, ordinal, &dev->base.info);
  okv_status_t s = v->device_describe(ordinal, &dev->base.info, &dev->smem_max_bytes);
  if (s == OKV_OK) s = v->context_open(ordinal, &dev->ctx);
  dev->ctx_open = s == OKV_OK;
  if (s != OKV_OK) {
    okv_free(allocator, dev);
    return s;
  }
  s = okv_gpu_bind(dev);
  if (s == OKV_OK) s = v->module_load(&dev->module);
  for (int f = 0; s == OKV_OK && f < OKV_GPU_FN_COUNT; ++f)
    s = v->module_function(dev->module, okv_gpu_kernel_names[f], &dev->fn[f]);
  if (s == OKV_OK && dev->smem_max_bytes > 48u * 1024u) {
    s = v->function_set_smem(dev->fn[OKV_GPU_FN_ATTENTION], dev->smem_max_bytes);
    if (s == OKV_OK)
      s = v->function_set_smem(dev->fn[OKV_GPU_FN_TOPK], dev->smem_max_bytes - OKV_GPU_TOPK_STATIC_SMEM_BYTES);
  }
  if (s != OKV_OK) {
    okv_gpu_device_free(dev, allocator);
    return s;
  }
  dev->base.vtable = &okv_gpu_vtable;
  *out_device = &dev->base;
  return OKV_OK;
}

static void okv_gpu_device_destroy(okv_hal_device_t *device) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  okv_gpu_device_free(dev, &device->allocator);
}

/* ---- Buffers ---- */

static okv_status_t okv_gpu_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                         okv_hal_buffer_t **out_buffer) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  const okv_gpu_vendor_t *v = dev->vendor;
  okv_hal_buffer_t *b = okv_calloc(&device->allocator, 1, sizeof(*b));
  if (!b) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a buffer object");
  okv_status_t s = okv_gpu_bind(dev);
  if (s == OKV_OK && tier == OKV_TIER_DEVICE) {
    uint64_t dptr = 0;
    s = v->mem_alloc(bytes, &dptr);
    if (s == OKV_OK) {
      s = v->memset_zero(dptr, bytes);
      if (s != OKV_OK) v->mem_free(dptr);
    }
    if (s == OKV_OK) b->device_ptr = (void *)(uintptr_t)dptr;
  } else if (s == OKV_OK && tier == OKV_TIER_HOST) {
    void *host = NULL;
    uint64_t dptr = 0;
    s = v->host_alloc(bytes, &host, &dptr);
    if (s == OKV_OK) {
      memset(host, 0, (size_t)bytes);
      b->host_ptr = host;
      b->device_ptr = (void *)(uintptr_t)dptr;
    }
  } else if (s == OKV_OK) {
    s = okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "tier: the %s backend cannot allocate the %s tier", v->name,
                        okv_tier_name(tier));
  }
  if (s != OKV_OK) {
    okv_free(&device->allocator, b);
    return okv_status_annotate(s, "allocating %llu bytes in the %s tier", (unsigned long long)bytes,
                               okv_tier_name(tier));
  }
  b->tier = tier;
  b->size = bytes;
  *out_buffer = b;
  return OKV_OK;
}

static void okv_gpu_buffer_destroy(okv_hal_buffer_t *buffer) {
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) {
    if (buffer->tier == OKV_TIER_DEVICE) {
      dev->vendor->mem_free((uint64_t)(uintptr_t)buffer->device_ptr);
    } else {
      dev->vendor->host_free(buffer->host_ptr);
    }
  }
  okv_free(&buffer->device->allocator, buffer);
}

static okv_status_t okv_gpu_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes) {
  if (buffer->host_ptr) {
    memcpy((unsigned char *)buffer->host_ptr + offset, src, (size_t)bytes);
    return OKV_OK;
  }
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  return dev->vendor->copy_htod(okv_gpu_addr(buffer, offset), src, bytes);
}

static okv_status_t okv_gpu_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes) {
  if (buffer->host_ptr) {
    memcpy(dst, (const unsigned char *)buffer->host_ptr + offset, (size_t)bytes);
    return OKV_OK;
  }
  okv_gpu_device_t *dev = okv_gpu_dev(buffer->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  return dev->vendor->copy_dtoh(dst, okv_gpu_addr(buffer, offset), bytes);
}

/* ---- Streams: records and staging ---- */

static okv_gpu_device_t *okv_gpu_stream_dev(okv_gpu_stream_t *s) { return okv_gpu_dev(s->base.device); }

static void okv_gpu_staging_destroy(okv_gpu_device_t *dev, okv_gpu_staging_t *st) {
  dev->vendor->host_free(st->host);
  dev->vendor->mem_free(st->dptr);
  okv_free(&dev->base.allocator, st);
}

static void okv_gpu_staging_put(okv_gpu_stream_t *s, okv_gpu_staging_t *st) {
  if (!st) return;
  if (s->n_free_staging >= OKV_GPU_MAX_FREE_STAGING) {
    okv_gpu_staging_destroy(okv_gpu_stream_dev(s), st);
    return;
  }
  st->next = s->free_staging;
  s->free_staging = st;
  s->n_free_staging++;
}

/* A staging area of at least `bytes`; caller holds the stream mutex, context bound. */
static okv_status_t okv_gpu_staging_get(okv_gpu_stream_t *s, size_t bytes, okv_gpu_staging_t **out) {
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
    okv_gpu_staging_destroy(dev, old);
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

static void okv_gpu_record_release_buffers(okv_gpu_record_t *r) {
  for (uint32_t i = 0; i < r->n_buffers; ++i) okv_status_free(okv_hal_buffer_release(r->buffers[i]));
  r->n_buffers = 0;
}

/* Reclaims completed records (all when `wait`); caller holds the mutex, context bound. */
static void okv_gpu_stream_reclaim(okv_gpu_stream_t *s, bool wait) {
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
    okv_gpu_record_release_buffers(r);
    okv_gpu_staging_put(s, r->staging);
    r->staging = NULL;
    r->next = s->free_records;
    s->free_records = r;
  }
}

/* Appends a record after the work just enqueued; takes a reference on each
 * non-NULL buffer (a buffer listed twice is retained twice) and the staging.
 * On failure the staging is still parked safely (synchronize, then reuse). */
static okv_status_t okv_gpu_stream_retire(okv_gpu_stream_t *s, okv_gpu_staging_t *staging,
                                          okv_hal_buffer_t *const *buffers, uint32_t n_buffers) {
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
      okv_gpu_staging_put(s, staging);
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

/* Locks the stream, binds the context and reclaims finished work. */
static okv_status_t okv_gpu_stream_enter(okv_gpu_stream_t *s) {
  pthread_mutex_lock(&s->mutex);
  okv_status_t st = okv_gpu_bind(okv_gpu_stream_dev(s));
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_stream_reclaim(s, false);
  return OKV_OK;
}

static okv_status_t okv_gpu_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  okv_gpu_stream_t *s = okv_calloc(&device->allocator, 1, sizeof(*s));
  if (!s) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate a stream");
  if (pthread_mutex_init(&s->mutex, NULL) != 0) {
    okv_free(&device->allocator, s);
    return okv_status_make(OKV_STATUS_INTERNAL, "stream: pthread_mutex_init failed");
  }
  okv_status_t st = okv_gpu_bind(dev);
  if (st == OKV_OK) st = dev->vendor->stream_create(&s->vstream);
  if (st != OKV_OK) {
    pthread_mutex_destroy(&s->mutex);
    okv_free(&device->allocator, s);
    return st;
  }
  s->base.device = device;
  *out_stream = &s->base;
  return OKV_OK;
}

static void okv_gpu_stream_destroy(okv_hal_stream_t *stream) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const okv_gpu_vendor_t *v = dev->vendor;
  pthread_mutex_lock(&s->mutex);
  okv_status_free(okv_gpu_bind(dev));
  okv_status_free(v->stream_synchronize(s->vstream));
  okv_gpu_stream_reclaim(s, true);
  while (s->free_records) {
    okv_gpu_record_t *r = s->free_records;
    s->free_records = r->next;
    v->event_destroy(r->event);
    okv_free(&stream->device->allocator, r);
  }
  while (s->free_staging) {
    okv_gpu_staging_t *st = s->free_staging;
    s->free_staging = st->next;
    okv_gpu_staging_destroy(dev, st);
  }
  v->stream_destroy(s->vstream);
  pthread_mutex_unlock(&s->mutex);
  pthread_mutex_destroy(&s->mutex);
  okv_free(&stream->device->allocator, s);
}

static okv_status_t okv_gpu_take_pending(okv_gpu_stream_t *s) {
  if (s->pending_code == OKV_STATUS_OK) return OKV_OK;
  okv_status_t e = okv_status_make(s->pending_code, "%s", s->pending_message);
  s->pending_code = OKV_STATUS_OK;
  s->pending_message[0] = '\0';
  return e;
}

static okv_status_t okv_gpu_stream_synchronize(okv_hal_stream_t *stream) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  okv_status_t st = dev->vendor->stream_synchronize(s->vstream);
  if (st == OKV_OK) {
    okv_gpu_stream_reclaim(s, false);
    st = okv_gpu_take_pending(s);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

static okv_status_t okv_gpu_enqueue_failure(okv_hal_stream_t *stream, okv_status_code_t code, const char *message) {
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

static okv_status_t okv_gpu_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event) {
  okv_gpu_device_t *dev = okv_gpu_dev(device);
  okv_gpu_event_t *e = okv_calloc(&device->allocator, 1, sizeof(*e));
  if (!e) return okv_status_make(OKV_STATUS_OUT_OF_MEMORY, "host: could not allocate an event");
  if (pthread_mutex_init(&e->mutex, NULL) != 0) {
    okv_free(&device->allocator, e);
    return okv_status_make(OKV_STATUS_INTERNAL, "event: pthread_mutex_init failed");
  }
  okv_status_t st = okv_gpu_bind(dev);
  if (st == OKV_OK) st = dev->vendor->event_create(true, &e->vevent);
  if (st != OKV_OK) {
    pthread_mutex_destroy(&e->mutex);
    okv_free(&device->allocator, e);
    return st;
  }
  e->base.device = device;
  *out_event = &e->base;
  return OKV_OK;
}

static void okv_gpu_event_destroy(okv_hal_event_t *event) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  if (okv_status_consume(okv_gpu_bind(dev)) == OKV_STATUS_OK) dev->vendor->event_destroy(e->vevent);
  pthread_mutex_destroy(&e->mutex);
  okv_free(&event->device->allocator, e);
}

static okv_status_t okv_gpu_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream) {
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

static okv_status_t okv_gpu_event_captured(okv_gpu_event_t *e) {
  pthread_mutex_lock(&e->mutex);
  okv_status_t st = e->code == OKV_STATUS_OK ? OKV_OK : okv_status_make(e->code, "%s", e->message);
  pthread_mutex_unlock(&e->mutex);
  return st;
}

static okv_status_t okv_gpu_event_query(okv_hal_event_t *event, bool *out_done) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  bool done = false;
  OKV_RETURN_IF_ERROR(dev->vendor->event_query(e->vevent, &done));
  *out_done = done;
  return done ? okv_gpu_event_captured(e) : OKV_OK;
}

static okv_status_t okv_gpu_event_wait(okv_hal_event_t *event) {
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  okv_gpu_device_t *dev = okv_gpu_dev(event->device);
  OKV_RETURN_IF_ERROR(okv_gpu_bind(dev));
  OKV_RETURN_IF_ERROR(dev->vendor->event_synchronize(e->vevent));
  return okv_gpu_event_captured(e);
}

static okv_status_t okv_gpu_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_event_t *e = (okv_gpu_event_t *)event;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_status_t st = okv_gpu_stream_dev(s)->vendor->stream_wait_event(s->vstream, e->vevent);
  pthread_mutex_unlock(&s->mutex);
  return st;
}

static okv_status_t okv_gpu_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds) {
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

/* ---- Copies ---- */

static okv_status_t okv_gpu_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                                 okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  const okv_gpu_vendor_t *v = okv_gpu_stream_dev(s)->vendor;
  okv_status_t st = v->copy_async(okv_gpu_addr(dst, dst_offset), okv_gpu_addr(src, src_offset), bytes, s->vstream);
  if (st == OKV_OK) {
    okv_hal_buffer_t *bufs[2] = {src, dst};
    st = okv_gpu_stream_retire(s, NULL, bufs, 2);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

/* Packs host arrays into a staging area: each piece 16-byte aligned. */
typedef struct okv_gpu_pack_t {
  okv_gpu_staging_t *st;
  size_t used;
} okv_gpu_pack_t;

static size_t okv_gpu_align(size_t n) { return (n + OKV_GPU_STAGING_ALIGN - 1) & ~(size_t)(OKV_GPU_STAGING_ALIGN - 1); }

static uint64_t okv_gpu_pack(okv_gpu_pack_t *p, const void *src, size_t bytes) {
  const size_t off = p->used;
  if (bytes > 0 && src) memcpy((unsigned char *)p->st->host + off, src, bytes);
  p->used += okv_gpu_align(bytes);
  return p->st->dptr + off;
}

/* Uploads the packed bytes [0, upload_bytes) of the staging area on the stream. */
static okv_status_t okv_gpu_pack_upload(okv_gpu_stream_t *s, okv_gpu_pack_t *p, size_t upload_bytes) {
  if (upload_bytes == 0) return OKV_OK;
  return okv_gpu_stream_dev(s)->vendor->copy_htod_async(p->st->dptr, p->st->host, upload_bytes, s->vstream);
}

/* Ends an operation: on success (st OK) parks staging and buffers behind a
 * record; on failure parks the staging only. Unlocks the stream. */
static okv_status_t okv_gpu_op_end(okv_gpu_stream_t *s, okv_status_t st, okv_gpu_staging_t *staging,
                                   okv_hal_buffer_t *const *bufs, uint32_t n_bufs) {
  if (st == OKV_OK) {
    st = okv_gpu_stream_retire(s, staging, bufs, n_bufs);
  } else if (staging) {
    okv_status_t r = okv_gpu_stream_retire(s, staging, NULL, 0);
    okv_status_free(r);
  }
  pthread_mutex_unlock(&s->mutex);
  return st;
}

static okv_status_t okv_gpu_launch(okv_gpu_stream_t *s, okv_gpu_fn_t fn, uint32_t gx, uint32_t gy,
                                   uint32_t threads, uint32_t smem, void *args) {
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t grid[3] = {gx, gy, 1};
  okv_status_t st = dev->vendor->launch(dev->fn[fn], grid, threads, smem, s->vstream, args);
  return okv_status_annotate(st, "launching %s", okv_gpu_kernel_names[fn]);
}

static uint32_t okv_gpu_grid_cap(uint64_t n) { return n > (1u << 30) ? (1u << 30) : (uint32_t)n; }

static okv_status_t okv_gpu_copy_blocks(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                        uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  uint32_t vec = 16;
  while (vec > 1) {
    bool ok = (block_bytes % vec) == 0 && ((uintptr_t)src->device_ptr % vec) == 0 &&
              ((uintptr_t)dst->device_ptr % vec) == 0;
    for (size_t i = 0; ok && i < n_blocks; ++i)
      ok = (pairs[i].src_offset % vec) == 0 && (pairs[i].dst_offset % vec) == 0;
    if (ok) break;
    vec /= 2;
  }
  const size_t pair_bytes = n_blocks * sizeof(okv_block_copy_t);
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, okv_gpu_align(pair_bytes), &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_gather_args_t a = {0};
  a.src = okv_gpu_addr(src, 0);
  a.dst = okv_gpu_addr(dst, 0);
  a.pairs = okv_gpu_pack(&p, pairs, pair_bytes);
  a.n_blocks = n_blocks;
  a.block_bytes = block_bytes;
  a.vec_bytes = vec;
  st = okv_gpu_pack_upload(s, &p, pair_bytes);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_GATHER, okv_gpu_grid_cap(n_blocks), 1, OKV_GPU_GATHER_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[2] = {src, dst};
  return okv_gpu_op_end(s, st, p.st, bufs, 2);
}

/* ---- Kernels ---- */

static okv_status_t okv_gpu_attention(okv_hal_stream_t *stream, const okv_attention_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t D = d->head_dim, G = d->group_size, T = d->n_query_tokens;
  const uint64_t U = (uint64_t)d->n_seqs * d->n_kv_heads;
  const uint64_t n_rows = (uint64_t)T * G;
  if (U == 0 || n_rows == 0 || D == 0) return OKV_OK;
  if (U > 0x7fffffffu)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "n_seqs*n_kv_heads: %llu exceeds the GPU grid",
                           (unsigned long long)U);
  /* Shared memory in floats: 2*R*D (q, acc) + 32*D (K, V tile) + 19*R. */
  const uint64_t budget_f = dev->smem_max_bytes / 4u;
  const uint64_t fixed_f = 32ull * D;
  if (budget_f <= fixed_f + 2ull * D + 19u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT,
                           "head_dim: %u needs more shared memory than the %u bytes a %s thread block has", D,
                           dev->smem_max_bytes, dev->vendor->name);
  uint64_t r_max = (budget_f - fixed_f) / (2ull * D + 19u);
  if (r_max > OKV_GPU_ATTENTION_MAX_ROWS) r_max = OKV_GPU_ATTENTION_MAX_ROWS;
  if (r_max > n_rows) r_max = n_rows;
  const uint64_t n_chunks = (n_rows + r_max - 1) / r_max;
  const uint64_t R = (n_rows + n_chunks - 1) / n_chunks;
  if (n_chunks > 65535u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "group_size: %u query heads per KV head exceed the GPU grid", G);
  const uint32_t smem = (uint32_t)(4u * (2u * R * D + fixed_f + 19u * R));

  const size_t n_ws = d->ws_offsets[U];
  const size_t off_bytes = (size_t)(U + 1) * 4u, slot_bytes = n_ws * 4u, valid_bytes = n_ws;
  const bool mass = d->block_mass != NULL && n_ws > 0;
  const size_t lse_bytes = mass ? (size_t)d->n_seqs * T * d->n_kv_heads * G * 4u : 0;
  const size_t upload = okv_gpu_align(off_bytes) + okv_gpu_align(slot_bytes) + okv_gpu_align(valid_bytes);

  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, upload + okv_gpu_align(lse_bytes), &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_attention_args_t a = {0};
  a.kv_pool = okv_gpu_addr(d->kv_pool, 0);
  a.block_bytes = okv_block_bytes(d->kv_dtype, D);
  a.ws_offsets = okv_gpu_pack(&p, d->ws_offsets, off_bytes);
  a.ws_slots = okv_gpu_pack(&p, d->ws_slots, slot_bytes);
  a.ws_valid = okv_gpu_pack(&p, d->ws_valid, valid_bytes);
  a.lse = mass ? okv_gpu_pack(&p, NULL, lse_bytes) : 0;
  a.q = okv_gpu_addr(d->q, d->q_offset);
  a.inflight_kv = d->n_inflight > 0 ? okv_gpu_addr(d->inflight_kv, d->inflight_offset) : 0;
  a.out = okv_gpu_addr(d->out, d->out_offset);
  a.block_mass = mass ? okv_gpu_addr(d->block_mass, d->mass_offset) : 0;
  a.n_seqs = d->n_seqs;
  a.n_kv_heads = d->n_kv_heads;
  a.group_size = G;
  a.head_dim = D;
  a.n_query_tokens = T;
  a.kv_dtype = (uint32_t)d->kv_dtype;
  a.n_inflight = d->n_inflight;
  a.rows_per_cta = (uint32_t)R;
  a.scale = 1.0f / sqrtf((float)D);
  st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_ATTENTION, (uint32_t)U, (uint32_t)n_chunks, OKV_GPU_ATTENTION_THREADS, smem, &a);
  if (st == OKV_OK && mass)
    st = okv_gpu_launch(s, OKV_GPU_FN_ATTENTION_MASS, (uint32_t)U, T, OKV_GPU_MASS_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[5] = {d->kv_pool, d->q, d->n_inflight > 0 ? d->inflight_kv : NULL, d->out,
                               mass ? d->block_mass : NULL};
  return okv_gpu_op_end(s, st, p.st, bufs, 5);
}

static okv_status_t okv_gpu_summarize_blocks(okv_hal_stream_t *stream, const okv_summary_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  if (d->n_blocks == 0 || d->head_dim == 0) return OKV_OK;
  const size_t n = d->n_blocks;
  const size_t upload = okv_gpu_align(n * 8u) * 2u + okv_gpu_align(n);
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, upload, &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_summary_args_t a = {0};
  a.kv = okv_gpu_addr(d->kv, 0);
  a.block_bytes = okv_block_bytes(d->kv_dtype, d->head_dim);
  a.summaries = okv_gpu_addr(d->summaries, 0);
  a.block_index = okv_gpu_pack(&p, d->block_index, n * 8u);
  a.summary_index = okv_gpu_pack(&p, d->summary_index, n * 8u);
  a.valid = okv_gpu_pack(&p, d->valid, n);
  a.n_blocks = d->n_blocks;
  a.head_dim = d->head_dim;
  a.kv_dtype = (uint32_t)d->kv_dtype;
  st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_SUMMARIZE, okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[2] = {d->kv, d->summaries};
  return okv_gpu_op_end(s, st, p.st, bufs, 2);
}

/* True when some summary index appears twice (then entries apply in order). */
static bool okv_gpu_has_duplicates(const okv_allocator_t *al, const uint64_t *idx, uint32_t n, bool *out_oom) {
  *out_oom = false;
  if (n < 2) return false;
  size_t cap = 16;
  while (cap < (size_t)n * 2) cap *= 2;
  uint64_t *table = okv_malloc(al, cap * sizeof(uint64_t));
  if (!table) {
    *out_oom = true;
    return true;
  }
  memset(table, 0xff, cap * sizeof(uint64_t)); /* UINT64_MAX = empty */
  bool dup = false;
  for (uint32_t i = 0; i < n && !dup; ++i) {
    const uint64_t key = idx[i];
    if (key == UINT64_MAX) { /* cannot be stored: treat as possibly repeated */
      dup = true;
      break;
    }
    size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
    while (table[h] != UINT64_MAX && table[h] != key) h = (h + 1) & (cap - 1);
    if (table[h] == key) dup = true;
    table[h] = key;
  }
  okv_free(al, table);
  return dup;
}

static okv_status_t okv_gpu_summary_append(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                           okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index,
                                           const float *keys, const uint8_t *first) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  if (n == 0 || head_dim == 0) return OKV_OK;
  const okv_allocator_t *al = &stream->device->allocator;
  bool oom = false;
  const bool dup = okv_gpu_has_duplicates(al, summary_index, n, &oom);
  (void)oom; /* without the table the in-order launch is used: correct, slower */
  const size_t key_bytes = (size_t)n * head_dim * 4u;
  const size_t upload = okv_gpu_align(n * 8u) + okv_gpu_align(key_bytes) + okv_gpu_align(n);
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, upload, &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_append_args_t a = {0};
  a.summaries = okv_gpu_addr(summaries, 0);
  a.summary_index = okv_gpu_pack(&p, summary_index, n * 8u);
  /* Keys rounded through the KV dtype, so the summary bounds the stored key. */
  float *kr = (float *)((unsigned char *)p.st->host + p.used);
  a.keys = okv_gpu_pack(&p, NULL, key_bytes);
  const size_t n_el = (size_t)n * head_dim;
  for (size_t i = 0; i < n_el; ++i) {
    float k = keys[i];
    if (kv_dtype == OKV_DTYPE_F16) {
      k = okv_f16_to_f32(okv_f32_to_f16(k));
    } else if (kv_dtype == OKV_DTYPE_BF16) {
      k = okv_bf16_to_f32(okv_f32_to_bf16(k));
    }
    kr[i] = k;
  }
  a.first = okv_gpu_pack(&p, first, n);
  a.n = n;
  a.head_dim = head_dim;
  st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_SUMMARY_APPEND, dup ? 1u : okv_gpu_grid_cap(n), 1, OKV_GPU_SUMMARY_THREADS, 0,
                        &a);
  okv_hal_buffer_t *bufs[1] = {summaries};
  return okv_gpu_op_end(s, st, p.st, bufs, 1);
}

static okv_status_t okv_gpu_score_blocks(okv_hal_stream_t *stream, const okv_score_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  const uint64_t U = (uint64_t)d->n_seqs * d->n_kv_heads;
  if (U == 0 || d->head_dim == 0 || d->group_size == 0 || d->t_end <= d->t_begin) return OKV_OK;
  uint32_t max_n = 0;
  for (uint64_t u = 0; u < U; ++u) max_n = d->seg_n_blocks[u] > max_n ? d->seg_n_blocks[u] : max_n;
  if (max_n == 0) return OKV_OK;
  const uint64_t gy = (max_n + OKV_GPU_SCORE_BLOCKS_PER_CTA - 1) / OKV_GPU_SCORE_BLOCKS_PER_CTA;
  if (U > 0x7fffffffu || gy > 65535u)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "seg_n_blocks: %u blocks per segment exceed the GPU grid",
                           max_n);
  const size_t upload = okv_gpu_align(U * 8u) * 2u + okv_gpu_align(U * 4u);
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, upload, &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_score_args_t a = {0};
  a.q = okv_gpu_addr(d->q, d->q_offset);
  a.summaries = okv_gpu_addr(d->summaries, 0);
  a.scores = okv_gpu_addr(d->scores, 0);
  a.seg_summary_first = okv_gpu_pack(&p, d->seg_summary_first, U * 8u);
  a.seg_score_first = okv_gpu_pack(&p, d->seg_score_first, U * 8u);
  a.seg_n_blocks = okv_gpu_pack(&p, d->seg_n_blocks, U * 4u);
  a.n_seqs = d->n_seqs;
  a.n_kv_heads = d->n_kv_heads;
  a.group_size = d->group_size;
  a.head_dim = d->head_dim;
  a.n_query_tokens = d->n_query_tokens;
  a.t_begin = d->t_begin;
  a.t_end = d->t_end;
  a.scale = 1.0f / sqrtf((float)d->head_dim);
  st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_SCORE, (uint32_t)U, (uint32_t)gy, OKV_GPU_SCORE_THREADS, 0, &a);
  okv_hal_buffer_t *bufs[3] = {d->q, d->summaries, d->scores};
  return okv_gpu_op_end(s, st, p.st, bufs, 3);
}

static okv_status_t okv_gpu_topk(okv_hal_stream_t *stream, const okv_topk_desc_t *d) {
  okv_gpu_stream_t *s = (okv_gpu_stream_t *)stream;
  okv_gpu_device_t *dev = okv_gpu_stream_dev(s);
  const uint32_t U = d->n_segments;
  if (U == 0 || d->k == 0) return OKV_OK;
  uint32_t max_n = 0;
  for (uint32_t u = 0; u < U; ++u) max_n = d->seg_n[u] > max_n ? d->seg_n[u] : max_n;
  const uint64_t bitmap_bytes = 4ull * ((max_n + 31ull) / 32ull);
  const uint64_t smem_cap = dev->smem_max_bytes > OKV_GPU_TOPK_STATIC_SMEM_BYTES
                                ? dev->smem_max_bytes - OKV_GPU_TOPK_STATIC_SMEM_BYTES
                                : 0;
  if (bitmap_bytes > smem_cap || U > 0x7fffffffu)
    return okv_status_make(OKV_STATUS_INVALID_ARGUMENT, "seg_n: %u blocks in one segment exceed the GPU top-K limit",
                           max_n);
  const size_t n_excl = d->excl_offsets ? d->excl_offsets[U] : 0;
  const size_t upload = okv_gpu_align((size_t)U * 8u) + okv_gpu_align((size_t)U * 4u) +
                        (d->excl_offsets ? okv_gpu_align(((size_t)U + 1) * 4u) + okv_gpu_align(n_excl * 4u) : 0);
  OKV_RETURN_IF_ERROR(okv_gpu_stream_enter(s));
  okv_gpu_pack_t p = {0};
  okv_status_t st = okv_gpu_staging_get(s, upload, &p.st);
  if (st != OKV_OK) {
    pthread_mutex_unlock(&s->mutex);
    return st;
  }
  okv_gpu_topk_args_t a = {0};
  a.scores = okv_gpu_addr(d->scores, 0);
  a.seg_score_first = okv_gpu_pack(&p, d->seg_score_first, (size_t)U * 8u);
  a.seg_n = okv_gpu_pack(&p, d->seg_n, (size_t)U * 4u);
  if (d->excl_offsets) {
    a.excl_offsets = okv_gpu_pack(&p, d->excl_offsets, ((size_t)U + 1) * 4u);
    a.excl_blocks = okv_gpu_pack(&p, d->excl_blocks, n_excl * 4u);
  }
  a.out_indices = okv_gpu_addr(d->out_indices, d->out_offset);
  a.out_counts = d->out_counts ? okv_gpu_addr(d->out_counts, d->counts_offset) : 0;
  a.n_segments = U;
  a.k = d->k;
  st = okv_gpu_pack_upload(s, &p, upload);
  if (st == OKV_OK)
    st = okv_gpu_launch(s, OKV_GPU_FN_TOPK, U, 1, OKV_GPU_TOPK_THREADS, (uint32_t)bitmap_bytes, &a);
  okv_hal_buffer_t *bufs[3] = {d->scores, d->out_indices, d->out_counts};
  return okv_gpu_op_end(s, st, p.st, bufs, 3);
}

static const okv_hal_device_vtable_t okv_gpu_vtable = {
    .device_destroy = okv_gpu_device_destroy,
    .buffer_alloc = okv_gpu_buffer_alloc,
    .buffer_destroy = okv_gpu_buffer_destroy,
    .buffer_write = okv_gpu_buffer_write,
    .buffer_read = okv_gpu_buffer_read,
    .stream_create = okv_gpu_stream_create,
    .stream_destroy = okv_gpu_stream_destroy,
    .stream_synchronize = okv_gpu_stream_synchronize,
    .event_create = okv_gpu_event_create,
    .event_destroy = okv_gpu_event_destroy,
    .event_record = okv_gpu_event_record,
    .event_query = okv_gpu_event_query,
    .event_wait = okv_gpu_event_wait,
    .stream_wait_event = okv_gpu_stream_wait_event,
    .event_elapsed = okv_gpu_event_elapsed,
    .copy = okv_gpu_copy,
    .copy_blocks = okv_gpu_copy_blocks,
    .enqueue_failure = okv_gpu_enqueue_failure,
    .attention = okv_gpu_attention,
    .summarize_blocks = okv_gpu_summarize_blocks,
    .summary_append = okv_gpu_summary_append,
    .score_blocks = okv_gpu_score_blocks,
    .topk = okv_gpu_topk,
};
