// ATen glue of the CUDA kernels (compiled only in CUDA builds): allocation,
// packing, the GEMMs (cuBLAS through ATen) and the per-step launches of the
// fused kernels in csrc/cuda/*.cu. Registered as the CUDA implementations of
// the spacy_elmo custom operators (schemas in csrc/bindings.cpp).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../include/cuda_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {

namespace {

using cuda::DType;

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    default: TORCH_CHECK(false, "spacy_elmo CUDA kernels support float32, float16 and bfloat16, got ", t.scalar_type());
  }
  return DType::F32;
}

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

void check_launch() {
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "spacy_elmo CUDA kernel launch failed: ", cudaGetErrorString(err));
}

struct Packed {
  cuda::CharFilters f;
  std::vector<at::Tensor> keep;
  int64_t F = 0;
};

Packed pack_filters(at::TensorList weights, int64_t D, at::ScalarType dt) {
  TORCH_CHECK((int)weights.size() <= cuda::kMaxFilters, "char_cnn (CUDA): at most ", cuda::kMaxFilters, " filters");
  Packed p;
  p.f.n = (int)weights.size();
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t count = weights[i].size(0), width = weights[i].size(2);
    at::Tensor w = weights[i].to(dt).permute({2, 1, 0}).reshape({width * D, count}).contiguous();
    p.f.width[i] = (int)width;
    p.f.count[i] = (int)count;
    p.f.offset[i] = (int)p.F;
    p.f.wp[i] = w.data_ptr();
    p.keep.push_back(w);
    p.F += count;
  }
  return p;
}

