/* OasisKV hardware abstraction layer (HAL): backends, devices, memory tiers,
 * buffers, streams, events, asynchronous and batched block copies.
 *
 * Objects (device, buffer, stream, event) are reference-counted. Whoever
 * creates an object releases it once; retain adds a reference. Releasing a
 * handle that is not live (never created, or already released to zero) returns
 * OKV_STATUS_INVALID_ARGUMENT and touches nothing: the HAL keeps a registry of
 * live handles.
 *
 * Thread safety: every call is thread-safe unless its comment says otherwise.
 * Operations enqueued on one stream run in order; different streams run
 * concurrently and are ordered only through events.
 *
 * Asynchronous errors: a failure of an enqueued operation (e.g. a copy) is
 * reported by the next event recorded on that stream (okv_hal_event_query /
 * okv_hal_event_wait return OKV_STATUS_COPY_FAILED) and by
 * okv_hal_stream_synchronize; it is cleared once reported, so later work on the
 * stream is unaffected.
 */
#ifndef OASISKV_HAL_H
#define OASISKV_HAL_H

#include "oasiskv/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oasiskv/allocator.h"
#include "oasiskv/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Memory tiers (in the manner of a memory-type enum with a name table) ---- */
typedef enum okv_tier_e {
  OKV_TIER_DEVICE = 0, /* accelerator memory (HBM); on the CPU backend a host arena */
  OKV_TIER_HOST = 1,   /* pinned host DRAM, device-accessible where the backend can */
  OKV_TIER_REMOTE = 2, /* another node's DRAM; reserved, no backend allocates it yet */
  OKV_TIER_COUNT = 3
} okv_tier_t;

#define OKV_TIER_BIT(t) (1u << (unsigned)(t))

/* "device", "host", "remote"; "unknown" for out-of-range values.
 * Errors: none (never fails). Thread-safe. */
OKV_API const char *okv_tier_name(okv_tier_t tier);

/* ---- Objects ---- */
typedef struct okv_hal_device_t okv_hal_device_t;
typedef struct okv_hal_buffer_t okv_hal_buffer_t;
typedef struct okv_hal_stream_t okv_hal_stream_t;
typedef struct okv_hal_event_t okv_hal_event_t;

/* ---- Backends compiled in ---- */

/* Number of backends compiled into this build (>= 1: "cpu" is always built).
 * Errors: none. Thread-safe. */
OKV_API size_t okv_hal_backend_count(void);
/* Name of backend i ("cpu", "cuda", "hip"), NULL if i is out of range.
 * Errors: none. Thread-safe; the string is static. */
OKV_API const char *okv_hal_backend_name(size_t i);

typedef struct okv_hal_device_info_t {
  char backend[16];                        /* "cpu", "cuda", "hip" */
  char name[128];                          /* e.g. "NVIDIA H200", "x86_64 host (2 threads)" */
  int ordinal;                             /* index within the backend */
  uint64_t physical_bytes[OKV_TIER_COUNT]; /* what the hardware has per tier (0 = none/unknown) */
  uint32_t alloc_tiers;                    /* OKV_TIER_BIT mask of tiers this backend can allocate */
  uint32_t copy_mask[OKV_TIER_COUNT];      /* copy_mask[src] has OKV_TIER_BIT(dst) set if src->dst copies work */
  /* SIMD level the backend's host kernels dispatch to, as a short name: on the
   * cpu backend "baseline", "avx2+fma" or "avx512" (the level active when the
   * info was filled, i.e. at okv_hal_backend_enumerate or
   * okv_hal_device_create); "" where kernels do not run on host SIMD (GPU
   * backends). */
  char simd[16];
  /* The EMULATED link (cpu backend only, see okv_hal_device_params_t): HOST<->DEVICE stream copies paced to
   * link_bytes_per_s (bytes per second) with link_latency_s (seconds) per copy operation. 0 = unpaced; always 0
   * on GPU backends, whose link is real. */
  double link_bytes_per_s;
  double link_latency_s;
} okv_hal_device_info_t;

/* Enumerates the devices of backend `backend_name`. Writes up to `capacity`
 * infos to `out_infos` (may be NULL when capacity is 0) and the number found to
 * `*out_count`.
 * Errors: NOT_FOUND (no such backend compiled in), UNAVAILABLE (driver or GPU
 * absent; the message gives the reason, e.g. "libcudart.so could not be
 * loaded"), INVALID_ARGUMENT (NULL out_count). */
OKV_API okv_status_t okv_hal_backend_enumerate(const char *backend_name, okv_hal_device_info_t *out_infos,
                                               size_t capacity, size_t *out_count);

