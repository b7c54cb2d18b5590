// Raw-pointer CUDA kernel launchers of spacy_elmo._C. The .cu files include
// only this header plus the CUDA runtime / fp16 / bf16 headers (they compile
// with nvcc alone); the ATen glue (GEMMs through cuBLAS, allocation, streams)
// is in csrc/cuda/cuda_ops.cpp.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace spacy_elmo {
namespace cuda {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2 };

constexpr int kMaxFilters = 16;

// Filters of the char CNN; wp[i] is filter i packed as (width * D, count).
struct CharFilters {
  int n;
  int width[kMaxFilters];
  int count[kMaxFilters];
  int offset[kMaxFilters];
  const void* wp[kMaxFilters];
};

// fp32 gradient buffers of the packed filters (device pointers, passed by value).
struct FilterGrads {
  float* p[kMaxFilters];
};

// out (N, F) = act(max_p conv + bias), arg (N, F) int32 positions.
void char_cnn_forward(DType dt, const int64_t* ids, const void* emb, const CharFilters& f, const void* bias,
                      int64_t N, int W, int D, int F, int activation, void* out, int32_t* arg, cudaStream_t stream);
// Accumulates (fp32, zero-initialised by the caller): d_emb (261, D),
// d_wp[i] packed like wp[i], d_bias (F).
void char_cnn_backward(DType dt, const int64_t* ids, const void* emb, const CharFilters& f, const void* grad,
                       const void* out, const int32_t* arg, int64_t N, int W, int D, int F, int activation,
                       float* d_emb, const FilterGrads& d_wp, float* d_bias, cudaStream_t stream);

// h (N, 2F) = [transform | carry] pre-activations; y = g*relu(t) + (1-g)*x.
void highway_epilogue(DType dt, const void* h, const void* x, void* y, int64_t N, int64_t F, cudaStream_t stream);
// dh (N, 2F) and the direct part of dx (N, F).
void highway_backward(DType dt, const void* dy, const void* h, const void* x, void* dh, void* dx, int64_t N,
                      int64_t F, cudaStream_t stream);

// One LSTM step for up to two directions; pointers are per direction and
// already offset to the step (see cuda_ops.cpp for the layouts).
struct LstmStep {
  int ndir;
  int64_t B, T, I, C, P, t;
  const int64_t* lengths;  // (B) on the device
  int reverse[2];
  float cell_lo, cell_hi, proj_lo, proj_hi;
  // no clip: the backward passes every value, a NaN one too (the bounds test alone is false at NaN)
  bool cell_clipped, proj_clipped;
  bool residual;
  // forward
  const void* z[2];      // (B, 4C) recurrent product
  const void* xi[2];     // (B, T, 4C) input product + biases (original order)
  float* c[2];           // (B, C) fp32 cell state
  void* gates[2];        // (B, 4C) or null
  void* c_raw[2];        // (B, C) or null
  void* m[2];            // (B, C)
  void* h[2];            // (B, P) state (GEMM input)
  void* h_prev[2];       // (B, T, P) or null
  const void* hp[2];     // (B, P) projection before the clip (forward: this step's; backward: saved)
  void* out[2];          // (B, T, P)
  const void* x[2];      // (B, T, I) inputs (residual)
  // backward
  const void* go[2];     // (B, T, P) output grads
  float* dh[2];          // (B, P) fp32 carried grad wrt h
  float* dc[2];          // (B, C) fp32 carried grad wrt c
  void* dhp[2];          // (B, P) grad wrt hp of this step
  const void* dm[2];     // (B, C)
  const void* gates_r[2];
  const void* c_raw_r[2];
  const void* c_prev[2]; // (B, C): c0 (fp32 in cell_c0) when t == 0, else previous step's c_raw
  const float* c0[2];    // (B, C) fp32
  void* dz[2];           // (B, 4C) step buffer
  void* dz_orig[2];      // (B, T, 4C)
  const void* dh_new[2]; // (B, P) = dz @ W_rec^T
};

void lstm_gates_forward(DType dt, const LstmStep& s, cudaStream_t stream);
void lstm_proj_forward(DType dt, const LstmStep& s, cudaStream_t stream);
void lstm_proj_backward(DType dt, const LstmStep& s, cudaStream_t stream);
void lstm_gates_backward(DType dt, const LstmStep& s, cudaStream_t stream);
void lstm_dh_update(DType dt, const LstmStep& s, cudaStream_t stream);

// The virtual architectures nvcc compiled the kernels for, nvcc's __CUDA_ARCH_LIST__ ("750,900":
// compute_75, compute_90); "" where nvcc predates it (CUDA < 11.5). csrc/cuda/build_info.cu,
// read by csrc/bindings.cpp (build_info()).
const char* arch_list();

}  // namespace cuda
}  // namespace spacy_elmo
