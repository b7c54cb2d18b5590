// Char CNN on the GPU, two forward kernels, neither with an im2col buffer:
// - fp16/bf16 on sm_80+ (the autocast path), when the shapes allow it: tensor
//   cores (WMMA, fp32 accumulation). With a token's embeddings (W, D) in shared
//   memory row-major, the im2col row of position p is the D * width elements
//   from p * D on, so the matrix A[p, k] = E[p * D + k] is read in place with
//   leading dimension D: overlapping rows, no copy.
// - otherwise (float32: exact CUDA-core FMAs; other shapes or older GPUs): one
//   block per token, one thread per output channel, a running max in registers.
// Both keep the first position of the maximum and add bias + activation last.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <mma.h>

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
    // NaN-sticky, as torch.max: a NaN window wins and stays (nothing is > NaN); a tie keeps the first
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
      if (a0 > best || (isnan(a0) && !isnan(best))) { best = a0; bi = p; }
      if (a1 > best || (isnan(a1) && !isnan(best))) { best = a1; bi = p + 1; }
      if (a2 > best || (isnan(a2) && !isnan(best))) { best = a2; bi = p + 2; }
      if (a3 > best || (isnan(a3) && !isnan(best))) { best = a3; bi = p + 3; }
    }
    for (; p < npos; ++p) {
      float a = 0.f;
      for (int r = 0; r < K; ++r) a = fmaf(e[p * D + r], ld(wp + (int64_t)r * count), a);
      if (a > best || (isnan(a) && !isnan(best))) { best = a; bi = p; }
    }
    const float v = best + ld(bias + fc);
    st(out + n * F + fc, activation == 0 ? relu_keep_nan(v) : tanhf(v));
    arg[n * F + fc] = bi;
  }
}

// ---- tensor-core forward (fp16 / bf16)
constexpr int kMmaWarps = 8;       // warps per block, each one 16-channel tile of one filter
constexpr int kMmaTokens = 8;      // tokens per block: a warp's filter fragments serve all of them
constexpr int kMmaMaxKTiles = 8;   // width * D / 16 of the widest filter (fragments held in registers)
constexpr int kMmaMaxMTiles = 4;   // 16-position tiles: W <= 64
constexpr size_t kMmaShmemLimit = 48 * 1024;

__host__ __device__ constexpr size_t round32(size_t n) { return (n + 31) / 32 * 32; }

// Shared memory (tokens' embeddings, then one 16 x 16 fp32 tile per warp) for `rows` rows of D.
inline size_t mma_shmem(int rows, int D, size_t elem) {
  return round32((size_t)kMmaTokens * rows * D * elem) + (size_t)kMmaWarps * 256 * sizeof(float);
}

