/* HIP runtime symbols the HIP backend uses, resolved from libamdhip64.so at run
 * time (the library builds and runs where ROCm is absent).
 *
 * The first part declares the few HIP types and constants we need (values from
 * hip_runtime_api.h / driver_types.h, unchanged from ROCm 5 to 6). The second
 * part is an X-macro list, expanded by backends/hip/hip_device.c once to declare
 * the function-pointer table and once into the symbol array the shared loader
 * (backends/gpu/gpu_loader.h) resolves:
 *   OKV_HIP_SYM(return type, field, "exported symbol", "fallback symbol" or NULL, (parameters)) */
#ifndef OASISKV_HIP_TYPES_H
#define OASISKV_HIP_TYPES_H

#include <stddef.h>

typedef int okv_hip_error_t;  /* hipError_t */
typedef int okv_hip_device_t; /* hipDevice_t */
typedef struct okv_hip_mod_s *okv_hip_module_t;
typedef struct okv_hip_func_s *okv_hip_function_t;
typedef struct okv_hip_stream_s *okv_hip_stream_t;
typedef struct okv_hip_event_s *okv_hip_event_t;

#define OKV_HIP_SUCCESS                   0
#define OKV_HIP_ERROR_OUT_OF_MEMORY       2
#define OKV_HIP_ERROR_NOT_INITIALIZED     3
#define OKV_HIP_ERROR_DEINITIALIZED       4
#define OKV_HIP_ERROR_INSUFFICIENT_DRIVER 35
#define OKV_HIP_ERROR_NO_DEVICE           100
#define OKV_HIP_ERROR_INVALID_DEVICE      101
#define OKV_HIP_ERROR_INVALID_IMAGE       200
#define OKV_HIP_ERROR_NO_BINARY_FOR_GPU   209
#define OKV_HIP_ERROR_NOT_READY           600

#define OKV_HIP_MEMCPY_HOST_TO_DEVICE 1
#define OKV_HIP_MEMCPY_DEVICE_TO_HOST 2
#define OKV_HIP_MEMCPY_DEFAULT        4
#define OKV_HIP_STREAM_NON_BLOCKING   0x1u
#define OKV_HIP_EVENT_DEFAULT         0x0u
#define OKV_HIP_EVENT_DISABLE_TIMING  0x2u
#define OKV_HIP_HOST_MALLOC_PORTABLE  0x1u
#define OKV_HIP_HOST_MALLOC_MAPPED    0x2u

#endif /* OASISKV_HIP_TYPES_H */

#ifdef OKV_HIP_SYM
OKV_HIP_SYM(okv_hip_error_t, hipInit, "hipInit", NULL, (unsigned int flags))
OKV_HIP_SYM(const char *, hipGetErrorName, "hipGetErrorName", NULL, (okv_hip_error_t e))
OKV_HIP_SYM(const char *, hipGetErrorString, "hipGetErrorString", NULL, (okv_hip_error_t e))
OKV_HIP_SYM(okv_hip_error_t, hipGetDeviceCount, "hipGetDeviceCount", NULL, (int *count))
OKV_HIP_SYM(okv_hip_error_t, hipDeviceGet, "hipDeviceGet", NULL, (okv_hip_device_t * dev, int ordinal))
OKV_HIP_SYM(okv_hip_error_t, hipDeviceGetName, "hipDeviceGetName", NULL, (char *name, int len, okv_hip_device_t dev))
OKV_HIP_SYM(okv_hip_error_t, hipDeviceTotalMem, "hipDeviceTotalMem", NULL, (size_t * bytes, okv_hip_device_t dev))
OKV_HIP_SYM(okv_hip_error_t, hipSetDevice, "hipSetDevice", NULL, (int ordinal))
OKV_HIP_SYM(okv_hip_error_t, hipMalloc, "hipMalloc", NULL, (void **ptr, size_t bytes))
OKV_HIP_SYM(okv_hip_error_t, hipFree, "hipFree", NULL, (void *ptr))
OKV_HIP_SYM(okv_hip_error_t, hipHostMalloc, "hipHostMalloc", NULL, (void **ptr, size_t bytes, unsigned int flags))
OKV_HIP_SYM(okv_hip_error_t, hipHostFree, "hipHostFree", NULL, (void *ptr))
OKV_HIP_SYM(okv_hip_error_t, hipHostGetDevicePointer, "hipHostGetDevicePointer", NULL,
            (void **dptr, void *host, unsigned int flags))
OKV_HIP_SYM(okv_hip_error_t, hipMemset, "hipMemset", NULL, (void *dst, int value, size_t bytes))
OKV_HIP_SYM(okv_hip_error_t, hipMemcpy, "hipMemcpy", NULL, (void *dst, const void *src, size_t bytes, int kind))
OKV_HIP_SYM(okv_hip_error_t, hipMemcpyAsync, "hipMemcpyAsync", NULL,
            (void *dst, const void *src, size_t bytes, int kind, okv_hip_stream_t stream))
OKV_HIP_SYM(okv_hip_error_t, hipStreamCreateWithFlags, "hipStreamCreateWithFlags", NULL,
            (okv_hip_stream_t * stream, unsigned int flags))
OKV_HIP_SYM(okv_hip_error_t, hipStreamDestroy, "hipStreamDestroy", NULL, (okv_hip_stream_t stream))
OKV_HIP_SYM(okv_hip_error_t, hipStreamSynchronize, "hipStreamSynchronize", NULL, (okv_hip_stream_t stream))
OKV_HIP_SYM(okv_hip_error_t, hipStreamWaitEvent, "hipStreamWaitEvent", NULL,
            (okv_hip_stream_t stream, okv_hip_event_t event, unsigned int flags))
OKV_HIP_SYM(okv_hip_error_t, hipEventCreateWithFlags, "hipEventCreateWithFlags", NULL,
            (okv_hip_event_t * event, unsigned int flags))
OKV_HIP_SYM(okv_hip_error_t, hipEventDestroy, "hipEventDestroy", NULL, (okv_hip_event_t event))
OKV_HIP_SYM(okv_hip_error_t, hipEventRecord, "hipEventRecord", NULL, (okv_hip_event_t event, okv_hip_stream_t stream))
OKV_HIP_SYM(okv_hip_error_t, hipEventQuery, "hipEventQuery", NULL, (okv_hip_event_t event))
OKV_HIP_SYM(okv_hip_error_t, hipEventSynchronize, "hipEventSynchronize", NULL, (okv_hip_event_t event))
OKV_HIP_SYM(okv_hip_error_t, hipEventElapsedTime, "hipEventElapsedTime", NULL,
            (float *ms, okv_hip_event_t start, okv_hip_event_t stop))
OKV_HIP_SYM(okv_hip_error_t, hipModuleLoadData, "hipModuleLoadData", NULL,
            (okv_hip_module_t * module, const void *image))
OKV_HIP_SYM(okv_hip_error_t, hipModuleUnload, "hipModuleUnload", NULL, (okv_hip_module_t module))
OKV_HIP_SYM(okv_hip_error_t, hipModuleGetFunction, "hipModuleGetFunction", NULL,
            (okv_hip_function_t * function, okv_hip_module_t module, const char *name))
OKV_HIP_SYM(okv_hip_error_t, hipModuleLaunchKernel, "hipModuleLaunchKernel", NULL,
            (okv_hip_function_t f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
             unsigned int bz, unsigned int shared_bytes, okv_hip_stream_t stream, void **params, void **extra))
#endif /* OKV_HIP_SYM */
