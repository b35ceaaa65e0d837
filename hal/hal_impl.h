/* Internal HAL interface between hal/ and backends/: the ref-counted resource
 * base, the device vtable backends fill in, and the backend registry entry.
 * Not installed. hal/ and core/ never include a vendor header; backends may. */
#ifndef OASISKV_HAL_IMPL_H
#define OASISKV_HAL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "oasiskv/hal.h"
#include "oasiskv/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_hal_kind_e {
  OKV_HAL_KIND_DEVICE = 1,
  OKV_HAL_KIND_BUFFER = 2,
  OKV_HAL_KIND_STREAM = 3,
  OKV_HAL_KIND_EVENT = 4,
} okv_hal_kind_t;

/* Every HAL object starts with this base (at offset 0). */
typedef struct okv_hal_resource_t {
  atomic_int ref_count;
  okv_hal_kind_t kind;
} okv_hal_resource_t;

typedef struct okv_hal_device_vtable_t okv_hal_device_vtable_t;

typedef struct okv_hal_fault_hooks_t okv_hal_fault_hooks_t;

struct okv_hal_device_t {
  okv_hal_resource_t base;
  const okv_hal_fault_hooks_t *fault_hooks; /* NULL unless a test installed some (hal/hal_fault.h) */
  const okv_hal_device_vtable_t *vtable;
  okv_allocator_t allocator;
  okv_hal_device_info_t info;
  pthread_mutex_t usage_mutex;             /* guards used_bytes */
  uint64_t capacity_bytes[OKV_TIER_COUNT]; /* limits (UINT64_MAX = unlimited) */
  uint64_t used_bytes[OKV_TIER_COUNT];
  int n_threads;
};

struct okv_hal_buffer_t {
  okv_hal_resource_t base;
  okv_hal_device_t *device; /* retained */
  okv_tier_t tier;
  uint64_t size;    /* bytes */
  void *host_ptr;   /* host-addressable pointer or NULL */
  void *device_ptr; /* device-addressable pointer (GPU), == host_ptr on CPU */
};

struct okv_hal_stream_t {
  okv_hal_resource_t base;
  okv_hal_device_t *device; /* retained */
  atomic_uint batch_depth;  /* okv_hal_stream_batch_begin calls not ended yet */
};

struct okv_hal_event_t {
  okv_hal_resource_t base;
  okv_hal_device_t *device; /* retained */
};

/* Backends allocate their object structs (embedding the public struct as the
 * first member) and return them; hal/ owns ref counting, the live-handle
 * registry and capacity accounting, then calls the destroy hooks. */
struct okv_hal_device_vtable_t {
  void (*device_destroy)(okv_hal_device_t *device);

  /* Capacity has already been reserved by hal/; the backend allocates the
   * memory (zeroed), fills host_ptr/device_ptr and returns the object. */
  okv_status_t (*buffer_alloc)(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                               okv_hal_buffer_t **out_buffer);
  void (*buffer_destroy)(okv_hal_buffer_t *buffer);
  okv_status_t (*buffer_write)(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes);
  okv_status_t (*buffer_read)(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes);

  okv_status_t (*stream_create)(okv_hal_device_t *device, okv_hal_stream_t **out_stream);
  void (*stream_destroy)(okv_hal_stream_t *stream); /* waits for queued work */
  okv_status_t (*stream_synchronize)(okv_hal_stream_t *stream);
  /* Optional (NULL: batches change nothing): the stream's batch opened (true) or closed (false); called on the
   * depth's 0 -> 1 and 1 -> 0 transitions (okv_hal_stream_batch_begin / _end). */
  void (*stream_batch)(okv_hal_stream_t *stream, bool open);

  okv_status_t (*event_create)(okv_hal_device_t *device, okv_hal_event_t **out_event);
  void (*event_destroy)(okv_hal_event_t *event);
  okv_status_t (*event_record)(okv_hal_event_t *event, okv_hal_stream_t *stream);
  okv_status_t (*event_query)(okv_hal_event_t *event, bool *out_done);
  okv_status_t (*event_wait)(okv_hal_event_t *event);
  okv_status_t (*stream_wait_event)(okv_hal_stream_t *stream, okv_hal_event_t *event);
  okv_status_t (*event_elapsed)(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds);