// The shapes the kernels index by (as the CPU kernel checks them): a filter wider
// than the tokens would make the backward read char ids past its token's W.
void check_char_cnn(const at::Tensor& ids, const at::Tensor& emb, at::TensorList weights, int64_t activation) {
  TORCH_CHECK(ids.dim() == 2, "char_cnn: char_ids must be (N, W)");
  TORCH_CHECK(emb.dim() == 2, "char_cnn: embedding must be (261, D)");
  TORCH_CHECK(activation == 0 || activation == 1, "char_cnn: activation must be 0 (relu) or 1 (tanh)");
  TORCH_CHECK(!weights.empty(), "char_cnn: at least one filter");
  for (size_t i = 0; i < weights.size(); ++i) {
    TORCH_CHECK(weights[i].dim() == 3 && weights[i].size(1) == emb.size(1), "char_cnn: weight ", i,
                " must be (count, D, width)");
    TORCH_CHECK(weights[i].size(2) <= ids.size(1), "char_cnn: filter ", i, " is wider than the tokens");
    // the kernels read the packed filters through raw device pointers
    TORCH_CHECK(weights[i].device() == emb.device(), "char_cnn (CUDA): weight ", i, " is on ", weights[i].device(),
                ", the embedding on ", emb.device());
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> char_cnn_forward_cuda(const at::Tensor& ids_in, const at::Tensor& emb_in,
                                                         at::TensorList weights, at::TensorList biases,
                                                         int64_t activation) {
  check_char_cnn(ids_in, emb_in, weights, activation);
  TORCH_CHECK(biases.size() == weights.size(), "char_cnn: one bias per filter");
  for (size_t i = 0; i < weights.size(); ++i)
    TORCH_CHECK(biases[i].numel() == weights[i].size(0) && biases[i].device() == emb_in.device(), "char_cnn: bias ",
                i, " must be (count,) on the embedding's device");
  c10::cuda::CUDAGuard guard(emb_in.device());
  const at::Tensor ids = ids_in.to(emb_in.device(), at::kLong).contiguous();
  const at::Tensor emb = emb_in.contiguous();
  const int64_t N = ids.size(0), W = ids.size(1), D = emb.size(1);
  Packed p = pack_filters(weights, D, emb.scalar_type());
  const at::Tensor bias = at::cat(biases.vec(), 0).to(emb.scalar_type()).contiguous();
  at::Tensor out = at::empty({N, p.F}, emb.options());
  at::Tensor arg = at::empty({N, p.F}, emb.options().dtype(at::kInt));
  cuda::char_cnn_forward(dtype_of(emb), ids.data_ptr<int64_t>(), emb.data_ptr(), p.f, bias.data_ptr(), N, (int)W,
                         (int)D, (int)p.F, (int)activation, out.data_ptr(), arg.data_ptr<int32_t>(), stream());
  check_launch();
  return {out, arg};
}

std::tuple<at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>> char_cnn_backward_cuda(
    const at::Tensor& grad, const at::Tensor& out, const at::Tensor& arg, const at::Tensor& ids_in,
    const at::Tensor& emb_in, at::TensorList weights, int64_t activation) {
  check_char_cnn(ids_in, emb_in, weights, activation);
  // out is read as the embedding's dtype, arg as int32 positions, both (N, F) on its device
  TORCH_CHECK(out.scalar_type() == emb_in.scalar_type() && out.device() == emb_in.device() &&
                  arg.device() == emb_in.device() && out.sizes() == arg.sizes() && out.dim() == 2 &&
                  out.size(0) == ids_in.size(0),
              "char_cnn_backward (CUDA): out and argmax must be the forward's outputs");
  c10::cuda::CUDAGuard guard(emb_in.device());
  const at::Tensor ids = ids_in.to(emb_in.device(), at::kLong).contiguous();
  const at::Tensor emb = emb_in.contiguous();
  const int64_t N = ids.size(0), W = ids.size(1), D = emb.size(1);
  Packed p = pack_filters(weights, D, emb.scalar_type());
  const auto f32 = emb.options().dtype(at::kFloat);
  at::Tensor d_emb = at::zeros(emb.sizes(), f32);
  at::Tensor d_bias = at::zeros({p.F}, f32);
  cuda::FilterGrads dg;
  std::vector<at::Tensor> d_wp;
  for (int i = 0; i < p.f.n; ++i) {
    d_wp.push_back(at::zeros({(int64_t)p.f.width[i] * D, p.f.count[i]}, f32));
    dg.p[i] = d_wp.back().data_ptr<float>();
  }
  const at::Tensor g = grad.to(emb.options()).contiguous();  // its device too: read by raw pointer
  cuda::char_cnn_backward(dtype_of(emb), ids.data_ptr<int64_t>(), emb.data_ptr(), p.f, g.data_ptr(),
                          out.contiguous().data_ptr(), arg.contiguous().data_ptr<int32_t>(), N, (int)W, (int)D,
                          (int)p.F, (int)activation, d_emb.data_ptr<float>(), dg, d_bias.data_ptr<float>(), stream());
  check_launch();
  std::vector<at::Tensor> dws, dbs;
  for (int i = 0; i < p.f.n; ++i) {
    const int64_t width = p.f.width[i], count = p.f.count[i];
    dws.push_back(d_wp[i].view({width, D, count}).permute({2, 1, 0}).contiguous().to(weights[i].scalar_type()));
    // a copy (to() returns the narrow view itself for float32): outputs must not alias
    dbs.push_back(d_bias.narrow(0, p.f.offset[i], count).to(weights[i].scalar_type(), false, true));
  }
  return {d_emb.to(emb.scalar_type()), dws, dbs};
}

std::tuple<at::Tensor, at::Tensor> highway_forward_cuda(const at::Tensor& x_in, const at::Tensor& weight,
                                                        const at::Tensor& bias) {
  TORCH_CHECK(x_in.dim() == 2, "highway: x must be (N, F)");
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), F = x.size(1);
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == 2 * F && weight.size(1) == F, "highway: weight must be (2F, F)");
  // addmm would broadcast a (1,) or (F,)-by-mistake bias silently; the CPU kernel refuses it
  TORCH_CHECK(bias.numel() == 2 * F, "highway: bias must be (2F,)");
  at::Tensor h = at::addmm(bias, x, weight.t());
  at::Tensor y = at::empty_like(x);
  cuda::highway_epilogue(dtype_of(x), h.data_ptr(), x.data_ptr(), y.data_ptr(), N, F, stream());
  check_launch();
  return {y, h};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> highway_backward_cuda(const at::Tensor& grad, const at::Tensor& x_in,
                                                                     const at::Tensor& weight, const at::Tensor& h_in) {
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor h = h_in.contiguous();
  TORCH_CHECK(h.scalar_type() == x.scalar_type() && h.device() == x.device() && h.dim() == 2 &&
                  h.size(0) == x.size(0) && h.size(1) == 2 * x.size(1),
              "highway_backward (CUDA): h must be the forward's (N, 2F) pre-activations");
  const at::Tensor dy = grad.to(x.options()).contiguous();  // its device too: read by raw pointer
  const int64_t N = x.size(0), F = x.size(1);
  at::Tensor dh = at::empty_like(h);
  at::Tensor dx = at::empty_like(x);
  cuda::highway_backward(dtype_of(x), dy.data_ptr(), h.data_ptr(), x.data_ptr(), dh.data_ptr(), dx.data_ptr(), N, F,
                         stream());
  check_launch();
  dx.addmm_(dh, weight);
  return {dx, at::mm(dh.t(), x), dh.sum(0)};
}

namespace {

void fill_common(cuda::LstmStep& s, int64_t ndir, int64_t B, int64_t T, int64_t I, int64_t C, int64_t P,
                 const at::Tensor& lengths, at::IntArrayRef reverse, std::optional<double> cc,
                 std::optional<double> pc, bool residual) {
  s = cuda::LstmStep{};
  s.ndir = (int)ndir;
  s.B = B;
  s.T = T;
  s.I = I;
  s.C = C;
  s.P = P;
  s.lengths = lengths.data_ptr<int64_t>();
  for (int64_t d = 0; d < ndir; ++d) s.reverse[d] = (int)reverse[d];
  s.cell_hi = cc.has_value() ? (float)*cc : INFINITY;
  s.cell_lo = -s.cell_hi;
  s.proj_hi = pc.has_value() ? (float)*pc : INFINITY;
  s.proj_lo = -s.proj_hi;
  s.residual = residual;
}

// The number of steps, max(lengths), after checking every length lies in [0, T]
// (a longer row would make the kernels read and write past its T positions) and
// that the batch fits the kernels' grid (one block column per sentence: gridDim.x,
// up to 2^31 - 1; gridDim.y, at most 65535, would refuse what the CPU path runs).
int64_t lstm_steps(const at::Tensor& lengths, int64_t B, int64_t T) {
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == B, "lstm (CUDA): lengths must be (B,)");
  TORCH_CHECK(B <= 2147483647, "lstm (CUDA): at most 2^31 - 1 sentences per call, got ", B);
  if (B == 0) return 0;
  const at::Tensor range = at::stack({lengths.min(), lengths.max()}).cpu();
  const int64_t lo = range[0].item<int64_t>(), hi = range[1].item<int64_t>();
  TORCH_CHECK(lo >= 0 && hi <= T, "lstm: lengths must lie in [0, T]");
  return hi;
}

// The weight shapes the kernels index by, as the CPU kernel checks them: a
// w_recurrent of (P, X != 4C) made mm_out resize the (B, 4C) step buffer view
// in place (a warning only) and the gate kernel read it with stride 4C. And the
// clips: a negative one made clipf_(x, -v, v) return garbage (the CPU refuses it).
void check_lstm_cuda(at::TensorList xs, at::TensorList weights, int64_t ndir, int64_t C, int64_t P,
                     std::optional<double> cc, std::optional<double> pc) {
  TORCH_CHECK(xs[0].dim() == 3, "lstm: x must be (B, T, I)");
  const int64_t I = xs[0].size(2);
  for (int64_t k = 0; k < ndir; ++k) {
    TORCH_CHECK(weights[4 * k].dim() == 2 && weights[4 * k].size(0) == I && weights[4 * k].size(1) == 4 * C,
                "lstm: w_input must be (I, 4C)");
    TORCH_CHECK(weights[4 * k + 1].dim() == 2 && weights[4 * k + 1].size(0) == P &&
                    weights[4 * k + 1].size(1) == 4 * C,
                "lstm: w_recurrent must be (P, 4C)");
    TORCH_CHECK(weights[4 * k + 2].numel() == 4 * C, "lstm: bias must be (4C,)");
    TORCH_CHECK(weights[4 * k + 3].dim() == 2 && weights[4 * k + 3].size(0) == C && weights[4 * k + 3].size(1) == P,
                "lstm: w_proj must be (C, P)");
  }
  TORCH_CHECK(!cc.has_value() || *cc >= 0, "lstm: cell_clip must be >= 0");
  TORCH_CHECK(!pc.has_value() || *pc >= 0, "lstm: proj_clip must be >= 0");
}

}  // namespace

