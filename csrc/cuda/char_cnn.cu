// Char CNN on the GPU: one block per token (embeddings gathered to shared
// memory once), one thread per output channel across every filter; running
// max over positions in registers, bias + activation at the end, fp32
// accumulation for every input dtype. No im2col buffer.
#include "common.cuh"

namespace spacy_elmo {
namespace cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int filter_of(const CharFilters& f, int fc) {
  int i = 0;
  while (i + 1 < f.n && fc >= f.offset[i + 1]) ++i;
  return i;
}

template <typename T>
__global__ void char_cnn_forward_kernel(const int64_t* __restrict__ ids, const T* __restrict__ emb, CharFilters f,
                                        const T* __restrict__ bias, int W, int D, int F, int activation,
                                        T* __restrict__ out, int32_t* __restrict__ arg) {
  extern __shared__ float e[];  // (W, D)
  const int64_t n = blockIdx.x;
  for (int i = threadIdx.x; i < W * D; i += blockDim.x) {
    const int64_t id = ids[n * W + i / D];
    e[i] = id > 0 ? ld(emb + (id - 1) * D + i % D) : 0.0f;
  }
  __syncthreads();
  for (int fc = blockIdx.y * blockDim.x + threadIdx.x; fc < F; fc += gridDim.y * blockDim.x) {
    const int fi = filter_of(f, fc);
    const int ch = fc - f.offset[fi], count = f.count[fi], width = f.width[fi];
    const T* wp = static_cast<const T*>(f.wp[fi]) + ch;
    const int K = width * D, npos = W - width + 1;
    float best = -INFINITY;
    int bi = 0;
    // four positions at a time: each weight load feeds four FMAs
    int p = 0;
    for (; p + 4 <= npos; p += 4) {
      float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
      const float* ep = e + p * D;
      for (int r = 0; r < K; ++r) {
        const float w = ld(wp + (int64_t)r * count);
        a0 = fmaf(ep[r], w, a0);
        a1 = fmaf(ep[r + D], w, a1);
        a2 = fmaf(ep[r + 2 * D], w, a2);
        a3 = fmaf(ep[r + 3 * D], w, a3);
      }
      if (a0 > best) { best = a0; bi = p; }
      if (a1 > best) { best = a1; bi = p + 1; }
      if (a2 > best) { best = a2; bi = p + 2; }
      if (a3 > best) { best = a3; bi = p + 3; }
    }
    for (; p < npos; ++p) {
      float a = 0.f;
      for (int r = 0; r < K; ++r) a = fmaf(e[p * D + r], ld(wp + (int64_t)r * count), a);
      if (a > best) { best = a; bi = p; }
    }
    const float v = best + ld(bias + fc);
    st(out + n * F + fc, activation == 0 ? fmaxf(v, 0.0f) : tanhf(v));
    arg[n * F + fc] = bi;
  }
}

template <typename T>
__global__ void char_cnn_backward_kernel(const int64_t* __restrict__ ids, const T* __restrict__ emb, CharFilters f,
                                         const T* __restrict__ grad, const T* __restrict__ out,
                                         const int32_t* __restrict__ arg, int W, int D, int F, int activation,
                                         float* __restrict__ d_emb, FilterGrads d_wp, float* __restrict__ d_bias) {
  const int64_t n = blockIdx.x;
  const int fc = blockIdx.y * blockDim.x + threadIdx.x;
  if (fc >= F) return;
  const float o = ld(out + n * F + fc);
  const float gy = ld(grad + n * F + fc);
  const float g = activation == 0 ? (o > 0.0f ? gy : 0.0f) : gy * (1.0f - o * o);
  if (g == 0.0f) return;
  atomicAdd(d_bias + fc, g);
  const int fi = filter_of(f, fc);
  const int ch = fc - f.offset[fi], count = f.count[fi], width = f.width[fi];
  const T* wp = static_cast<const T*>(f.wp[fi]) + ch;
  float* dwp = d_wp.p[fi] + ch;
  const int p = arg[n * F + fc];
  for (int k = 0; k < width; ++k) {
    const int64_t id = ids[n * W + p + k];
    if (id <= 0) continue;
    for (int d = 0; d < D; ++d) {
      const int64_t r = (int64_t)(k * D + d) * count;
      atomicAdd(dwp + r, g * ld(emb + (id - 1) * D + d));
      atomicAdd(d_emb + (id - 1) * D + d, g * ld(wp + r));
    }
  }
}

}  // namespace

void char_cnn_forward(DType dt, const int64_t* ids, const void* emb, const CharFilters& f, const void* bias,
                      int64_t N, int W, int D, int F, int activation, void* out, int32_t* arg, cudaStream_t stream) {
  if (N == 0) return;
  const dim3 grid((unsigned)N, blocks_for(F, kThreads));
  const size_t shmem = (size_t)W * D * sizeof(float);
  // more than 48 KB of dynamic shared memory needs the kernel's limit raised first
  SE_DISPATCH(dt, if (shmem > 48 * 1024) cudaFuncSetAttribute(char_cnn_forward_kernel<T>,
                                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
              char_cnn_forward_kernel<T><<<grid, kThreads, shmem, stream>>>(
                  ids, static_cast<const T*>(emb), f, static_cast<const T*>(bias), W, D, F, activation,
                  static_cast<T*>(out), arg));
}

void char_cnn_backward(DType dt, const int64_t* ids, const void* emb, const CharFilters& f, const void* grad,
                       const void* out, const int32_t* arg, int64_t N, int W, int D, int F, int activation,
                       float* d_emb, const FilterGrads& d_wp, float* d_bias, cudaStream_t stream) {
  if (N == 0) return;
  const dim3 grid((unsigned)N, blocks_for(F, kThreads));
  SE_DISPATCH(dt, char_cnn_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
                      ids, static_cast<const T*>(emb), f, static_cast<const T*>(grad), static_cast<const T*>(out),
                      arg, W, D, F, activation, d_emb, d_wp, d_bias));
}

}  // namespace cuda
}  // namespace spacy_elmo
