// LSTM-with-projection step kernels on the GPU. Per step the ATen glue runs
// z = h @ W_rec (cuBLAS), then ONE fused kernel for both directions: gates,
// forget bias (folded into xi), cell clip, m = sigmoid(o) * tanh(c), the saved
// tensors and the h_prev record; then hp = m @ W_P (cuBLAS) and one fused
// kernel for the projection clip, state update, residual and the scatter to
// each row's own (possibly reversed) position. Ragged lengths and reversal are
// index arithmetic here: nothing reversed is materialised. fp32 math and fp32
// cell state for every input dtype (bf16/fp16 under autocast).
#include "common.cuh"

namespace spacy_elmo {
namespace cuda {

namespace {

constexpr int kGateThreads = 256;
constexpr int kProjThreads = 128;

__device__ __forceinline__ int64_t src_pos(const LstmStep& s, int d, int64_t len) {
  return s.reverse[d] ? len - 1 - s.t : s.t;
}

template <typename T>
__global__ void gates_forward_kernel(const LstmStep s) {
  const int d = blockIdx.z;
  const int64_t b = blockIdx.x;
  const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t C = s.C, len = s.lengths[b];
  T* m = static_cast<T*>(s.m[d]) + b * C;
  if (s.t >= len) {
    if (c < C) st(m + c, 0.0f);
    return;
  }
  const int64_t src = src_pos(s, d, len);
  if (blockIdx.y == 0 && s.h_prev[d] != nullptr) {
    const T* h = static_cast<const T*>(s.h[d]) + b * s.P;
    T* hp = static_cast<T*>(s.h_prev[d]) + (b * s.T + src) * s.P;
    for (int64_t p = threadIdx.x; p < s.P; p += blockDim.x) hp[p] = h[p];
  }
  if (c >= C) return;
  const T* z = static_cast<const T*>(s.z[d]) + b * 4 * C;
  const T* xi = static_cast<const T*>(s.xi[d]) + (b * s.T + src) * 4 * C;
  const float si = sigmoidf_(ld(z + c) + ld(xi + c));
  const float tj = tanhf(ld(z + C + c) + ld(xi + C + c));
  const float sf = sigmoidf_(ld(z + 2 * C + c) + ld(xi + 2 * C + c));
  const float so = sigmoidf_(ld(z + 3 * C + c) + ld(xi + 3 * C + c));
  float* cs = s.c[d] + b * C;
  const float cr = sf * cs[c] + si * tj;
  const float cn = clipf_(cr, s.cell_lo, s.cell_hi);
  cs[c] = cn;
  st(m + c, so * tanhf(cn));
  if (s.gates[d] != nullptr) {
    T* g = static_cast<T*>(s.gates[d]) + b * 4 * C;
    st(g + c, si);
    st(g + C + c, tj);
    st(g + 2 * C + c, sf);
    st(g + 3 * C + c, so);
    st(static_cast<T*>(s.c_raw[d]) + b * C + c, cr);
  }
}

template <typename T>
__global__ void proj_forward_kernel(const LstmStep s) {
  const int d = blockIdx.z;
  const int64_t b = blockIdx.x;
  const int64_t p = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t len = s.lengths[b];
  if (p >= s.P || s.t >= len) return;
  const int64_t src = src_pos(s, d, len);
  const float v = clipf_(ld(static_cast<const T*>(s.hp[d]) + b * s.P + p), s.proj_lo, s.proj_hi);
  st(static_cast<T*>(s.h[d]) + b * s.P + p, v);
  float o = v;
  if (s.residual) o += ld(static_cast<const T*>(s.x[d]) + (b * s.T + src) * s.I + p);
  st(static_cast<T*>(s.out[d]) + (b * s.T + src) * s.P + p, o);
}

template <typename T>
__global__ void proj_backward_kernel(const LstmStep s) {
  const int d = blockIdx.z;
  const int64_t b = blockIdx.x;
  const int64_t p = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t len = s.lengths[b];
  if (p >= s.P) return;
  T* dhp = static_cast<T*>(s.dhp[d]) + b * s.P + p;
  if (s.t >= len) {
    st(dhp, 0.0f);
    return;
  }
  const int64_t src = src_pos(s, d, len);
  const float hr = ld(static_cast<const T*>(s.hp[d]) + b * s.P + p);
  const float v = ld(static_cast<const T*>(s.go[d]) + (b * s.T + src) * s.P + p) + s.dh[d][b * s.P + p];
  st(dhp, (!s.proj_clipped || (hr >= s.proj_lo && hr <= s.proj_hi)) ? v : 0.0f);
}

template <typename T>
__global__ void gates_backward_kernel(const LstmStep s) {
  const int d = blockIdx.z;
  const int64_t b = blockIdx.x;
  const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t C = s.C, len = s.lengths[b];
  if (c >= C) return;
  T* dz = static_cast<T*>(s.dz[d]) + b * 4 * C;
  if (s.t >= len) {
    for (int q = 0; q < 4; ++q) st(dz + q * C + c, 0.0f);
    return;
  }
  const int64_t src = src_pos(s, d, len);
  const T* g = static_cast<const T*>(s.gates_r[d]) + b * 4 * C;
  const float si = ld(g + c), tj = ld(g + C + c), sf = ld(g + 2 * C + c), so = ld(g + 3 * C + c);
  const float cr = ld(static_cast<const T*>(s.c_raw_r[d]) + b * C + c);
  const float cn = clipf_(cr, s.cell_lo, s.cell_hi);
  const float tc = tanhf(cn);
  const float dm = ld(static_cast<const T*>(s.dm[d]) + b * C + c);
  float* dcp = s.dc[d] + b * C + c;
  const float dcn = *dcp + dm * so * (1.0f - tc * tc);
  const float dcr = (!s.cell_clipped || (cr >= s.cell_lo && cr <= s.cell_hi)) ? dcn : 0.0f;
  const float cprev = s.t == 0 ? s.c0[d][b * C + c]
                               : clipf_(ld(static_cast<const T*>(s.c_prev[d]) + b * C + c), s.cell_lo, s.cell_hi);
  const float v[4] = {dcr * tj * si * (1.0f - si), dcr * si * (1.0f - tj * tj), dcr * cprev * sf * (1.0f - sf),
                      dm * tc * so * (1.0f - so)};
  *dcp = dcr * sf;
  T* dzo = static_cast<T*>(s.dz_orig[d]) + (b * s.T + src) * 4 * C;
  for (int q = 0; q < 4; ++q) {
    st(dz + q * C + c, v[q]);
    st(dzo + q * C + c, v[q]);
  }
}

template <typename T>
__global__ void dh_update_kernel(const LstmStep s) {
  const int d = blockIdx.z;
  const int64_t b = blockIdx.x;
  const int64_t p = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (p >= s.P || s.t >= s.lengths[b]) return;
  s.dh[d][b * s.P + p] = ld(static_cast<const T*>(s.dh_new[d]) + b * s.P + p);
}

}  // namespace

void lstm_gates_forward(DType dt, const LstmStep& s, cudaStream_t stream) {
  const dim3 grid((unsigned)s.B, blocks_for(s.C, kGateThreads), (unsigned)s.ndir);
  SE_DISPATCH(dt, gates_forward_kernel<T><<<grid, kGateThreads, 0, stream>>>(s));
}

void lstm_proj_forward(DType dt, const LstmStep& s, cudaStream_t stream) {
  const dim3 grid((unsigned)s.B, blocks_for(s.P, kProjThreads), (unsigned)s.ndir);
  SE_DISPATCH(dt, proj_forward_kernel<T><<<grid, kProjThreads, 0, stream>>>(s));
}

void lstm_proj_backward(DType dt, const LstmStep& s, cudaStream_t stream) {
  const dim3 grid((unsigned)s.B, blocks_for(s.P, kProjThreads), (unsigned)s.ndir);
  SE_DISPATCH(dt, proj_backward_kernel<T><<<grid, kProjThreads, 0, stream>>>(s));
}

void lstm_gates_backward(DType dt, const LstmStep& s, cudaStream_t stream) {
  const dim3 grid((unsigned)s.B, blocks_for(s.C, kGateThreads), (unsigned)s.ndir);
  SE_DISPATCH(dt, gates_backward_kernel<T><<<grid, kGateThreads, 0, stream>>>(s));
}

void lstm_dh_update(DType dt, const LstmStep& s, cudaStream_t stream) {
  const dim3 grid((unsigned)s.B, blocks_for(s.P, kProjThreads), (unsigned)s.ndir);
  SE_DISPATCH(dt, dh_update_kernel<T><<<grid, kProjThreads, 0, stream>>>(s));
}

}  // namespace cuda
}  // namespace spacy_elmo