  /* Arguments already validated by hal/ (ranges, tiers in copy_mask). The
   * backend retains the buffers until the work has run; `pairs` is borrowed
   * for the duration of the call only. */
  okv_status_t (*copy)(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset, okv_hal_buffer_t *dst,
                       uint64_t dst_offset, uint64_t bytes);
  okv_status_t (*copy_blocks)(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                              uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs);

  /* Makes the stream report `code` (with `message`) through its next event /
   * synchronize, as if an enqueued operation had failed at this point of the
   * stream (used by fault injection, see hal/hal_fault.h). */
  okv_status_t (*enqueue_failure)(okv_hal_stream_t *stream, okv_status_code_t code, const char *message);

  /* Kernels: descriptors already validated by hal/hal_kernel_validate.c; host arrays
   * are borrowed for the duration of the call only (use the clone helpers
   * below to keep them). */
  okv_status_t (*attention)(okv_hal_stream_t *stream, const okv_attention_desc_t *desc);
  okv_status_t (*summarize_blocks)(okv_hal_stream_t *stream, const okv_summary_desc_t *desc);
  okv_status_t (*summary_append)(okv_hal_stream_t *stream, okv_hal_buffer_t *summaries, uint32_t head_dim,
                                 okv_dtype_t kv_dtype, uint32_t n, const uint64_t *summary_index, const float *keys,
                                 const uint8_t *first);
  okv_status_t (*score_blocks)(okv_hal_stream_t *stream, const okv_score_desc_t *desc);
  okv_status_t (*topk)(okv_hal_stream_t *stream, const okv_topk_desc_t *desc);
  /* Append with any summary dtype (okv_hal_summary_append_ex_async). Optional: without it hal/ sends
   * f32-summary appends to summary_append and answers UNAVAILABLE for narrowed ones. */
  okv_status_t (*summary_append_ex)(okv_hal_stream_t *stream, const okv_summary_append_desc_t *desc);
  /* Group summaries (okv_hal_summary_reduce_async); UNAVAILABLE when NULL. */
  okv_status_t (*summary_reduce)(okv_hal_stream_t *stream, const okv_summary_reduce_desc_t *desc);

  /* Token writes into slots (okv_hal_kv_write_tokens_async); UNAVAILABLE when NULL. */
  okv_status_t (*kv_write)(okv_hal_stream_t *stream, const okv_kv_write_desc_t *desc);
  /* Selection on slot tables and its commit (okv_hal_select_async, okv_hal_slot_commit_async);
   * UNAVAILABLE when NULL. */
  okv_status_t (*select)(okv_hal_stream_t *stream, const okv_select_desc_t *desc);
  okv_status_t (*slot_commit)(okv_hal_stream_t *stream, const okv_slot_commit_desc_t *desc);

  /* Emulated link (okv_hal_device_set_link; values already validated by hal/, which also updates
   * device->info). NULL on backends whose link is real. */
  void (*set_link)(okv_hal_device_t *device, double bytes_per_s, double latency_s);
};

/* Registry entry: one per backend compiled in (hal/hal_backend_registry.c holds
 * the table, filled by build options OKV_HAVE_CUDA / OKV_HAVE_HIP). */
typedef struct okv_hal_backend_t {
  const char *name;
  okv_status_t (*enumerate)(okv_hal_device_info_t *out_infos, size_t capacity, size_t *out_count);
  /* Creates the device; hal/ has already validated params and filled nothing:
   * the backend allocates its struct (embedding okv_hal_device_t first) with
   * `allocator`, and hal/ then initialises base, allocator, capacities. */
  okv_status_t (*create)(const okv_hal_device_params_t *params, const okv_allocator_t *allocator,
                         okv_hal_device_t **out_device);
  /* True when the backend emulates its HOST<->DEVICE link (params link_*; cpu). A backend whose link is
   * real leaves it false and hal/ refuses non-zero link parameters before create is called. */
  bool link_emulation;
} okv_hal_backend_t;

extern const okv_hal_backend_t okv_cpu_backend;
#ifdef OKV_HAVE_CUDA
extern const okv_hal_backend_t okv_cuda_backend;
#endif
#ifdef OKV_HAVE_HIP
extern const okv_hal_backend_t okv_hip_backend;
#endif

/* Resource helpers for backends. */
void okv_hal_resource_init(okv_hal_resource_t *res, okv_hal_kind_t kind); /* ref_count = 1, registers */