LstmForwardResult lstm_forward_cuda(at::TensorList xs, const at::Tensor& lengths_in, at::TensorList weights,
                                    const at::Tensor& h0, const at::Tensor& c0, std::optional<double> cell_clip,
                                    std::optional<double> proj_clip, at::IntArrayRef reverse, bool residual,
                                    bool save) {
  const int64_t ndir = (int64_t)xs.size();
  TORCH_CHECK(ndir == 1 || ndir == 2, "lstm (CUDA): one or two directions");  // before xs[0] is read
  c10::cuda::CUDAGuard guard(xs[0].device());
  for (int64_t d = 1; d < ndir; ++d)  // x[d] is read through a raw pointer as xs[0]'s dtype and shape
    TORCH_CHECK(xs[d].sizes() == xs[0].sizes() && xs[d].scalar_type() == xs[0].scalar_type() &&
                    xs[d].device() == xs[0].device(),
                "lstm (CUDA): every direction's input must have the shape, dtype and device of the first");
  TORCH_CHECK((int64_t)weights.size() == 4 * ndir && (int64_t)reverse.size() == ndir, "lstm: bad arguments");
  TORCH_CHECK(weights[3].dim() == 2, "lstm: w_proj must be (C, P)");
  const int64_t C = weights[3].size(0), P = weights[3].size(1);
  check_lstm_cuda(xs, weights, ndir, C, P, cell_clip, proj_clip);
  const int64_t B = xs[0].size(0), T = xs[0].size(1), I = xs[0].size(2);
  TORCH_CHECK(!residual || I == P, "lstm: residual needs input dim == projection dim");
  const auto opts = xs[0].options();
  const at::Tensor lengths = lengths_in.to(xs[0].device(), at::kLong).contiguous();
  const int64_t tmax = lstm_steps(lengths, B, T);
  std::vector<at::Tensor> x(ndir), xi(ndir), outs(ndir), wrec(ndir), wproj(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    x[d] = xs[d].contiguous();
    at::Tensor b = weights[4 * d + 2].reshape({4 * C}).to(at::kFloat).clone();
    b.narrow(0, 2 * C, C).add_(1.0);
    xi[d] = at::addmm(b.to(opts.dtype()), x[d].view({B * T, I}), weights[4 * d]).view({B, T, 4 * C});
    outs[d] = at::zeros({B, T, P}, opts);
    wrec[d] = weights[4 * d + 1];
    wproj[d] = weights[4 * d + 3];
  }
  at::Tensor h = h0.to(opts).reshape({ndir, B, P}).clone().contiguous();
  at::Tensor c = c0.to(opts.dtype(at::kFloat)).reshape({ndir, B, C}).clone().contiguous();
  at::Tensor gates, c_raw, hp_raw, h_prev, m;
  if (save) {
    gates = at::empty({ndir, T, B, 4 * C}, opts);
    c_raw = at::empty({ndir, T, B, C}, opts);
    hp_raw = at::empty({ndir, T, B, P}, opts);
    h_prev = at::zeros({ndir, B, T, P}, opts);
    m = at::zeros({ndir, T, B, C}, opts);
  } else {
    // five distinct empty tensors: outputs of a custom op must not alias each other
    gates = at::empty({0}, opts);
    c_raw = at::empty({0}, opts);
    hp_raw = at::empty({0}, opts);
    h_prev = at::empty({0}, opts);
    m = at::empty({0}, opts);
  }
  at::Tensor m_step = save ? at::Tensor() : at::zeros({ndir, B, C}, opts);
  at::Tensor hp_step = save ? at::Tensor() : at::empty({ndir, B, P}, opts);
  at::Tensor z = at::empty({ndir, B, 4 * C}, opts);
  const DType dt = dtype_of(xs[0]);
  cuda::LstmStep s;
  fill_common(s, ndir, B, T, I, C, P, lengths, reverse, cell_clip, proj_clip, residual);
  for (int64_t t = 0; t < tmax; ++t) {
    s.t = t;
    std::vector<at::Tensor> m_t(ndir), hp_t(ndir);
    for (int64_t d = 0; d < ndir; ++d) {
      at::Tensor zd = z.select(0, d);
      at::mm_out(zd, h.select(0, d), wrec[d]);
      m_t[d] = save ? m.select(0, d).select(0, t) : m_step.select(0, d);
      hp_t[d] = save ? hp_raw.select(0, d).select(0, t) : hp_step.select(0, d);
      s.z[d] = zd.data_ptr();
      s.xi[d] = xi[d].data_ptr();
      s.c[d] = c.select(0, d).data_ptr<float>();
      s.gates[d] = save ? gates.select(0, d).select(0, t).data_ptr() : nullptr;
      s.c_raw[d] = save ? c_raw.select(0, d).select(0, t).data_ptr() : nullptr;
      s.m[d] = m_t[d].data_ptr();
      s.h[d] = h.select(0, d).data_ptr();
      s.h_prev[d] = save ? h_prev.select(0, d).data_ptr() : nullptr;
      s.hp[d] = hp_t[d].data_ptr();
      s.out[d] = outs[d].data_ptr();
      s.x[d] = x[d].data_ptr();
    }
    cuda::lstm_gates_forward(dt, s, stream());
    check_launch();
    for (int64_t d = 0; d < ndir; ++d) at::mm_out(hp_t[d], m_t[d], wproj[d]);
    cuda::lstm_proj_forward(dt, s, stream());
    check_launch();
  }
  return {outs, h, c.to(opts.dtype()), gates, c_raw, hp_raw, h_prev, m};
}

