/* Interface between the shared GPU host code (backends/gpu/) and the two
 * vendor backends (CUDA and HIP).
 *
 * The HAL device logic (buffers in two tiers, streams with a retire list,
 * events with a captured error, batched copies through the gather kernel,
 * kernel launches with per-stream staging of the descriptors' host arrays) is
 * written once in backends/gpu/ (gpu_device.c, gpu_memory.c, gpu_stream.c,
 * gpu_launch.c). Each vendor supplies a small table of operations on its
 * runtime (okv_gpu_vendor_t), implemented in backends/cuda/cuda_device.c
 * (driver API, libcuda.so.1) and backends/hip/hip_device.c (libamdhip64.so),
 * both loaded at run time by the one loader of backends/gpu/gpu_loader.h.
 * Every vendor operation converts the vendor's error code to an okv_status_t
 * at that edge (OKV_CUDA_RETURN_IF_ERROR / OKV_HIP_RETURN_IF_ERROR); the
 * common code never sees a vendor type or code.
 *
 * Device addresses are uint64_t; vendor handles (context, stream, event,
 * module, function) are opaque pointers. Not installed.
 */
#ifndef OASISKV_GPU_VENDOR_H
#define OASISKV_GPU_VENDOR_H

#include <stdbool.h>
#include <stdint.h>

#include "hal_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels of kernels/okv_kernels.cu, in the order of okv_gpu_kernel_names. */
typedef enum okv_gpu_fn_e {
  OKV_GPU_FN_GATHER = 0,
  OKV_GPU_FN_ATTENTION,
  OKV_GPU_FN_ATTENTION_MASS,
  OKV_GPU_FN_SUMMARIZE,
  OKV_GPU_FN_SUMMARY_APPEND,
  OKV_GPU_FN_SCORE,
  OKV_GPU_FN_TOPK,
  OKV_GPU_FN_SUMMARY_REDUCE,
  OKV_GPU_FN_KV_WRITE,
  OKV_GPU_FN_SELECT,
  OKV_GPU_FN_SLOT_COMMIT,
  OKV_GPU_FN_COUNT
} okv_gpu_fn_t;

/* Operations a vendor runtime provides. All are called with the device's
 * context bound on the calling thread (context_bind), except load,
 * device_count, device_describe and context_open. Every okv_status_t carries a
 * message naming the vendor call and what it was doing. */
typedef struct okv_gpu_vendor_t {
  const char *name;         /* "cuda" / "hip": the backend name */
  const char *library_name; /* for messages, e.g. "libcuda.so.1" */

  /* Opens the runtime library and initialises it, once per process (later
   * calls return the first outcome). UNAVAILABLE with the reason when the
   * library is absent, has not the symbols we need, or finds no driver/GPU. */
  okv_status_t (*load)(void);
  okv_status_t (*device_count)(int *out_count);
  /* Fills info->name and info->physical_bytes[OKV_TIER_DEVICE]; sets
   * *out_smem_max_bytes to the dynamic shared memory one thread block may use
   * (after function_set_smem). */
  okv_status_t (*device_describe)(int ordinal, okv_hal_device_info_t *info, uint32_t *out_smem_max_bytes);
  okv_status_t (*context_open)(int ordinal, void **out_ctx);
  void (*context_close)(int ordinal, void *ctx);
  okv_status_t (*context_bind)(int ordinal, void *ctx);

  okv_status_t (*mem_alloc)(uint64_t bytes, uint64_t *out_dptr);
  void (*mem_free)(uint64_t dptr);
  /* Pinned, device-mapped host memory: host pointer and its device address. */
  okv_status_t (*host_alloc)(uint64_t bytes, void **out_host, uint64_t *out_dptr);
  void (*host_free)(void *host);
  okv_status_t (*memset_zero)(uint64_t dptr, uint64_t bytes);               /* blocking */
  okv_status_t (*copy_htod)(uint64_t dst, const void *src, uint64_t bytes); /* blocking, pageable src */
  okv_status_t (*copy_dtoh)(void *dst, uint64_t src, uint64_t bytes);       /* blocking, pageable dst */
  /* Asynchronous copy between device addresses (device memory or mapped host). */
  okv_status_t (*copy_async)(uint64_t dst, uint64_t src, uint64_t bytes, void *stream);
  /* Asynchronous upload from pinned host memory. */
  okv_status_t (*copy_htod_async)(uint64_t dst, const void *src, uint64_t bytes, void *stream);

  okv_status_t (*stream_create)(void **out_stream);
  void (*stream_destroy)(void *stream);
  okv_status_t (*stream_synchronize)(void *stream);
  okv_status_t (*stream_wait_event)(void *stream, void *event);

  okv_status_t (*event_create)(bool timing, void **out_event);
  void (*event_destroy)(void *event);
  okv_status_t (*event_record)(void *event, void *stream);
  okv_status_t (*event_query)(void *event, bool *out_done);
  okv_status_t (*event_synchronize)(void *event);
  okv_status_t (*event_elapsed_ms)(void *start, void *end, float *out_ms);

  /* Loads the kernel image embedded in the library (fatbin / code object). */
  okv_status_t (*module_load)(void **out_module);
  void (*module_unload)(void *module);
  okv_status_t (*module_function)(void *module, const char *name, void **out_function);
  /* Allows `bytes` of dynamic shared memory per block for `function`. */
  okv_status_t (*function_set_smem)(void *function, uint32_t bytes);
  /* Launches `function` with one argument: the struct at `args`. */
  okv_status_t (*launch)(void *function, const uint32_t grid[3], uint32_t block_threads, uint32_t smem_bytes,
                         void *stream, void *args);
} okv_gpu_vendor_t;

/* Entry names in kernels/okv_kernels.cu, indexed by okv_gpu_fn_t. */
extern const char *const okv_gpu_kernel_names[OKV_GPU_FN_COUNT];

/* The okv_hal_backend_t hooks, parameterised by the vendor table.
 * okv_gpu_enumerate: UNAVAILABLE (library/driver/GPU absent, with the reason)
 * or the devices found. okv_gpu_create: UNAVAILABLE as above or for an
 * ordinal out of range, or when the embedded kernels cannot load on the GPU;
 * OUT_OF_MEMORY for the host allocator. */
okv_status_t okv_gpu_enumerate(const okv_gpu_vendor_t *vendor, okv_hal_device_info_t *out_infos, size_t capacity,
                               size_t *out_count);
okv_status_t okv_gpu_create(const okv_gpu_vendor_t *vendor, const okv_hal_device_params_t *params,
                            const okv_allocator_t *allocator, okv_hal_device_t **out_device);

#ifdef __cplusplus
}
#endif
#endif /* OASISKV_GPU_VENDOR_H */
