/* Private to backends/gpu/: the GPU objects and the helpers the shared host
 * files call across each other. Vendor backends include gpu_vendor.h only.
 *
 *   gpu_device.c  kernel names, enumerate / create / destroy, the vtable
 *   gpu_memory.c  buffers (two tiers), blocking reads / writes, copies
 *   gpu_stream.c  streams (retire records, staging pool, pending error), events
 *   gpu_launch.c  argument packing and upload, launches of the HAL kernels
 *   gpu_loader.c  dlopen and symbol resolution for the vendor libraries
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
 *
 * Functions declared here are OKV_GPU_HIDDEN: not exported from the library. */
#ifndef OASISKV_GPU_INTERNAL_H
#define OASISKV_GPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_vendor.h"

#if defined(__GNUC__)
#define OKV_GPU_HIDDEN __attribute__((visibility("hidden")))
#else
#define OKV_GPU_HIDDEN
#endif

#define OKV_GPU_MAX_RECORD_BUFFERS 8
#define OKV_GPU_STAGING_MIN_BYTES  ((size_t)64 * 1024)
#define OKV_GPU_STAGING_ALIGN      16u
#define OKV_GPU_MAX_FREE_STAGING   8

/* ---- Objects ---- */

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
  okv_status_code_t pending_code; /* first unreported asynchronous error */
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

static inline okv_gpu_device_t *okv_gpu_dev(okv_hal_device_t *d) { return (okv_gpu_device_t *)d; }

static inline okv_gpu_device_t *okv_gpu_stream_dev(okv_gpu_stream_t *s) { return okv_gpu_dev(s->base.device); }

/* Binds the device's vendor context on the calling thread. */
static inline okv_status_t okv_gpu_bind(okv_gpu_device_t *dev) {
  return dev->vendor->context_bind(dev->ordinal, dev->ctx);
}

/* Device address of byte `offset` of `b` (0 for no buffer). */
static inline uint64_t okv_gpu_addr(const okv_hal_buffer_t *b, uint64_t offset) {
  return b ? (uint64_t)(uintptr_t)b->device_ptr + offset : 0;
}

/* ---- Buffers and copies (gpu_memory.c): okv_hal_device_vtable_t hooks ---- */

OKV_GPU_HIDDEN okv_status_t okv_gpu_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                                 okv_hal_buffer_t **out_buffer);
OKV_GPU_HIDDEN void okv_gpu_buffer_destroy(okv_hal_buffer_t *buffer);
OKV_GPU_HIDDEN okv_status_t okv_gpu_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src,
                                                 uint64_t bytes);
OKV_GPU_HIDDEN okv_status_t okv_gpu_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes);
OKV_GPU_HIDDEN okv_status_t okv_gpu_copy(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                                         okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes);
OKV_GPU_HIDDEN okv_status_t okv_gpu_copy_blocks(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                                uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs);

/* ---- Streams and events (gpu_stream.c) ---- */

/* okv_hal_device_vtable_t hooks. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream);
OKV_GPU_HIDDEN void okv_gpu_stream_destroy(okv_hal_stream_t *stream);
OKV_GPU_HIDDEN okv_status_t okv_gpu_stream_synchronize(okv_hal_stream_t *stream);
OKV_GPU_HIDDEN okv_status_t okv_gpu_enqueue_failure(okv_hal_stream_t *stream, okv_status_code_t code,
                                                    const char *message);
OKV_GPU_HIDDEN okv_status_t okv_gpu_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event);
OKV_GPU_HIDDEN void okv_gpu_event_destroy(okv_hal_event_t *event);
OKV_GPU_HIDDEN okv_status_t okv_gpu_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream);
OKV_GPU_HIDDEN okv_status_t okv_gpu_event_query(okv_hal_event_t *event, bool *out_done);
OKV_GPU_HIDDEN okv_status_t okv_gpu_event_wait(okv_hal_event_t *event);
OKV_GPU_HIDDEN okv_status_t okv_gpu_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event);
OKV_GPU_HIDDEN okv_status_t okv_gpu_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds);

/* Locks the stream, binds the context and reclaims finished work. On OKV_OK
 * the caller holds the stream mutex and unlocks it (or ends the operation with
 * okv_gpu_op_end). */