LstmBackwardResult lstm_backward_cuda(at::TensorList grad_outs, const at::Tensor& grad_hn, const at::Tensor& grad_cn,
                                      at::TensorList xs, const at::Tensor& lengths_in, at::TensorList weights,
                                      const at::Tensor& c0_in, const at::Tensor& gates, const at::Tensor& c_raw,
                                      const at::Tensor& hp_raw, const at::Tensor& h_prev, const at::Tensor& m,
                                      std::optional<double> cell_clip, std::optional<double> proj_clip,
                                      at::IntArrayRef reverse, bool residual) {
  const int64_t ndir = (int64_t)xs.size();
  TORCH_CHECK((ndir == 1 || ndir == 2) && (int64_t)weights.size() == 4 * ndir && (int64_t)reverse.size() == ndir &&
                  (int64_t)grad_outs.size() == ndir && weights[3].dim() == 2,
              "lstm_backward: bad arguments");
  c10::cuda::CUDAGuard guard(xs[0].device());
  const int64_t C = weights[3].size(0), P = weights[3].size(1);
  check_lstm_cuda(xs, weights, ndir, C, P, cell_clip, proj_clip);
  const int64_t B = xs[0].size(0), T = xs[0].size(1), I = xs[0].size(2);
  TORCH_CHECK(gates.numel() == ndir * T * B * 4 * C, "lstm_backward: the forward did not save its tensors");
  // gates, c_raw and hp_raw are read through raw pointers as xs[0]'s dtype, laid out as the forward saved them
  for (const at::Tensor* t : {&gates, &c_raw, &hp_raw})
    TORCH_CHECK(t->scalar_type() == xs[0].scalar_type() && t->device() == xs[0].device() && t->is_contiguous(),
                "lstm_backward (CUDA): the saved tensors must be the forward's");
  TORCH_CHECK(c_raw.numel() == ndir * T * B * C && hp_raw.numel() == ndir * T * B * P,
              "lstm_backward (CUDA): the saved tensors must be the forward's");
  const auto opts = xs[0].options();
  const auto f32 = opts.dtype(at::kFloat);
  const at::Tensor lengths = lengths_in.to(xs[0].device(), at::kLong).contiguous();
  const int64_t tmax = lstm_steps(lengths, B, T);
  std::vector<at::Tensor> go(ndir), wrec(ndir), wproj(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    go[d] = grad_outs[d].to(opts).contiguous();
    wrec[d] = weights[4 * d + 1];
    wproj[d] = weights[4 * d + 3];
  }
  const at::Tensor c0 = c0_in.to(f32).reshape({ndir, B, C}).contiguous();
  at::Tensor dh = grad_hn.to(f32).reshape({ndir, B, P}).clone().contiguous();
  at::Tensor dc = grad_cn.to(f32).reshape({ndir, B, C}).clone().contiguous();
  at::Tensor dhp = at::zeros({ndir, T, B, P}, opts);
  at::Tensor dzo = at::zeros({ndir, B, T, 4 * C}, opts);
  at::Tensor dm_buf = at::empty({ndir, B, C}, opts);
  at::Tensor dz_step = at::empty({ndir, B, 4 * C}, opts);
  at::Tensor dh_tmp = at::empty({ndir, B, P}, opts);
  const DType dt = dtype_of(xs[0]);
  cuda::LstmStep s;
  fill_common(s, ndir, B, T, I, C, P, lengths, reverse, cell_clip, proj_clip, residual);
  for (int64_t t = tmax - 1; t >= 0; --t) {
    s.t = t;
    for (int64_t d = 0; d < ndir; ++d) {
      s.hp[d] = hp_raw.select(0, d).select(0, t).data_ptr();
      s.go[d] = go[d].data_ptr();
      s.dh[d] = dh.select(0, d).data_ptr<float>();
      s.dc[d] = dc.select(0, d).data_ptr<float>();
      s.dhp[d] = dhp.select(0, d).select(0, t).data_ptr();
      s.dm[d] = dm_buf.select(0, d).data_ptr();
      s.gates_r[d] = gates.select(0, d).select(0, t).data_ptr();
      s.c_raw_r[d] = c_raw.select(0, d).select(0, t).data_ptr();
      s.c_prev[d] = t > 0 ? c_raw.select(0, d).select(0, t - 1).data_ptr() : nullptr;
      s.c0[d] = c0.select(0, d).data_ptr<float>();
      s.dz[d] = dz_step.select(0, d).data_ptr();
      s.dz_orig[d] = dzo.select(0, d).data_ptr();
      s.dh_new[d] = dh_tmp.select(0, d).data_ptr();
    }
    cuda::lstm_proj_backward(dt, s, stream());
    check_launch();
    for (int64_t d = 0; d < ndir; ++d) {
      at::Tensor dmd = dm_buf.select(0, d);
      at::mm_out(dmd, dhp.select(0, d).select(0, t), wproj[d].t());
    }
    cuda::lstm_gates_backward(dt, s, stream());
    check_launch();
    for (int64_t d = 0; d < ndir; ++d) {
      at::Tensor dhd = dh_tmp.select(0, d);
      at::mm_out(dhd, dz_step.select(0, d), wrec[d].t());
    }
    cuda::lstm_dh_update(dt, s, stream());
    check_launch();
  }
  std::vector<at::Tensor> dxs(ndir), dws;
  for (int64_t d = 0; d < ndir; ++d) {
    const at::Tensor x = xs[d].contiguous().view({B * T, I});
    const at::Tensor dz = dzo.select(0, d).view({B * T, 4 * C});
    dws.push_back(at::mm(x.t(), dz));
    dws.push_back(at::mm(h_prev.select(0, d).reshape({B * T, P}).t(), dz));
    dws.push_back(dz.sum(0, false, at::kFloat).to(opts.dtype()).view(weights[4 * d + 2].sizes()));
    dws.push_back(at::mm(m.select(0, d).reshape({T * B, C}).t(), dhp.select(0, d).reshape({T * B, P})));
    at::Tensor dx = at::mm(dz, weights[4 * d].t()).view({B, T, I});
    if (residual) {
      at::Tensor valid = at::arange(T, lengths.options()).unsqueeze(0).lt(lengths.unsqueeze(1));
      dx.add_(go[d] * valid.unsqueeze(-1).to(opts));
    }
    dxs[d] = dx;
  }
  return {dxs, dws, dh.to(opts.dtype()), dc.to(opts.dtype())};
}

}  // namespace spacy_elmo

TORCH_LIBRARY_IMPL(spacy_elmo, CUDA, m) {
  m.impl("char_cnn_forward", &spacy_elmo::char_cnn_forward_cuda);
  m.impl("char_cnn_backward", &spacy_elmo::char_cnn_backward_cuda);
  m.impl("highway_forward", &spacy_elmo::highway_forward_cuda);
  m.impl("highway_backward", &spacy_elmo::highway_backward_cuda);
  m.impl("lstm_forward", &spacy_elmo::lstm_forward_cuda);
  m.impl("lstm_backward", &spacy_elmo::lstm_backward_cuda);
}
