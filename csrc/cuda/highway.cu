// Highway epilogue and backward elementwise passes on the GPU (the GEMMs are
// cuBLAS calls from the ATen glue). fp32 math for every input dtype.
#include "common.cuh"

namespace spacy_elmo {
namespace cuda {

namespace {

template <typename T>
__global__ void highway_epilogue_kernel(const T* __restrict__ h, const T* __restrict__ x, T* __restrict__ y,
                                        int64_t N, int64_t F) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, k = i % F;
  const float t = relu_keep_nan(ld(h + n * 2 * F + k));
  const float g = sigmoidf_(ld(h + n * 2 * F + F + k));
  st(y + i, g * t + (1.0f - g) * ld(x + i));
}

template <typename T>
__global__ void highway_backward_kernel(const T* __restrict__ dy, const T* __restrict__ h, const T* __restrict__ x,
                                        T* __restrict__ dh, T* __restrict__ dx, int64_t N, int64_t F) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * F) return;
  const int64_t n = i / F, k = i % F;
  const float ht = ld(h + n * 2 * F + k);
  const float g = sigmoidf_(ld(h + n * 2 * F + F + k));
  const float d = ld(dy + i);
  st(dh + n * 2 * F + k, ht <= 0.0f ? 0.0f : d * g);  // passes at a NaN, as torch.relu's
  st(dh + n * 2 * F + F + k, d * (relu_keep_nan(ht) - ld(x + i)) * g * (1.0f - g));
  st(dx + i, d * (1.0f - g));
}

}  // namespace

void highway_epilogue(DType dt, const void* h, const void* x, void* y, int64_t N, int64_t F, cudaStream_t stream) {
  if (N * F == 0) return;
  SE_DISPATCH(dt, highway_epilogue_kernel<T><<<blocks_for(N * F, 256), 256, 0, stream>>>(
                      static_cast<const T*>(h), static_cast<const T*>(x), static_cast<T*>(y), N, F));
}

void highway_backward(DType dt, const void* dy, const void* h, const void* x, void* dh, void* dx, int64_t N,
                      int64_t F, cudaStream_t stream) {
  if (N * F == 0) return;
  SE_DISPATCH(dt, highway_backward_kernel<T><<<blocks_for(N * F, 256), 256, 0, stream>>>(
                      static_cast<const T*>(dy), static_cast<const T*>(h), static_cast<const T*>(x),
                      static_cast<T*>(dh), static_cast<T*>(dx), N, F));
}

}  // namespace cuda
}  // namespace spacy_elmo