/* ---- Devices ---- */
typedef struct okv_hal_device_params_t {
  int ordinal;                             /* device index within the backend (default 0) */
  uint64_t capacity_bytes[OKV_TIER_COUNT]; /* per-tier limit in bytes; 0 = default (DEVICE: the
                                                physical size, CPU: 1 GiB arena; HOST: unlimited) */
  int n_threads;                           /* CPU backend: OpenMP threads for kernels (0 = all) */
  /* EMULATION of a PCIe-like link, cpu backend only (a GPU's link is real: any non-zero value is refused there
   * with INVALID_ARGUMENT). With link_bytes_per_s > 0, every stream copy between the HOST and DEVICE tiers
   * (okv_hal_copy_async, or one okv_hal_copy_blocks_async batch) takes at least
   *   link_latency_s + bytes / link_bytes_per_s
   * seconds, timed on the copy's stream worker, and each direction (HOST->DEVICE, DEVICE->HOST) is one
   * copy engine shared by every stream of the device: copies of one direction run one after the other, the two
   * directions overlap. DEVICE->DEVICE and HOST->HOST copies, blocking buffer reads/writes and kernels are not
   * paced. 0 = unpaced (the default). Units: bytes per second, seconds; both finite and >= 0; a latency
   * without a bandwidth paces nothing. */
  double link_bytes_per_s;
  double link_latency_s;
} okv_hal_device_params_t;

/* Sets every default. Errors: none (NULL is ignored). */
OKV_API void okv_hal_device_params_init(okv_hal_device_params_t *params);

/* Creates a device of backend `backend_name` (see okv_hal_backend_name).
 * `params` may be NULL (defaults); `allocator` may be NULL (system allocator);
 * the device keeps a copy of *allocator and frees everything through it.
 * Capacity limits smaller than the physical size emulate a small HBM.
 * Errors: NOT_FOUND (backend not compiled in), UNAVAILABLE (no driver/GPU, or
 * ordinal out of range), INVALID_ARGUMENT (negative ordinal or n_threads; a
 * link value negative or not finite, or non-zero on a backend whose link is
 * real), OUT_OF_MEMORY.
 * The caller owns *out_device (release with okv_hal_device_release). */
OKV_API okv_status_t okv_hal_device_create(const char *backend_name, const okv_hal_device_params_t *params,
                                           const okv_allocator_t *allocator, okv_hal_device_t **out_device);
/* Reference counting (thread-safe). The last release frees the device; every
 * buffer, stream and event holds a reference, so the device outlives them.
 * Errors: INVALID_ARGUMENT (NULL, dead or double-released handle). */
OKV_API okv_status_t okv_hal_device_retain(okv_hal_device_t *device);
OKV_API okv_status_t okv_hal_device_release(okv_hal_device_t *device);

/* Changes the emulated link of a cpu-backend device (see okv_hal_device_params_t) at run time, e.g. to halve it
 * mid-run: copies that already started keep their pacing, later ones use the new values; the device info
 * reports them. bytes_per_s 0 = unpaced.
 * Errors: INVALID_ARGUMENT (dead handle; a value negative, NaN or infinite; a backend whose link is real:
 * cuda, hip). Thread-safe. */
OKV_API okv_status_t okv_hal_device_set_link(okv_hal_device_t *device, double bytes_per_s, double latency_s);

/* Copies the device's description into *out_info.
 * Errors: INVALID_ARGUMENT (dead handle, NULL out_info). Thread-safe. */
OKV_API okv_status_t okv_hal_device_info(const okv_hal_device_t *device, okv_hal_device_info_t *out_info);

/* Capacity limit and bytes currently allocated in `tier` (bytes).
 * Errors: INVALID_ARGUMENT (dead handle, tier out of range, NULL outputs). Thread-safe. */
OKV_API okv_status_t okv_hal_device_tier_usage(const okv_hal_device_t *device, okv_tier_t tier,
                                               uint64_t *out_capacity_bytes, uint64_t *out_used_bytes);

/* The allocator the device was created with (borrowed), NULL for a dead handle.
 * Errors: none (returns NULL). Thread-safe. */
OKV_API const okv_allocator_t *okv_hal_device_allocator(const okv_hal_device_t *device);

/* ---- Buffers ---- */

/* Allocates `bytes` (> 0) in `tier`. Contents are zeroed.
 * Errors: OUT_OF_MEMORY naming the tier when the tier's capacity limit or the
 * physical memory is exceeded (nothing is left allocated), INVALID_ARGUMENT
 * (tier not allocatable on this backend, bytes == 0). */
