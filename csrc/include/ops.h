// Declarations of the ATen-level kernels of spacy_elmo._C (CPU and CUDA).
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <tuple>
#include <vector>

namespace spacy_elmo {

// activation: 0 relu, 1 tanh
std::tuple<at::Tensor, at::Tensor> char_cnn_forward_cpu(const at::Tensor& ids, const at::Tensor& emb,
                                                        at::TensorList weights, at::TensorList biases,
                                                        int64_t activation);
std::tuple<at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>> char_cnn_backward_cpu(
    const at::Tensor& grad, const at::Tensor& out, const at::Tensor& arg, const at::Tensor& ids,
    const at::Tensor& emb, at::TensorList weights, int64_t activation);

std::tuple<at::Tensor, at::Tensor> highway_forward_cpu(const at::Tensor& x, const at::Tensor& weight,
                                                       const at::Tensor& bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor> highway_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                                    const at::Tensor& weight, const at::Tensor& h);

// Multi-direction LSTM-with-projection layer. xs: one (B, T, I) input per
// direction; weights: 4 per direction (w_input, w_recurrent, bias, w_proj);
// h0 (ndir, B, P), c0 (ndir, B, C); reverse: one flag per direction.
// Returns outs (ndir, B, T, P) as a list, h_n, c_n and the saved tensors
// (gates, c_raw, hp_raw, h_prev, m), empty when save is false.
using LstmForwardResult = std::tuple<std::vector<at::Tensor>, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                     at::Tensor, at::Tensor, at::Tensor>;
LstmForwardResult lstm_forward_cpu(at::TensorList xs, const at::Tensor& lengths, at::TensorList weights,
                                   const at::Tensor& h0, const at::Tensor& c0, std::optional<double> cell_clip,
                                   std::optional<double> proj_clip, at::IntArrayRef reverse, bool residual,
                                   bool save);
// Returns dxs (list), dweights (list, 4 per direction), dh0, dc0.
using LstmBackwardResult = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor, at::Tensor>;
LstmBackwardResult lstm_backward_cpu(at::TensorList grad_outs, const at::Tensor& grad_hn, const at::Tensor& grad_cn,
                                     at::TensorList xs, const at::Tensor& lengths, at::TensorList weights,
                                     const at::Tensor& c0, const at::Tensor& gates, const at::Tensor& c_raw,
                                     const at::Tensor& hp_raw, const at::Tensor& h_prev, const at::Tensor& m,
                                     std::optional<double> cell_clip, std::optional<double> proj_clip,
                                     at::IntArrayRef reverse, bool residual);

// Sampled softmax: lse (N,) = logsumexp(h @ w^T + off, 1) with column hit[n] of
// row n removed (-1: none); also returns the softmax p (N, S) for the backward.
std::tuple<at::Tensor, at::Tensor> sampled_logsumexp_forward_cpu(const at::Tensor& h, const at::Tensor& w,
                                                                 const at::Tensor& off, const at::Tensor& hit);
// Returns dh (N, P), dw (S, P), doff (S,).
std::tuple<at::Tensor, at::Tensor, at::Tensor> sampled_logsumexp_backward_cpu(const at::Tensor& grad,
                                                                              const at::Tensor& h,
                                                                              const at::Tensor& w,
                                                                              const at::Tensor& p);

// Which CPU kernel table is in use ("base", "avx2", "avx512"): the widest this CPU runs
// (cpu_isa_supported), unless SPACY_ELMO_CPU_ISA caps it.
std::string cpu_isa();
std::string cpu_isa_supported();

}  // namespace spacy_elmo
