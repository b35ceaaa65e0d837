/* CUDA driver API symbols the CUDA backend uses, resolved from libcuda.so.1 at
 * run time (no CUDA header or library is needed to build or run the library).
 *
 * The first part declares the few driver types and constants we need (values
 * from the driver API's cuda.h, stable across CUDA 11-13). The second part is
 * an X-macro list, expanded by backends/cuda/cuda_device.c once to declare the
 * function-pointer table and once into the symbol array the shared loader
 * (backends/gpu/gpu_loader.h) resolves:
 *   OKV_CUDA_SYM(return type, field, "exported symbol", "fallback symbol" or NULL, (parameters))
 * Versioned exports (_v2) are the ones cuda.h maps the plain names to. */
#ifndef OASISKV_CUDA_TYPES_H
#define OASISKV_CUDA_TYPES_H

#include <stddef.h>

typedef int okv_cu_result_t;                   /* CUresult */
typedef int okv_cu_device_t;                   /* CUdevice */
typedef unsigned long long okv_cu_deviceptr_t; /* CUdeviceptr */
typedef struct okv_cu_ctx_s *okv_cu_context_t;
typedef struct okv_cu_mod_s *okv_cu_module_t;
typedef struct okv_cu_func_s *okv_cu_function_t;
typedef struct okv_cu_stream_s *okv_cu_stream_t;
typedef struct okv_cu_event_s *okv_cu_event_t;

#define OKV_CUDA_SUCCESS                              0
#define OKV_CUDA_ERROR_INVALID_VALUE                  1
#define OKV_CUDA_ERROR_OUT_OF_MEMORY                  2
#define OKV_CUDA_ERROR_NOT_INITIALIZED                3
#define OKV_CUDA_ERROR_DEINITIALIZED                  4
#define OKV_CUDA_ERROR_STUB_LIBRARY                   34
#define OKV_CUDA_ERROR_INSUFFICIENT_DRIVER            35
#define OKV_CUDA_ERROR_DEVICE_UNAVAILABLE             46
#define OKV_CUDA_ERROR_NO_DEVICE                      100
#define OKV_CUDA_ERROR_INVALID_DEVICE                 101
#define OKV_CUDA_ERROR_NO_BINARY_FOR_GPU              209
#define OKV_CUDA_ERROR_INVALID_PTX                    218
#define OKV_CUDA_ERROR_UNSUPPORTED_PTX_VERSION        222
#define OKV_CUDA_ERROR_NOT_READY                      600
#define OKV_CUDA_ERROR_SYSTEM_NOT_READY               802
#define OKV_CUDA_ERROR_SYSTEM_DRIVER_MISMATCH         803
#define OKV_CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804

#define OKV_CU_STREAM_NON_BLOCKING                                0x1u
#define OKV_CU_EVENT_DEFAULT                                      0x0u
#define OKV_CU_EVENT_DISABLE_TIMING                               0x2u
#define OKV_CU_MEMHOSTALLOC_PORTABLE                              0x01u
#define OKV_CU_MEMHOSTALLOC_DEVICEMAP                             0x02u
#define OKV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR          75
#define OKV_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR          76
#define OKV_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define OKV_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES       8

#endif /* OASISKV_CUDA_TYPES_H */

