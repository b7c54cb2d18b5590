// The log-sum-exp of pretraining's sampled softmax on the CPU, fused:
//   logits = h @ w^T + off, the column hit[n] of row n removed, lse = logsumexp(logits, 1)
// and its backward. The (N, S) logits are the largest tensor of a training
// step (168 MB at N = 5120, S = 8192). The reference makes five elementwise
// passes over them through memory (bias add, max, exp, sum, the backward's
// scale); here each block of rows goes through the product (MKL) and then,
// while still in cache, the whole softmax row by row, and is written once as
// the normalised softmax the backward needs. The backward never touches the
// (N, S) gradient: dlogits = p * g[:, None] is folded into the two products,
//   dh = g[:, None] * (p @ w),  [dw | doff]^T = [g[:, None] * h | g]^T @ p.
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "../include/checks.h"
#include "../include/cpu_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {

// Rows per block of the forward: the block's logits (kBlockRows * S floats,
// 4 MB at S = 8192) fit the two cores' L2 between the product and the softmax.
static constexpr int64_t kBlockRows = 128;

// h (N, P) and the candidates' weight (S, P), in the forward and the backward alike.
static void check_h_weight(const char* op, const at::Tensor& h, const at::Tensor& w) {
  TORCH_CHECK(h.dim() == 2 && w.dim() == 2 && h.size(1) == w.size(1), op, ": h must be (N, P) and weight (S, P), got ",
              h.sizes(), " and ", w.sizes());
}

static void check_inputs(const at::Tensor& h, const at::Tensor& w, const at::Tensor& off, const at::Tensor& hit) {
  check_h_weight("sampled_logsumexp", h, w);
  TORCH_CHECK(off.dim() == 1 && off.size(0) == w.size(0), "sampled_logsumexp: offset must be (S,) for S = ",
              w.size(0), ", got ", off.sizes());
  TORCH_CHECK(hit.dim() == 1 && hit.size(0) == h.size(0) && hit.scalar_type() == at::kLong,
              "sampled_logsumexp: hit must be an int64 (N,) tensor for N = ", h.size(0));
  TORCH_CHECK(h.scalar_type() == w.scalar_type() && h.scalar_type() == off.scalar_type() &&
                  (h.scalar_type() == at::kFloat || h.scalar_type() == at::kDouble),
              "sampled_logsumexp: h, weight and offset must share one dtype, float32 or float64");
  TORCH_CHECK(w.size(0) > 0, "sampled_logsumexp: no candidates (S = 0)");
}

// The float64 row (gradcheck, tests): the same steps as softmax_row, plainly.
template <typename T>
static void softmax_row_generic(T* x, int64_t S, const T* off, int64_t hit, T* lse) {
  const T lowest = std::numeric_limits<T>::lowest();
  for (int64_t s = 0; s < S; ++s) x[s] += off[s];
  if (hit >= 0) x[hit] = lowest;
  T m = lowest;
  for (int64_t s = 0; s < S; ++s) m = x[s] > m ? x[s] : m;
  T total = 0;
  for (int64_t s = 0; s < S; ++s) total += (x[s] = std::exp(x[s] - m));
  for (int64_t s = 0; s < S; ++s) x[s] /= total;
  *lse = m + std::log(total);
}

std::tuple<at::Tensor, at::Tensor> sampled_logsumexp_forward_cpu(const at::Tensor& h_in, const at::Tensor& w_in,
                                                                 const at::Tensor& off_in, const at::Tensor& hit_in) {
  check_inputs(h_in, w_in, off_in, hit_in);
  const at::Tensor h = h_in.contiguous(), w = w_in.contiguous(), off = off_in.contiguous(),
                   hit = hit_in.contiguous();
  const int64_t N = h.size(0), S = w.size(0);
  const int64_t* hp = hit.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    TORCH_CHECK(hp[n] >= -1 && hp[n] < S, "sampled_logsumexp: hit[", n, "] = ", hp[n], " is outside [-1, ", S, ")");
  at::Tensor p = at::empty({N, S}, h.options());
  at::Tensor lse = at::empty({N}, h.options());
  const at::Tensor wt = w.t();
  for (int64_t r0 = 0; r0 < N; r0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, N - r0);
    at::Tensor block = p.narrow(0, r0, rows);
    at::mm_out(block, h.narrow(0, r0, rows), wt);
    if (p.scalar_type() == at::kFloat) {
      const auto& kt = cpu::kernels();
      float* pp = p.data_ptr<float>();
      const float* op = off.data_ptr<float>();
      float* lp = lse.data_ptr<float>();
      at::parallel_for(r0, r0 + rows, 1, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) kt.softmax_row(pp + n * S, S, op, hp[n], lp + n);
      });
    } else {
      double* pp = p.data_ptr<double>();
      const double* op = off.data_ptr<double>();
      double* lp = lse.data_ptr<double>();
      at::parallel_for(r0, r0 + rows, 1, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) softmax_row_generic(pp + n * S, S, op, hp[n], lp + n);
      });
    }
  }
  return {lse, p};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sampled_logsumexp_backward_cpu(const at::Tensor& grad,
                                                                              const at::Tensor& h_in,
                                                                              const at::Tensor& w_in,
                                                                              const at::Tensor& p) {
  const char* op = "sampled_logsumexp_backward";
  check_h_weight(op, h_in, w_in);
  check_float(h_in, op, "h");
  check_same_float(w_in, h_in.scalar_type(), op, "weight");
  check_sizes(p, {h_in.size(0), w_in.size(0)}, op, "softmax (N, S)");
  check_same_float(p, h_in.scalar_type(), op, "softmax");
  check_sizes(grad, {h_in.size(0)}, op, "grad (N,)");
  const at::Tensor h = h_in.contiguous(), w = w_in.contiguous();
  const at::Tensor g = grad.to(h.scalar_type()).contiguous();
  at::Tensor dh = at::mm(p, w).mul_(g.unsqueeze(1));
  // dw and doff in one product, [g * h | g]^T @ p -> (P + 1, S): this orientation (p
  // untransposed, the long side N as the inner dimension of the small operand) runs
  // at ~1.3x the rate of p^T @ (g * h) at N = 5120, S = 8192, and needs no p^T @ g.
  const int64_t P = h.size(1);
  at::Tensor gh = at::empty({P + 1, h.size(0)}, h.options());
  gh.narrow(0, 0, P).copy_((h * g.unsqueeze(1)).t());
  gh.select(0, P).copy_(g);
  const at::Tensor dwo = at::mm(gh, p);
  // copies: outputs of a custom op must not share storage (torch.compile plans memory by that)
  return {dh, dwo.narrow(0, 0, P).t().contiguous(), dwo.select(0, P).clone()};
}

}  // namespace spacy_elmo
