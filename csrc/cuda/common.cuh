// Shared device helpers: loads/stores in float32/fp16/bf16 with fp32 math.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../include/cuda_kernels.h"

namespace spacy_elmo {
namespace cuda {

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Accurate (not --use_fast_math dependent) activations: exactness first.
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
// Like torch.clamp: NaN stays NaN (fminf/fmaxf return the other operand for a NaN,
// which turned a NaN cell into -clip, or -inf with no clip at all).
__device__ __forceinline__ float clipf_(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
// Like torch.relu: NaN stays NaN (fmaxf(v, 0) returned 0 for a NaN).
__device__ __forceinline__ float relu_keep_nan(float v) { return v < 0.0f ? 0.0f : v; }

#define SE_DISPATCH(dt, ...)                          \
  switch (dt) {                                       \
    case DType::F32: { using T = float; __VA_ARGS__; break; }          \
    case DType::F16: { using T = __half; __VA_ARGS__; break; }         \
    case DType::BF16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
  }

inline unsigned blocks_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

}  // namespace cuda
}  // namespace spacy_elmo