#ifdef OKV_CUDA_SYM
OKV_CUDA_SYM(okv_cu_result_t, cuInit, "cuInit", NULL, (unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuDriverGetVersion, "cuDriverGetVersion", NULL, (int *version))
OKV_CUDA_SYM(okv_cu_result_t, cuGetErrorName, "cuGetErrorName", NULL, (okv_cu_result_t r, const char **out))
OKV_CUDA_SYM(okv_cu_result_t, cuGetErrorString, "cuGetErrorString", NULL, (okv_cu_result_t r, const char **out))
OKV_CUDA_SYM(okv_cu_result_t, cuDeviceGetCount, "cuDeviceGetCount", NULL, (int *count))
OKV_CUDA_SYM(okv_cu_result_t, cuDeviceGet, "cuDeviceGet", NULL, (okv_cu_device_t * dev, int ordinal))
OKV_CUDA_SYM(okv_cu_result_t, cuDeviceGetName, "cuDeviceGetName", NULL, (char *name, int len, okv_cu_device_t dev))
OKV_CUDA_SYM(okv_cu_result_t, cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL, (size_t * bytes, okv_cu_device_t dev))
OKV_CUDA_SYM(okv_cu_result_t, cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL,
             (int *value, int attribute, okv_cu_device_t dev))
OKV_CUDA_SYM(okv_cu_result_t, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL,
             (okv_cu_context_t * ctx, okv_cu_device_t dev))
OKV_CUDA_SYM(okv_cu_result_t, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease",
             (okv_cu_device_t dev))
OKV_CUDA_SYM(okv_cu_result_t, cuCtxSetCurrent, "cuCtxSetCurrent", NULL, (okv_cu_context_t ctx))
OKV_CUDA_SYM(okv_cu_result_t, cuMemAlloc, "cuMemAlloc_v2", NULL, (okv_cu_deviceptr_t * dptr, size_t bytes))
OKV_CUDA_SYM(okv_cu_result_t, cuMemFree, "cuMemFree_v2", NULL, (okv_cu_deviceptr_t dptr))
OKV_CUDA_SYM(okv_cu_result_t, cuMemHostAlloc, "cuMemHostAlloc", NULL, (void **host, size_t bytes, unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuMemFreeHost, "cuMemFreeHost", NULL, (void *host))
OKV_CUDA_SYM(okv_cu_result_t, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", NULL,
             (okv_cu_deviceptr_t * dptr, void *host, unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuMemsetD8, "cuMemsetD8_v2", NULL,
             (okv_cu_deviceptr_t dptr, unsigned char value, size_t count))
OKV_CUDA_SYM(okv_cu_result_t, cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL,
             (okv_cu_deviceptr_t dst, const void *src, size_t bytes))
OKV_CUDA_SYM(okv_cu_result_t, cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL, (void *dst, okv_cu_deviceptr_t src, size_t bytes))
OKV_CUDA_SYM(okv_cu_result_t, cuMemcpyAsync, "cuMemcpyAsync", NULL,
             (okv_cu_deviceptr_t dst, okv_cu_deviceptr_t src, size_t bytes, okv_cu_stream_t stream))
OKV_CUDA_SYM(okv_cu_result_t, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL,
             (okv_cu_deviceptr_t dst, const void *src, size_t bytes, okv_cu_stream_t stream))
OKV_CUDA_SYM(okv_cu_result_t, cuStreamCreate, "cuStreamCreate", NULL, (okv_cu_stream_t * stream, unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuStreamDestroy, "cuStreamDestroy_v2", NULL, (okv_cu_stream_t stream))
OKV_CUDA_SYM(okv_cu_result_t, cuStreamSynchronize, "cuStreamSynchronize", NULL, (okv_cu_stream_t stream))
OKV_CUDA_SYM(okv_cu_result_t, cuStreamWaitEvent, "cuStreamWaitEvent", NULL,
             (okv_cu_stream_t stream, okv_cu_event_t event, unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuEventCreate, "cuEventCreate", NULL, (okv_cu_event_t * event, unsigned int flags))
OKV_CUDA_SYM(okv_cu_result_t, cuEventDestroy, "cuEventDestroy_v2", NULL, (okv_cu_event_t event))
OKV_CUDA_SYM(okv_cu_result_t, cuEventRecord, "cuEventRecord", NULL, (okv_cu_event_t event, okv_cu_stream_t stream))
OKV_CUDA_SYM(okv_cu_result_t, cuEventQuery, "cuEventQuery", NULL, (okv_cu_event_t event))
OKV_CUDA_SYM(okv_cu_result_t, cuEventSynchronize, "cuEventSynchronize", NULL, (okv_cu_event_t event))
OKV_CUDA_SYM(okv_cu_result_t, cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime",
             (float *ms, okv_cu_event_t start, okv_cu_event_t end))
OKV_CUDA_SYM(okv_cu_result_t, cuModuleLoadData, "cuModuleLoadData", NULL, (okv_cu_module_t * module, const void *image))
OKV_CUDA_SYM(okv_cu_result_t, cuModuleUnload, "cuModuleUnload", NULL, (okv_cu_module_t module))
OKV_CUDA_SYM(okv_cu_result_t, cuModuleGetFunction, "cuModuleGetFunction", NULL,
             (okv_cu_function_t * function, okv_cu_module_t module, const char *name))
OKV_CUDA_SYM(okv_cu_result_t, cuFuncSetAttribute, "cuFuncSetAttribute", NULL,
             (okv_cu_function_t function, int attribute, int value))
OKV_CUDA_SYM(okv_cu_result_t, cuLaunchKernel, "cuLaunchKernel", NULL,
             (okv_cu_function_t f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
              unsigned int bz, unsigned int shared_bytes, okv_cu_stream_t stream, void **params, void **extra))
#endif /* OKV_CUDA_SYM */
