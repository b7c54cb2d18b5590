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
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "../include/checks.h"
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
  // a build for other architectures than this GPU's: say the fix (as `spacy-elmo info` does)
  TORCH_CHECK(err == cudaSuccess, "spacy_elmo CUDA kernel launch failed: ", cudaGetErrorString(err),
              err == cudaErrorNoKernelImageForDevice
                  ? ". spacy_elmo._C has no code for this GPU's architecture (`spacy-elmo info` lists what it was "
                    "compiled for): rebuild it with TORCH_CUDA_ARCH_LIST set to this GPU's compute capability, "
                    "e.g. in a source checkout `TORCH_CUDA_ARCH_LIST=8.6 pip install --no-cache-dir "
                    "--no-build-isolation -e .` (`spacy-elmo info` gives the command for an installed copy)"
                  : "");
}

// The char CNN's CUDA-core forward keeps a token's embeddings, (W, D) float32, in dynamic shared memory
// (csrc/cuda/char_cnn.cu; its tensor-core kernel runs only within 48 KB). Past the GPU's opt-in limit per
// block the launch would fail with "invalid argument": the Python wrapper runs the reference there
// (spacy_elmo/ops/cuda_route.py), the op itself says why.
void check_char_cnn_shared_memory(int64_t W, int64_t D, int device) {
  int limit = 0;
  if (cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();  // unknown: the launch says what fails
    return;
  }
  const int64_t need = W * D * (int64_t)sizeof(float);
  TORCH_CHECK(need <= limit, "char_cnn (CUDA): a token's embeddings need ", need, " bytes of shared memory (W=", W,
              " characters x D=", D, " dims x 4), above this GPU's limit of ", limit,
              " per block; use fewer characters per token or a smaller char_embedding_dim "
              "(W x D at most ", limit / (int)sizeof(float), "), or backend='reference'");
}

struct Packed {
  cuda::CharFilters f;
  std::vector<at::Tensor> keep;
  int64_t F = 0;
};