/* Deep copies of kernel descriptors (host arrays owned by the clone), for
 * backends that run kernels later on a worker thread. Buffers are NOT retained
 * by the clone. Free with the matching _free. */
okv_status_t okv_attention_desc_clone(const okv_allocator_t *a, const okv_attention_desc_t *d,
                                      okv_attention_desc_t **out);
void okv_attention_desc_free(const okv_allocator_t *a, okv_attention_desc_t *d);
okv_status_t okv_summary_desc_clone(const okv_allocator_t *a, const okv_summary_desc_t *d, okv_summary_desc_t **out);
void okv_summary_desc_free(const okv_allocator_t *a, okv_summary_desc_t *d);
okv_status_t okv_score_desc_clone(const okv_allocator_t *a, const okv_score_desc_t *d, okv_score_desc_t **out);
void okv_score_desc_free(const okv_allocator_t *a, okv_score_desc_t *d);
okv_status_t okv_topk_desc_clone(const okv_allocator_t *a, const okv_topk_desc_t *d, okv_topk_desc_t **out);
void okv_topk_desc_free(const okv_allocator_t *a, okv_topk_desc_t *d);
okv_status_t okv_summary_append_desc_clone(const okv_allocator_t *a, const okv_summary_append_desc_t *d,
                                           okv_summary_append_desc_t **out);
void okv_summary_append_desc_free(const okv_allocator_t *a, okv_summary_append_desc_t *d);
okv_status_t okv_kv_write_desc_clone(const okv_allocator_t *a, const okv_kv_write_desc_t *d, okv_kv_write_desc_t **out);
void okv_kv_write_desc_free(const okv_allocator_t *a, okv_kv_write_desc_t *d);
okv_status_t okv_summary_reduce_desc_clone(const okv_allocator_t *a, const okv_summary_reduce_desc_t *d,
                                           okv_summary_reduce_desc_t **out);
void okv_summary_reduce_desc_free(const okv_allocator_t *a, okv_summary_reduce_desc_t *d);
okv_status_t okv_select_desc_clone(const okv_allocator_t *a, const okv_select_desc_t *d, okv_select_desc_t **out);
void okv_select_desc_free(const okv_allocator_t *a, okv_select_desc_t *d);
okv_status_t okv_slot_commit_desc_clone(const okv_allocator_t *a, const okv_slot_commit_desc_t *d,
                                        okv_slot_commit_desc_t **out);
void okv_slot_commit_desc_free(const okv_allocator_t *a, okv_slot_commit_desc_t *d);
/* Entries of a top-K descriptor's index_map that the kernel may read (and a clone copies):
 * max over segments with seg_n > 0 of seg_score_first + seg_n; 0 without a map. Needs a validated desc. */
uint64_t okv_topk_index_map_len(const okv_topk_desc_t *d);

/* ---- Handle checks ---- */

/* Checks that `obj` is a live HAL object of `kind` (registered by
 * okv_hal_resource_init, not yet released to zero). Returns OKV_OK, or
 * INVALID_ARGUMENT "<arg_name>: invalid or released handle" (NULL, never
 * created, already destroyed) / "<arg_name>: handle is a <kind>, expected a
 * <kind>" without touching a dead object. Thread-safe (one process-wide
 * mutex). Used by every public okv_hal_* entry (hal/hal_live.c implements it). */
okv_status_t okv_hal_check_live(const void *obj, okv_hal_kind_t kind, const char *arg_name);

/* Field ownership between hal/ and a backend:
 *  - device: the backend's create fills vtable, info (backend, name, ordinal,
 *    physical_bytes, alloc_tiers, copy_mask) and may pre-set a default in
 *    capacity_bytes[t] (0 = "physical size for DEVICE, unlimited otherwise");
 *    hal/ then sets base, fault_hooks = NULL, allocator, capacity_bytes from
 *    params, used_bytes = 0, usage_mutex and n_threads (params or online CPUs).
 *  - buffer/stream/event: the backend allocates the struct (with the device's
 *    allocator) and fills its own part (host_ptr/device_ptr for buffers); hal/
 *    then sets base (okv_hal_resource_init), device (retained), tier and size.
 *    A backend may call okv_hal_resource_init itself; doing it twice is harmless.
 *  - destroy hooks free only the backend's part and the struct; hal/ has
 *    already unregistered the handle and releases `device` after the hook. */

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_HAL_IMPL_H */
