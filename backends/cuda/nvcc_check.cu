// Configure-time check that nvcc builds for the requested targets (backends/cuda/meson.build).
#include "okv_gpu_compat.h"
extern "C" __global__ void okv_check(float *x) { x[threadIdx.x] = okv_shfl_xor(x[threadIdx.x], 1, OKV_WARP_SIZE); }