Packed pack_filters(at::TensorList weights, int64_t D, at::ScalarType dt) {
  TORCH_CHECK((int)weights.size() <= cuda::kMaxFilters, "char_cnn (CUDA): at most ", cuda::kMaxFilters, " filters, got ",
              weights.size(), " (the fused Python wrapper runs the reference for more; or backend='reference')");
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

// The kernels read their tensors through raw pointers on `like`'s device (the
// shapes and dtypes they index by are checked as on the CPU: checks.h).
void check_device(const at::Tensor& t, const at::Tensor& like, const char* op, const char* name) {
  TORCH_CHECK(t.device() == like.device(), op, ": ", name, " is on ", t.device(), ", the other arguments on ",
              like.device());
}

// The dispatcher picks these kernels when any argument is on CUDA: `main` (the argument whose
// device the kernels run on) must be, or the device guard fails with a message that names neither.
void check_on_cuda(const at::Tensor& main, const char* op, const char* name) {
  TORCH_CHECK(main.is_cuda(), op, ": ", name, " is on ", main.device(),
              " while other arguments are on CUDA: pass every tensor on one device");
}

// char_ids as contiguous int64 on the table's device.
at::Tensor ids_on_device(const at::Tensor& ids, const at::Tensor& emb) {
  return ids.to(emb.device(), at::kLong).contiguous();
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> char_cnn_forward_cuda(const at::Tensor& ids_in, const at::Tensor& emb_in,
                                                         at::TensorList weights, at::TensorList biases,
                                                         int64_t activation) {
  const char* op = "char_cnn";
  check_char_cnn_filters(op, ids_in, emb_in, weights, activation);
  check_char_cnn_biases(weights, biases, emb_in.scalar_type());
  check_on_cuda(emb_in, op, "embedding");
  for (size_t i = 0; i < weights.size(); ++i) {
    check_device(weights[i], emb_in, op, "a filter weight");
    check_device(biases[i], emb_in, op, "a bias");
  }
  c10::cuda::CUDAGuard guard(emb_in.device());
  const at::Tensor ids = ids_on_device(ids_in, emb_in);
  // the kernel reads row id - 1 of the table unchecked: one sync for the ids' range
  const std::vector<int64_t> range = min_max_on_host({ids});
  check_min_max(ids, range[0], range[1], 0, emb_in.size(0), op, "char_ids", kCharIdsMeaning);
  const at::Tensor emb = emb_in.contiguous();
  const int64_t N = ids.size(0), W = ids.size(1), D = emb.size(1);
  check_char_cnn_shared_memory(W, D, emb.device().index());
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
  const char* op = "char_cnn_backward";
  check_char_cnn_filters(op, ids_in, emb_in, weights, activation);
  check_on_cuda(emb_in, op, "embedding");
  for (const auto& w : weights) check_device(w, emb_in, op, "a filter weight");
  const int64_t N = ids_in.size(0), W = ids_in.size(1), D = emb_in.size(1);
  const int64_t F = check_char_cnn_outputs(op, grad, out, arg, N, weights);
  c10::cuda::CUDAGuard guard(emb_in.device());
  const at::Tensor ids = ids_on_device(ids_in, emb_in);
  const at::Tensor emb = emb_in.contiguous();
  // grad, out and argmax are read by raw pointer: in the table's dtype (argmax int32) on its device
  const at::Tensor g = grad.to(emb.options()).contiguous();
  const at::Tensor o = out.to(emb.options()).contiguous();
  const at::Tensor a = arg.to(emb.device()).contiguous();
  // The ids index the table, the argmax positions the tokens' characters, unchecked:
  // both ranges with one sync. A window position p of filter i lies in 0..W - width_i,
  // so min(p, W - width_i - p) is negative for every other value.
  std::vector<at::Tensor> last;
  for (const auto& w : weights) last.push_back(at::full({w.size(0)}, W - w.size(2), ids.options()));
  const at::Tensor a64 = a.to(at::kLong);
  const at::Tensor slack = at::minimum(a64, at::cat(last).unsqueeze(0) - a64);
  const std::vector<int64_t> range = min_max_on_host({ids, slack});
  check_min_max(ids, range[0], range[1], 0, emb.size(0), op, "char_ids", kCharIdsMeaning);
  if (range[2] < 0) {  // name the first position outside, as the CPU op does
    check_window_positions(op, a.cpu().data_ptr<int32_t>(), N, W, F, weights);
    TORCH_INTERNAL_ASSERT(false, op, ": argmax left its windows on the device but not on the host");
  }
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
  cuda::char_cnn_backward(dtype_of(emb), ids.data_ptr<int64_t>(), emb.data_ptr(), p.f, g.data_ptr(), o.data_ptr(),
                          a.data_ptr<int32_t>(), N, (int)W, (int)D,
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
  // exact shapes: addmm would broadcast a (1,) or (2F, 1) bias silently
  check_highway_forward(x_in, weight, bias);
  check_on_cuda(x_in, "highway", "x");
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const int64_t N = x.size(0), F = x.size(1);
  at::Tensor h = at::addmm(bias, x, weight.t());
  at::Tensor y = at::empty_like(x);
  cuda::highway_epilogue(dtype_of(x), h.data_ptr(), x.data_ptr(), y.data_ptr(), N, F, stream());
  check_launch();
  return {y, h};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> highway_backward_cuda(const at::Tensor& grad, const at::Tensor& x_in,
                                                                     const at::Tensor& weight, const at::Tensor& h_in) {
  check_highway_backward(grad, x_in, weight, h_in);
  check_on_cuda(x_in, "highway_backward", "x");
  check_device(h_in, x_in, "highway_backward", "h");
  c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor h = h_in.contiguous();
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
  s.cell_clipped = cc.has_value();
  s.proj_clipped = pc.has_value();
  s.residual = residual;
}

// The number of steps, max(lengths) (check_lstm_lengths: every length in [0, T];
// one sync for lengths on the device, none on the host), after checking that the
// batch fits the kernels' grid (one block column per sentence: gridDim.x, up to
// 2^31 - 1; gridDim.y, at most 65535, would refuse what the CPU path runs).
// lengths: int64, contiguous.
int64_t lstm_steps(const char* op, const at::Tensor& lengths, int64_t B, int64_t T) {
  TORCH_CHECK(B <= 2147483647, op, " (CUDA): at most 2^31 - 1 sentences per call, got ", B);
  return check_lstm_lengths(op, lengths, T);
}

struct StepLengths {
  at::Tensor lengths;  // (B,) int64 on x's device, what the kernels read
  int64_t steps;       // max(lengths), checked (lstm_steps)
};

// The op's (B,) lengths (any integer dtype; checked by check_lstm) on x's device, with
// the number of steps. Lengths on the host cost no host sync: copied into a pinned
// buffer of the op's own (so the values checked are the values the kernels read, whatever
// the caller does with its tensor afterwards), checked there, and copied to the device
// without waiting (non_blocking from pinned memory: the caching host allocator keeps the
// buffer until the copy has run; a blocking copy, or one from pageable memory, waits for
// the device). Lengths on a device: one sync (min_max_on_host). BiLM.forward and
// contextualize hand the op host lengths (spacy_elmo/bilm/model.py).
StepLengths step_lengths(const char* op, const at::Tensor& lengths_in, const at::Tensor& x, int64_t B, int64_t T) {
  if (lengths_in.device().is_cpu()) {
    at::Tensor pinned = at::empty({lengths_in.numel()}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    pinned.copy_(lengths_in);  // (B,): check_lstm
    const int64_t steps = lstm_steps(op, pinned, B, T);
    return {pinned.to(x.device(), at::kLong, /*non_blocking=*/true), steps};
  }
  at::Tensor lengths = lengths_in.to(x.device(), at::kLong).contiguous();
  const int64_t steps = lstm_steps(op, lengths, B, T);
  return {lengths, steps};
}

// The address of x[i0][i1]... (the leading indices given) from x's data pointer and
// strides: what x.select(0, i0).select(0, i1)...data_ptr() gives, without the
// dispatcher calls (a select costs ~2.6 us of host time; the time loops below would
// run ~13 per direction and step). It checks nothing: the callers pass indices in
// range of tensors they allocated or checked above (checks.h), and only inside the
// time loops, which run only when no tensor they index is empty.
void* ptr_at(const at::Tensor& x, std::initializer_list<int64_t> idx) {
  const at::IntArrayRef st = x.strides();
  int64_t off = 0, k = 0;
  for (const int64_t i : idx) off += i * st[k++];
  return static_cast<char*>(x.data_ptr()) + off * (int64_t)x.element_size();
}

// Inner dimension from which a float32 product runs per direction rather than batched.
constexpr int64_t kFloat32BatchedMaxK = 2048;

// The directions' weights of one product out[d] = a[d] @ w[d] (w[d] (K, N), or its transpose):
// stacked (ndir, K, N) once per call, before the time loop, when the product runs batched.
//
// Two directions run ONE batched GEMM (one dispatcher call and one cuBLAS launch per step
// instead of two), except in float32 with a deep inner dimension: there cuBLAS's batched
// float32 GEMM splits no K, and a few output tiles each ran the whole K (H200, 2026-11-26:
// the original preset's biLSTM layer at 32 x 20 took 5.0 ms batched against 2.8 ms per
// direction; its products of K = 4096 and 16384, the projection and the backward's
// dz @ W_rec^T); bf16 and the shallow products gained. SPACY_ELMO_LSTM_PRODUCTS=batched or
// =per-direction overrides the choice (benchmarks/kernels.py compares the three); auto, unset or
// any other value keeps it (exact names: spacy_elmo/switches.py warns for another value).
struct DirWeights {
  bool batched = false;
  at::Tensor stacked;             // (ndir, K, N) when batched
  std::vector<at::Tensor> each;   // (K, N) per direction otherwise
};

DirWeights dir_weights(const std::vector<at::Tensor>& w, bool transpose) {
  DirWeights r;
  const int64_t K = transpose ? w[0].size(1) : w[0].size(0);
  r.batched = w.size() > 1 && (w[0].scalar_type() != at::kFloat || K < kFloat32BatchedMaxK);
  const char* force = std::getenv("SPACY_ELMO_LSTM_PRODUCTS");
  if (w.size() > 1 && force != nullptr && std::strcmp(force, "batched") == 0) r.batched = true;
  if (force != nullptr && std::strcmp(force, "per-direction") == 0) r.batched = false;
  if (r.batched) {
    r.stacked = at::stack(w);  // the one copy; its transpose is a view, as mm's w.t() is
    if (transpose) r.stacked = r.stacked.transpose(1, 2);
  } else {
    for (const auto& x : w) r.each.push_back(transpose ? x.t() : x);
  }
  return r;
}

// out[d] = a[d] @ w[d] for every direction d; out (ndir, rows, N) and a (ndir, rows, K) may be
// strided views such as a step's slice (ndir, B, P) of a (ndir, T, B, P) buffer (bmm and mm
// read and write through the strides when the rows are contiguous, as here: no copy). Same
// dtypes, the same products (bf16 / fp16 under autocast arrive as such; out= variants are not cast).
void dirs_mm(at::Tensor out, const at::Tensor& a, const DirWeights& w) {
  if (w.batched) {
    at::bmm_out(out, a, w.stacked);
    return;
  }
  for (int64_t d = 0; d < out.size(0); ++d) {
    at::Tensor o = out.select(0, d);
    at::mm_out(o, a.select(0, d), w.each[d]);
  }
}

}  // namespace

LstmForwardResult lstm_forward_cuda(at::TensorList xs, const at::Tensor& lengths_in, at::TensorList weights,
                                    const at::Tensor& h0, const at::Tensor& c0, std::optional<double> cell_clip,
                                    std::optional<double> proj_clip, at::IntArrayRef reverse, bool residual,
                                    bool save) {
  const char* op = "lstm";
  const LstmDims dm = check_lstm(op, xs, lengths_in, weights, reverse, residual, cell_clip, proj_clip);
  const int64_t ndir = dm.ndir, B = dm.B, T = dm.T, I = dm.I, C = dm.C, P = dm.P;
  check_lstm_state(dm, h0, c0);
  check_on_cuda(xs[0], op, "x");
  for (int64_t d = 1; d < ndir; ++d) check_device(xs[d], xs[0], op, "x");  // read through a raw pointer
  c10::cuda::CUDAGuard guard(xs[0].device());
  const auto opts = xs[0].options();
  const StepLengths sl = step_lengths(op, lengths_in, xs[0], B, T);
  const at::Tensor& lengths = sl.lengths;
  const int64_t tmax = sl.steps;
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
  at::Tensor h = h0.to(opts).clone().contiguous();
  at::Tensor c = c0.to(opts.dtype(at::kFloat)).clone().contiguous();
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
  const DirWeights wrec_s = dir_weights(wrec, false), wproj_s = dir_weights(wproj, false);
  cuda::LstmStep s;
  fill_common(s, ndir, B, T, I, C, P, lengths, reverse, cell_clip, proj_clip, residual);
  for (int64_t t = 0; t < tmax; ++t) {
    s.t = t;
    // this step's (ndir, B, C) m and (ndir, B, P) hp: step t of the saved tensors when saving
    const at::Tensor m_t = save ? m.select(1, t) : m_step;
    const at::Tensor hp_t = save ? hp_raw.select(1, t) : hp_step;
    dirs_mm(z, h, wrec_s);
    for (int64_t d = 0; d < ndir; ++d) {
      s.z[d] = ptr_at(z, {d});
      s.xi[d] = xi[d].data_ptr();
      s.c[d] = static_cast<float*>(ptr_at(c, {d}));
      s.gates[d] = save ? ptr_at(gates, {d, t}) : nullptr;
      s.c_raw[d] = save ? ptr_at(c_raw, {d, t}) : nullptr;
      s.m[d] = ptr_at(m_t, {d});
      s.h[d] = ptr_at(h, {d});
      s.h_prev[d] = save ? ptr_at(h_prev, {d}) : nullptr;
      s.hp[d] = ptr_at(hp_t, {d});
      s.out[d] = outs[d].data_ptr();
      s.x[d] = x[d].data_ptr();
    }
    cuda::lstm_gates_forward(dt, s, stream());
    check_launch();
    dirs_mm(hp_t, m_t, wproj_s);
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
  const char* op = "lstm_backward";
  const LstmDims dm = check_lstm(op, xs, lengths_in, weights, reverse, residual, cell_clip, proj_clip);
  const int64_t ndir = dm.ndir, B = dm.B, T = dm.T, I = dm.I, C = dm.C, P = dm.P;
  check_lstm_backward(op, dm, grad_outs, grad_hn, grad_cn, c0_in, xs[0].scalar_type(), gates, c_raw, hp_raw, h_prev,
                      m);
  check_on_cuda(xs[0], op, "x");
  // gates, c_raw and hp_raw are read through raw pointers
  check_device(gates, xs[0], op, "gates");
  check_device(c_raw, xs[0], op, "c_raw");
  check_device(hp_raw, xs[0], op, "hp_raw");
  c10::cuda::CUDAGuard guard(xs[0].device());
  const auto opts = xs[0].options();
  const auto f32 = opts.dtype(at::kFloat);
  const StepLengths sl = step_lengths(op, lengths_in, xs[0], B, T);
  const at::Tensor& lengths = sl.lengths;
  const int64_t tmax = sl.steps;
  std::vector<at::Tensor> go(ndir), wrec(ndir), wproj(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    go[d] = grad_outs[d].to(opts).contiguous();
    wrec[d] = weights[4 * d + 1];
    wproj[d] = weights[4 * d + 3];
  }
  const at::Tensor c0 = c0_in.to(f32).contiguous();
  at::Tensor dh = grad_hn.to(f32).clone().contiguous();
  at::Tensor dc = grad_cn.to(f32).clone().contiguous();
  at::Tensor dhp = at::zeros({ndir, T, B, P}, opts);
  at::Tensor dzo = at::zeros({ndir, B, T, 4 * C}, opts);
  at::Tensor dm_buf = at::empty({ndir, B, C}, opts);
  at::Tensor dz_step = at::empty({ndir, B, 4 * C}, opts);
  at::Tensor dh_tmp = at::empty({ndir, B, P}, opts);
  const DType dt = dtype_of(xs[0]);
  // W_rec^T (4C, P) and W_proj^T (P, C) per direction: views of the weights, as mm's wrec[d].t()
  const DirWeights wrec_t = dir_weights(wrec, true), wproj_t = dir_weights(wproj, true);
  cuda::LstmStep s;
  fill_common(s, ndir, B, T, I, C, P, lengths, reverse, cell_clip, proj_clip, residual);
  for (int64_t t = tmax - 1; t >= 0; --t) {
    s.t = t;
    for (int64_t d = 0; d < ndir; ++d) {
      s.hp[d] = ptr_at(hp_raw, {d, t});
      s.go[d] = go[d].data_ptr();
      s.dh[d] = static_cast<float*>(ptr_at(dh, {d}));
      s.dc[d] = static_cast<float*>(ptr_at(dc, {d}));
      s.dhp[d] = ptr_at(dhp, {d, t});
      s.dm[d] = ptr_at(dm_buf, {d});
      s.gates_r[d] = ptr_at(gates, {d, t});
      s.c_raw_r[d] = ptr_at(c_raw, {d, t});
      s.c_prev[d] = t > 0 ? ptr_at(c_raw, {d, t - 1}) : nullptr;
      s.c0[d] = static_cast<const float*>(ptr_at(c0, {d}));
      s.dz[d] = ptr_at(dz_step, {d});
      s.dz_orig[d] = ptr_at(dzo, {d});
      s.dh_new[d] = ptr_at(dh_tmp, {d});
    }
    cuda::lstm_proj_backward(dt, s, stream());
    check_launch();
    dirs_mm(dm_buf, dhp.select(1, t), wproj_t);
    cuda::lstm_gates_backward(dt, s, stream());
    check_launch();
    dirs_mm(dh_tmp, dz_step, wrec_t);
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
      dx.add_(at::where(valid.unsqueeze(-1), go[d], at::Scalar(0.0)));  // select: inf * 0 is NaN
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