OKV_GPU_HIDDEN okv_status_t okv_gpu_stream_enter(okv_gpu_stream_t *s);

/* A staging area of at least `bytes`; caller holds the stream mutex, context bound. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_staging_get(okv_gpu_stream_t *s, size_t bytes, okv_gpu_staging_t **out);

/* Appends a record after the work just enqueued; takes a reference on each
 * non-NULL buffer (a buffer listed twice is retained twice) and the staging.
 * On failure the staging is still parked safely (synchronize, then reuse).
 * Caller holds the stream mutex. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_stream_retire(okv_gpu_stream_t *s, okv_gpu_staging_t *staging,
                                                  okv_hal_buffer_t *const *buffers, uint32_t n_buffers);

/* ---- Argument packing and launches (gpu_launch.c) ---- */

/* Packs host arrays into a staging area: each piece 16-byte aligned. */
typedef struct okv_gpu_pack_t {
  okv_gpu_staging_t *st;
  size_t used;
} okv_gpu_pack_t;

static inline size_t okv_gpu_align(size_t n) {
  return (n + OKV_GPU_STAGING_ALIGN - 1) & ~(size_t)(OKV_GPU_STAGING_ALIGN - 1);
}

/* Copies `bytes` of `src` (none when NULL: reserves room) into the staging
 * area and returns the device address the piece will have. */
OKV_GPU_HIDDEN uint64_t okv_gpu_pack(okv_gpu_pack_t *p, const void *src, size_t bytes);
/* Uploads the packed bytes [0, upload_bytes) of the staging area on the stream. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_pack_upload(okv_gpu_stream_t *s, okv_gpu_pack_t *p, size_t upload_bytes);
/* Begins an operation with a staging area of at least staging_bytes
 * (okv_gpu_stream_enter, then okv_gpu_staging_get). On OKV_OK the caller holds
 * the stream mutex and ends the operation with okv_gpu_op_end. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_op_begin(okv_gpu_stream_t *s, size_t staging_bytes, okv_gpu_pack_t *p);
/* Ends an operation: on success (st OK) parks staging and buffers behind a
 * record; on failure parks the staging only. Unlocks the stream. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_op_end(okv_gpu_stream_t *s, okv_status_t st, okv_gpu_staging_t *staging,
                                           okv_hal_buffer_t *const *bufs, uint32_t n_bufs);
/* Launches kernel `fn` on the stream with grid (gx, gy, 1) and one argument struct. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_launch(okv_gpu_stream_t *s, okv_gpu_fn_t fn, uint32_t gx, uint32_t gy,
                                           uint32_t threads, uint32_t smem, void *args);

static inline uint32_t okv_gpu_grid_cap(uint64_t n) { return n > (1u << 30) ? (1u << 30) : (uint32_t)n; }

/* okv_hal_device_vtable_t kernel hooks. */
OKV_GPU_HIDDEN okv_status_t okv_gpu_attention(okv_hal_stream_t *stream, const okv_attention_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_summarize_blocks(okv_hal_stream_t *stream, const okv_summary_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_summary_append(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries,
                                                   uint32_t head_dim, okv_dtype_t kv_dtype, uint32_t n,
                                                   const uint64_t *summary_index, const float *keys,
                                                   const uint8_t *first);
OKV_GPU_HIDDEN okv_status_t okv_gpu_score_blocks(okv_hal_stream_t *stream, const okv_score_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_topk(okv_hal_stream_t *stream, const okv_topk_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_summary_append_ex(okv_hal_stream_t *stream, const okv_summary_append_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_summary_reduce(okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_kv_write(okv_hal_stream_t *stream, const okv_kv_write_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_select(okv_hal_stream_t *stream, const okv_select_desc_t *d);
OKV_GPU_HIDDEN okv_status_t okv_gpu_slot_commit(okv_hal_stream_t *stream, const okv_slot_commit_desc_t *d);

#endif /* OASISKV_GPU_INTERNAL_H */
