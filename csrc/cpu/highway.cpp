// Highway layer on the CPU: one GEMM for [transform; carry] (MKL through
// at::addmm) with relu/sigmoid/combine fused into one parallel epilogue pass.
// TF semantics: y = g * relu(t) + (1 - g) * x, g = sigmoid(carry).
#include <ATen/Parallel.h>

#include <cmath>

#include "../include/checks.h"
#include "../include/cpu_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {

std::tuple<at::Tensor, at::Tensor> highway_forward_cpu(const at::Tensor& x_in, const at::Tensor& weight,
                                                       const at::Tensor& bias) {
  check_highway_forward(x_in, weight, bias);
  const int64_t N = x_in.size(0), F = x_in.size(1);
  const at::Tensor x = x_in.contiguous();
  at::Tensor h = at::addmm(bias, x, weight.t());  // (N, 2F): [transform | carry]
  at::Tensor y = at::empty_like(x);
  if (N == 0) return {y, h};
  if (x.scalar_type() == at::kFloat) {
    const auto& kt = cpu::kernels();
    const float* hp = h.data_ptr<float>();
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) kt.highway_epilogue(hp + n * 2 * F, hp + n * 2 * F + F, xp + n * F, yp + n * F, F);
    });
  } else {
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "highway_forward", [&] {
      const scalar_t* hp = h.data_ptr<scalar_t>();
      const scalar_t* xp = x.data_ptr<scalar_t>();
      scalar_t* yp = y.data_ptr<scalar_t>();
      at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t k = 0; k < F; ++k) {
            // relu as `v < 0 ? 0 : v`: a NaN stays NaN (as torch.relu)
            const scalar_t t = hp[n * 2 * F + k] < 0 ? scalar_t(0) : hp[n * 2 * F + k];
            const scalar_t g = scalar_t(1) / (scalar_t(1) + std::exp(-hp[n * 2 * F + F + k]));
            yp[n * F + k] = g * t + (scalar_t(1) - g) * xp[n * F + k];
          }
      });
    });
  }
  return {y, h};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> highway_backward_cpu(const at::Tensor& grad_in, const at::Tensor& x_in,
                                                                    const at::Tensor& weight, const at::Tensor& h_in) {
  check_highway_backward(grad_in, x_in, weight, h_in);
  const int64_t N = x_in.size(0), F = x_in.size(1);
  const at::Tensor x = x_in.contiguous();
  const at::Tensor h = h_in.contiguous();
  const at::Tensor dy = grad_in.to(x.scalar_type()).contiguous();
  at::Tensor dh = at::empty_like(h);
  at::Tensor dx = at::empty_like(x);
  if (x.scalar_type() == at::kFloat) {
    const auto& kt = cpu::kernels();
    const float *dyp = dy.data_ptr<float>(), *hp = h.data_ptr<float>(), *xp = x.data_ptr<float>();
    float *dhp = dh.data_ptr<float>(), *dxp = dx.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        kt.highway_backward(dyp + n * F, hp + n * 2 * F, hp + n * 2 * F + F, xp + n * F, dhp + n * 2 * F,
                            dhp + n * 2 * F + F, dxp + n * F, F);
    });
  } else {
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "highway_backward", [&] {
      const scalar_t *dyp = dy.data_ptr<scalar_t>(), *hp = h.data_ptr<scalar_t>(), *xp = x.data_ptr<scalar_t>();
      scalar_t *dhp = dh.data_ptr<scalar_t>(), *dxp = dx.data_ptr<scalar_t>();
      at::parallel_for(0, N, 16, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t k = 0; k < F; ++k) {
            const scalar_t ht = hp[n * 2 * F + k];
            const scalar_t t = ht < 0 ? scalar_t(0) : ht;
            const scalar_t g = scalar_t(1) / (scalar_t(1) + std::exp(-hp[n * 2 * F + F + k]));
            const scalar_t d = dyp[n * F + k];
            dhp[n * 2 * F + k] = ht <= 0 ? scalar_t(0) : d * g;  // passes at a NaN, as torch.relu's
            dhp[n * 2 * F + F + k] = d * (t - xp[n * F + k]) * g * (scalar_t(1) - g);
            dxp[n * F + k] = d * (scalar_t(1) - g);
          }
      });
    });
  }
  dx.addmm_(dh, weight);            // dx += dh @ W
  at::Tensor dw = at::mm(dh.t(), x);  // (2F, F)
  at::Tensor db = dh.sum(0);
  return {dx, dw, db};
}

}  // namespace spacy_elmo