// out[n, fc] for 16 channels fc0.. of one filter and kMmaTokens tokens n0..: A (npos, width * D) is the
// token's embeddings read in place (leading dimension D), B (width * D, 16) the packed filter's columns.
// Rows of shared memory past the token (W..rows) are zero, positions past npos are left out of the max.
template <typename T>
__global__ void __launch_bounds__(kMmaWarps * 32)
    char_cnn_forward_mma_kernel(const int64_t* __restrict__ ids, const T* __restrict__ emb, CharFilters f,
                                const T* __restrict__ bias, int64_t N, int W, int D, int F, int rows,
                                int activation, T* __restrict__ out, int32_t* __restrict__ arg) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  extern __shared__ __align__(32) unsigned char smem[];
  T* e = reinterpret_cast<T*>(smem);  // (kMmaTokens, rows, D)
  float* scratch = reinterpret_cast<float*>(smem + round32((size_t)kMmaTokens * rows * D * sizeof(T)));
  const int64_t n0 = (int64_t)blockIdx.x * kMmaTokens;
  const int per_token = rows * D;
  for (int i = threadIdx.x; i < kMmaTokens * per_token; i += blockDim.x) {
    const int tk = i / per_token, r = (i % per_token) / D;
    const int64_t n = n0 + tk;
    const int64_t id = (n < N && r < W) ? ids[n * W + r] : 0;
    if (id > 0) e[i] = emb[(id - 1) * D + i % D];
    else st(e + i, 0.0f);
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int fc0 = (blockIdx.y * kMmaWarps + warp) * 16;
  if (fc0 >= F) return;  // warp-uniform, after the block's only barrier
  const int fi = filter_of(f, fc0);
  const int width = f.width[fi], count = f.count[fi];
  const int KT = width * D / 16, npos = W - width + 1, MT = (npos + 15) / 16;
  const T* wp = static_cast<const T*>(f.wp[fi]) + (fc0 - f.offset[fi]);
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[kMmaMaxKTiles];
#pragma unroll
  for (int kt = 0; kt < kMmaMaxKTiles; ++kt)
    if (kt < KT) wmma::load_matrix_sync(b[kt], wp + (int64_t)kt * 16 * count, count);
  float* tile = scratch + warp * 256;
  const int col = lane % 16, half = lane / 16;  // each lane scans 8 of a tile's 16 rows of one column
  const float bv = ld(bias + fc0 + col);
  for (int tk = 0; tk < kMmaTokens; ++tk) {
    const int64_t n = n0 + tk;
    if (n >= N) break;
    const T* et = e + tk * per_token;
    float best = -INFINITY;
    int bi = 0;
#pragma unroll
    for (int m = 0; m < kMmaMaxMTiles; ++m) {
      if (m < MT) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kt = 0; kt < kMmaMaxKTiles; ++kt) {
          if (kt < KT) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::load_matrix_sync(a, et + m * 16 * D + kt * 16, D);
            wmma::mma_sync(acc, a, b[kt], acc);
          }
        }
        wmma::store_matrix_sync(tile, acc, 16, wmma::mem_row_major);
        __syncwarp();
        for (int r = half * 8; r < half * 8 + 8; ++r) {
          const int p = m * 16 + r;
          const float v = tile[r * 16 + col];
          if (p < npos && (v > best || (isnan(v) && !isnan(best)))) { best = v; bi = p; }  // the first NaN sticks
        }
        __syncwarp();  // the tile is overwritten next
      }
    }
    // the two lanes of a column: the larger (a NaN over a number), on a tie or two NaNs the first position
    // (the other kernel's rule, and torch.max's)
    const float ob = __shfl_down_sync(0xffffffffu, best, 16);
    const int oi = __shfl_down_sync(0xffffffffu, bi, 16);
    if (half == 0) {
      if (ob > best || (isnan(ob) && !isnan(best)) || (isnan(ob) && isnan(best) && oi < bi) ||
          (ob == best && oi < bi)) {
        best = ob;
        bi = oi;
      }
      const float v = best + bv;
      st(out + n * F + fc0 + col, activation == 0 ? relu_keep_nan(v) : tanhf(v));
      arg[n * F + fc0 + col] = bi;
    }
  }
#endif
}