OKV_API okv_status_t okv_hal_buffer_alloc(okv_hal_device_t *device, okv_tier_t tier, uint64_t bytes,
                                          okv_hal_buffer_t **out_buffer);
/* Reference counting (thread-safe); enqueued work holds references until it ran.
 * Errors: INVALID_ARGUMENT (NULL, dead or double-released handle). */
OKV_API okv_status_t okv_hal_buffer_retain(okv_hal_buffer_t *buffer);
OKV_API okv_status_t okv_hal_buffer_release(okv_hal_buffer_t *buffer);

/* Size in bytes (0 for a dead handle) and tier (OKV_TIER_COUNT for a dead
 * handle). Errors: none. Thread-safe. */
OKV_API uint64_t okv_hal_buffer_size(const okv_hal_buffer_t *buffer);
OKV_API okv_tier_t okv_hal_buffer_tier(const okv_hal_buffer_t *buffer);
/* Host-addressable pointer of the buffer, or NULL when the host cannot address it
 * (e.g. GPU DEVICE memory). HOST-tier buffers always have one. Reading it while
 * an enqueued operation writes the buffer is a race the caller must avoid.
 * Errors: none (NULL for a dead handle). */
OKV_API void *okv_hal_buffer_host_ptr(const okv_hal_buffer_t *buffer);

/* Blocking copies of `bytes` between pageable host memory and a buffer (any
 * tier) at byte `offset`; they are not ordered with streams: synchronize first.
 * Thread-safe against other calls on other buffers.
 * Errors: INVALID_ARGUMENT (dead handle, out-of-range [offset, offset+bytes),
 * NULL src/dst with bytes > 0), COPY_FAILED (the device copy failed; nothing
 * written on a failed write). */
OKV_API okv_status_t okv_hal_buffer_write(okv_hal_buffer_t *buffer, uint64_t offset, const void *src, uint64_t bytes);
OKV_API okv_status_t okv_hal_buffer_read(okv_hal_buffer_t *buffer, uint64_t offset, void *dst, uint64_t bytes);

/* ---- Streams: in-order queues of copies and kernels ---- */
/* Creates a stream (a CPU worker thread, a CUDA/HIP stream). The caller owns it.
 * Errors: INVALID_ARGUMENT (dead device, NULL out_stream), UNAVAILABLE (the
 * backend could not create one), OUT_OF_MEMORY (host allocator). */
OKV_API okv_status_t okv_hal_stream_create(okv_hal_device_t *device, okv_hal_stream_t **out_stream);
/* Reference counting; releasing the last reference waits for the stream's
 * queued work to finish. Errors: INVALID_ARGUMENT (dead or double-released handle). */
OKV_API okv_status_t okv_hal_stream_retain(okv_hal_stream_t *stream);
OKV_API okv_status_t okv_hal_stream_release(okv_hal_stream_t *stream);
/* Blocks until all work enqueued so far has finished; returns the first
 * unreported asynchronous error (then cleared).
 * Errors: INVALID_ARGUMENT (dead handle), COPY_FAILED (a copy failed),
 * INTERNAL (a kernel or the vendor runtime failed). */
OKV_API okv_status_t okv_hal_stream_synchronize(okv_hal_stream_t *stream);

/* Batched submission: between okv_hal_stream_batch_begin and the matching okv_hal_stream_batch_end, work
 * enqueued on `stream` may wait to start until the batch ends, so that a group of launches costs one start of
 * the stream instead of one each. Any wait that needs the work (okv_hal_stream_synchronize on the stream,
 * okv_hal_event_wait / okv_hal_event_query of an event recorded on it, okv_hal_stream_wait_event on another
 * stream) starts it at once: a batch never delays a result somebody waits for, and never deadlocks. Order,
 * errors and results are as without the batch. Batches nest (a depth per stream); begin and end are meant for
 * the thread that enqueues the batch's work (thread-safe, but a batch opened on one thread and used by another
 * holds back both threads' work). The CPU backend's stream worker otherwise sleeps whenever its queue runs dry
 * and each enqueue into it costs the caller a wake-up (a system call, a context switch on a loaded host); a
 * GPU queue takes work with no such cost, so CUDA and HIP ignore batches. No ownership moves: the stream is
 * neither retained nor released, and the caller keeps it alive until the batch ends. Source: this runtime's
 * (docs/api.md "Batched submission").
 * Errors: INVALID_ARGUMENT (dead handle; batch_end with no batch open on the stream). */
