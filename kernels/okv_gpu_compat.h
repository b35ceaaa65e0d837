/* The few vendor differences of kernels/okv_kernels.cu, so one source builds
 * with nvcc (CUDA) and hipcc (HIP, AMD). Only names the kernels use are mapped.
 *
 *  - OKV_WARP_SIZE: 32 on NVIDIA and on RDNA (wave32), 64 on CDNA (gfx90a,
 *    gfx942); taken from the compiler's per-target macro on AMD, never assumed.
 *  - okv_shfl_xor(v, lane_mask, width): butterfly shuffle within `width` lanes;
 *    CUDA's *_sync form with a full mask (call it from converged warps only),
 *    HIP's mask-less form.
 *  - okv_ballot(pred): bit per lane, widened to 64 bits on both.
 *  - okv_lane_id(), okv_lanemask_lt(), okv_popc64().
 *  - OKV_DYNAMIC_SMEM(type, name): the block's dynamic shared memory.
 *
 * A third mode, OKV_GPU_EMULATE (host C++, kernels/okv_gpu_emulator.h), runs
 * the same kernels on the CPU with one fiber per GPU thread, so their logic is
 * tested on machines without a GPU (tests/kernels/test_gpu_emulated.cc).
 */
#ifndef OASISKV_GPU_COMPAT_H
#define OASISKV_GPU_COMPAT_H

#include <stdint.h>

#if defined(OKV_GPU_EMULATE)
#include "okv_gpu_emulator.h"
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || defined(__HIP__)
#include <hip/hip_runtime.h>
#define OKV_GPU_HIP 1
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define OKV_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define OKV_WARP_SIZE 64 /* host pass: no kernel code is generated */
#endif
#define okv_shfl_xor(v, lane_mask, width) __shfl_xor((v), (lane_mask), (width))
#define okv_ballot(pred)                  ((uint64_t)__ballot(pred))
#define OKV_DYNAMIC_SMEM(type, name)      extern __shared__ type name[]
#else
#include <cuda_runtime.h>
#define OKV_GPU_CUDA                      1
#define OKV_WARP_SIZE                     32
#define okv_shfl_xor(v, lane_mask, width) __shfl_xor_sync(0xffffffffu, (v), (lane_mask), (width))
#define okv_ballot(pred)                  ((uint64_t)__ballot_sync(0xffffffffu, (pred)))
#define OKV_DYNAMIC_SMEM(type, name)      extern __shared__ type name[]
#endif

#ifndef OKV_DEVICE
#define OKV_DEVICE __device__ __forceinline__
#endif

OKV_DEVICE unsigned okv_lane_id(void) { return threadIdx.x & (OKV_WARP_SIZE - 1); }

/* Bit mask of the lanes below the calling lane. */
OKV_DEVICE uint64_t okv_lanemask_lt(void) {
  const unsigned lane = okv_lane_id();
  return lane == 0 ? 0ull : (~0ull >> (64u - lane));
}

OKV_DEVICE int okv_popc64(uint64_t x) { return __popcll(x); }

#endif /* OASISKV_GPU_COMPAT_H */