// Whether this device runs the tensor-core kernel's real body: compiled for sm_80+ (an older
// architecture's build, or its PTX JIT-compiled here, holds an empty kernel).
template <typename T>
bool mma_compiled_for_device() {
  static std::atomic<int> cached[64];  // per device: 0 unknown, 1 yes, 2 no (a race only repeats the query)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  int known = cached[dev].load(std::memory_order_relaxed);
  if (known == 0) {
    cudaFuncAttributes a;
    const bool ok = cudaFuncGetAttributes(&a, char_cnn_forward_mma_kernel<T>) == cudaSuccess &&
                    a.binaryVersion >= 80 && a.ptxVersion >= 80;
    known = ok ? 1 : 2;
    cached[dev].store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

// Rows of shared memory per token for the tensor-core kernel on elements T (its shared memory sized as the
// launch sizes it, sizeof(T) bytes each), or 0 where it cannot run: D and every
// filter's count multiples of 16, the widest filter's K in registers, W <= 64, shared memory <= 48 KB,
// every packed filter 32-byte aligned (wmma::load_matrix_sync's rule: pack_filters keeps a caller's
// weight that is already a view in the packed layout, storage offset and all).
// SPACY_ELMO_CHAR_CNN_MMA=0 turns it off (to compare the two kernels); 1, unset or any other value
// leaves it on (exactly "0": spacy_elmo/switches.py takes 0 | 1 and warns for another value).
template <typename T>
int mma_rows(const CharFilters& f, int W, int D) {
  const char* mma = std::getenv("SPACY_ELMO_CHAR_CNN_MMA");
  if (mma != nullptr && std::strcmp(mma, "0") == 0) return 0;
  if (D % 16 != 0 || W > 16 * kMmaMaxMTiles) return 0;
  int widest = 1;
  for (int i = 0; i < f.n; ++i) {
    if (reinterpret_cast<std::uintptr_t>(f.wp[i]) % 32 != 0) return 0;
    if (f.count[i] % 16 != 0 || f.width[i] * D / 16 > kMmaMaxKTiles) return 0;
    widest = f.width[i] > widest ? f.width[i] : widest;
  }
  const int rows = 16 * ((W + 15) / 16) + widest - 1;
  return mma_shmem(rows, D, sizeof(T)) <= kMmaShmemLimit ? rows : 0;
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
  const float g = activation == 0 ? (o <= 0.0f ? 0.0f : gy) : gy * (1.0f - o * o);
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

// Launches the tensor-core kernel where it can run (mma_rows, mma_compiled_for_device); false elsewhere.
template <typename T>
bool forward_mma(const int64_t* ids, const void* emb, const CharFilters& f, const void* bias, int64_t N, int W,
                 int D, int F, int activation, void* out, int32_t* arg, cudaStream_t stream) {
  const int rows = mma_rows<T>(f, W, D);
  if (rows == 0 || !mma_compiled_for_device<T>()) return false;
  const dim3 grid(blocks_for(N, kMmaTokens), blocks_for(F / 16, kMmaWarps));
  char_cnn_forward_mma_kernel<T><<<grid, kMmaWarps * 32, mma_shmem(rows, D, sizeof(T)), stream>>>(
      ids, static_cast<const T*>(emb), f, static_cast<const T*>(bias), N, W, D, F, rows, activation,
      static_cast<T*>(out), arg);
  return true;
}

// float32 stays exact: CUDA-core FMAs (TF32 tensor cores would round the inputs).
template <>
bool forward_mma<float>(const int64_t*, const void*, const CharFilters&, const void*, int64_t, int, int, int, int,
                        void*, int32_t*, cudaStream_t) {
  return false;
}

}  // namespace

void char_cnn_forward(DType dt, const int64_t* ids, const void* emb, const CharFilters& f, const void* bias,
                      int64_t N, int W, int D, int F, int activation, void* out, int32_t* arg, cudaStream_t stream) {
  if (N == 0) return;
  bool ran = false;
  SE_DISPATCH(dt, ran = forward_mma<T>(ids, emb, f, bias, N, W, D, F, activation, out, arg, stream));
  if (ran) return;
  const dim3 grid((unsigned)N, blocks_for(F, kThreads));
  const size_t shmem = (size_t)W * D * sizeof(float);
  // more than 48 KB of dynamic shared memory needs the kernel's limit raised first; where that fails (past
  // the GPU's opt-in limit, which cuda_ops.cpp checks first) nothing launches and the caller's
  // cudaGetLastError reports the error
  SE_DISPATCH(dt, if (shmem > 48 * 1024 && cudaFuncSetAttribute(char_cnn_forward_kernel<T>,
                                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                (int)shmem) != cudaSuccess) return;
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