OKV_API okv_status_t okv_hal_stream_batch_begin(okv_hal_stream_t *stream);
OKV_API okv_status_t okv_hal_stream_batch_end(okv_hal_stream_t *stream);

/* ---- Events ---- */
/* Creates an event (never recorded: complete). The caller owns it.
 * Errors: INVALID_ARGUMENT (dead device, NULL out_event), UNAVAILABLE,
 * OUT_OF_MEMORY (host allocator). */
OKV_API okv_status_t okv_hal_event_create(okv_hal_device_t *device, okv_hal_event_t **out_event);
/* Reference counting. Errors: INVALID_ARGUMENT (dead or double-released handle). */
OKV_API okv_status_t okv_hal_event_retain(okv_hal_event_t *event);
OKV_API okv_status_t okv_hal_event_release(okv_hal_event_t *event);
/* Enqueues the event on `stream`: it completes when all earlier work on the
 * stream has finished, and captures that work's first error. Re-recording
 * resets it. Errors: INVALID_ARGUMENT (dead handles, another device's stream),
 * INTERNAL (the vendor runtime failed; nothing recorded). */
OKV_API okv_status_t okv_hal_event_record(okv_hal_event_t *event, okv_hal_stream_t *stream);
/* *out_done = true once the recorded work finished (also true if never
 * recorded). Returns the captured error, if any, once done.
 * Errors: INVALID_ARGUMENT (dead handle, NULL out_done), the captured error. */
OKV_API okv_status_t okv_hal_event_query(okv_hal_event_t *event, bool *out_done);
/* Blocks the calling host thread until the event completes; returns its captured error.
 * Errors: INVALID_ARGUMENT (dead handle), the captured error (COPY_FAILED,
 * INTERNAL), INTERNAL (the wait itself failed). */
OKV_API okv_status_t okv_hal_event_wait(okv_hal_event_t *event);
/* Work enqueued on `stream` after this call waits for `event` (as recorded now).
 * Errors: INVALID_ARGUMENT (dead handles, another device's event), INTERNAL. */
OKV_API okv_status_t okv_hal_stream_wait_event(okv_hal_stream_t *stream, okv_hal_event_t *event);
/* Seconds between the completion of two recorded events (both must be done);
 * >= 0 when `end` was recorded after `start` on the same stream.
 * Errors: INVALID_ARGUMENT (dead handles, different devices, NULL out_seconds,
 * an event not recorded or not done). */
OKV_API okv_status_t okv_hal_event_elapsed(okv_hal_event_t *start, okv_hal_event_t *end, double *out_seconds);

/* ---- Copies ---- */

/* Enqueues a copy of `bytes` from src[src_offset] to dst[dst_offset] on
 * `stream`. Any tier pair in the backend's copy_mask (HOST->DEVICE,
 * DEVICE->HOST, DEVICE->DEVICE, HOST->HOST). Ranges are validated before
 * anything is enqueued (INVALID_ARGUMENT, nothing copied). Both buffers are
 * retained until the copy has run. bytes == 0 is a no-op.
 * Errors: INVALID_ARGUMENT (dead handles, ranges, tier pair not in copy_mask,
 * another device's buffer); a copy that fails later is reported as COPY_FAILED
 * by the stream's next event or synchronize. */
OKV_API okv_status_t okv_hal_copy_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, uint64_t src_offset,
                                        okv_hal_buffer_t *dst, uint64_t dst_offset, uint64_t bytes);

/* One (source, destination) pair of a batched block copy, in bytes. */
typedef struct okv_block_copy_t {
  uint64_t src_offset;
  uint64_t dst_offset;
} okv_block_copy_t;

/* Enqueues one batched copy of `n_blocks` blocks of `block_bytes` each, given
 * as (src_offset, dst_offset) pairs: the shape of a decode step's transfer
 * plan (paper, Sec. "Transfer"). The pairs are copied at enqueue (the caller may
 * free them on return). On a GPU it is one launch / one batched call, never N
 * tiny copies. n_blocks == 0 is a no-op. Every pair is validated first: any
 * out-of-range offset -> INVALID_ARGUMENT and nothing is copied.
 * Destination ranges must not overlap each other (not checked).
 * Errors: as okv_hal_copy_async, plus INVALID_ARGUMENT naming the first bad pair
 * (pairs NULL with n_blocks > 0, block_bytes 0). */
OKV_API okv_status_t okv_hal_copy_blocks_async(okv_hal_stream_t *stream, okv_hal_buffer_t *src, okv_hal_buffer_t *dst,
                                               uint64_t block_bytes, size_t n_blocks, const okv_block_copy_t *pairs);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_HAL_H */
