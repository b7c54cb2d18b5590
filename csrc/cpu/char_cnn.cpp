// Char CNN on the CPU: embedding gather + every filter + max over positions +
// bias + activation in one pass per block of tokens (no im2col buffer), and
// its backward to the embedding table, filters and biases.
#include <ATen/Parallel.h>
#define SE_WITH_ATEN_PARALLEL

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../include/checks.h"
#include "../include/cpu_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {

namespace {

constexpr int64_t kTokenBlock = 16;

// dw += g * window; dpos += g * filter (both contiguous, width * D long)
template <typename T>
inline void window_grads(T* __restrict__ dw, const T* __restrict__ ew, T* __restrict__ dp, const T* __restrict__ wk,
                         T g, int64_t K) {
#pragma omp simd
  for (int64_t r = 0; r < K; ++r) {
    dw[r] += g * ew[r];
    dp[r] += g * wk[r];
  }
}

// One filter block of the backward in the ISA's vector kernel (float32,
// cpu::CharConvBackArgs); false for other dtypes, which take the loop above.
template <typename T>
bool vector_conv_back(const T*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*,
                      const T*, T*, T*) {
  return false;
}

inline bool vector_conv_back(const float* g, const int32_t* arg, int64_t ldg, int64_t N, int64_t nf, int64_t K,
                             int64_t W, int64_t D, const float* e, const float* w, float* dw, float* dpos) {
  cpu::kernels().char_conv_back({g, arg, ldg, N, nf, K, W, D, e, w, dw, dpos});
  return true;
}

// The arguments both directions share (checks.h); returns char_ids as contiguous
// int64 after checking that every id has a row (gather_token and the backward's
// scatter index the table with them unchecked).
at::Tensor check_filters(const char* op, const at::Tensor& ids_in, const at::Tensor& emb, at::TensorList weights,
                         int64_t activation) {
  check_char_cnn_filters(op, ids_in, emb, weights, activation);
  const at::Tensor ids = ids_in.to(at::kLong).contiguous();
  check_range(ids.data_ptr<int64_t>(), ids.numel(), 0, emb.size(0), op, "char_ids", kCharIdsMeaning);
  return ids;
}

// One token's embedded characters, (W, D) row-major into dst: id 0 ("no
// character") is a zero vector, id >= 1 reads row id - 1 of the stored table.
template <typename T>
inline void gather_token(const int64_t* row, const T* table, int64_t W, int64_t D, T* dst) {
  for (int64_t w = 0; w < W; ++w) {
    if (row[w] > 0) std::copy(table + (row[w] - 1) * D, table + row[w] * D, dst + w * D);
    else std::fill(dst + w * D, dst + (w + 1) * D, T(0));
  }
}

// relu as `v < 0 ? 0 : v`: a NaN stays NaN (as torch.relu)
template <typename scalar_t>
inline scalar_t activate(scalar_t v, int64_t activation) {
  return activation == 0 ? (v < 0 ? scalar_t(0) : v) : std::tanh(v);
}

// Generic (any float type) direct convolution with running max: the float64
// path (gradcheck) and the fallback.
template <typename scalar_t>
void forward_generic(const int64_t* ids, const scalar_t* table, int64_t N, int64_t W, int64_t D,
                     const std::vector<at::Tensor>& weights, scalar_t* out, int32_t* arg, int64_t F) {
  at::parallel_for(0, N, 8, [&](int64_t n0, int64_t n1) {
    std::vector<scalar_t> e(W * D);
    for (int64_t n = n0; n < n1; ++n) {
      gather_token(ids + n * W, table, W, D, e.data());
      int64_t off = 0;
      for (const auto& wt : weights) {
        const int64_t count = wt.size(0), width = wt.size(2);
        const scalar_t* wd = wt.data_ptr<scalar_t>();
        for (int64_t f = 0; f < count; ++f) {
          scalar_t best = -std::numeric_limits<scalar_t>::infinity();
          int32_t bi = 0;
          for (int64_t p = 0; p + width <= W; ++p) {
            scalar_t acc = 0;
            for (int64_t d = 0; d < D; ++d)
              for (int64_t k = 0; k < width; ++k) acc += wd[(f * D + d) * width + k] * e[(p + k) * D + d];
            // NaN-sticky as torch.max, which returns the first NaN; a tie keeps the first
            if (acc > best || (std::isnan(acc) && !std::isnan(best))) {
              best = acc;
              bi = (int32_t)p;
            }
          }
          out[n * F + off + f] = best;
          arg[n * F + off + f] = bi;
        }
        off += count;
      }
    }
  });
}

// The largest magnitude of an embedding value or a filter weight for which no window sum of the
// float32 kernel can overflow (each of its k_max products then stays within FLT_MAX / (2 k_max)),
// and so none is NaN: the ISA kernels' window max (`acc > mx`, which a NaN never wins; checking
// every window for NaN there cost 5% of the forward) is then torch.max's.
inline float safe_magnitude(int64_t k_max) {
  return std::sqrt(std::numeric_limits<float>::max() / (2.0f * (float)k_max));
}

// Whether every one of the n values has a magnitude of at most lim (a NaN has none).
inline bool all_within(const float* p, int64_t n, float lim) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok &= std::fabs(p[i]) <= lim;
  return ok;
}

void forward_float(const int64_t* ids, const float* table, int64_t N, int64_t W, int64_t D,
                   const std::vector<at::Tensor>& weights, float* out, int32_t* arg, int64_t F) {
  // NaN, infinities and values large enough to overflow a window (safe_magnitude) take
  // forward_generic, whose max keeps a NaN as torch.max does: every token when a filter holds
  // one (checked here, once), else each token whose characters do (checked as gathered).
  int64_t k_max = 1;
  for (const auto& wt : weights) k_max = std::max(k_max, wt.size(1) * wt.size(2));
  const float lim = safe_magnitude(k_max);
  bool filters_ok = true;
  for (const auto& wt : weights) filters_ok = filters_ok && all_within(wt.data_ptr<float>(), wt.numel(), lim);
  if (!filters_ok) {
    forward_generic<float>(ids, table, N, W, D, weights, out, arg, F);
    return;
  }
  // Pack each filter to (width * D, ldw): channel-contiguous rows, zero-padded
  // to whole vectors. Repacked every call (tiny next to the convolution), so
  // weight updates are always seen.
  std::vector<at::Tensor> packed;
  std::vector<int64_t> ldws;
  for (const auto& wt : weights) {
    const int64_t count = wt.size(0), width = wt.size(2);
    const int64_t ldw = (count + 15) / 16 * 16;
    at::Tensor p = at::zeros({width * D, ldw}, wt.options());
    p.narrow(1, 0, count).copy_(wt.permute({2, 1, 0}).reshape({width * D, count}));
    packed.push_back(p);
    ldws.push_back(ldw);
  }
  const auto& kt = cpu::kernels();
  const int64_t nblocks = (N + kTokenBlock - 1) / kTokenBlock;
  cpu::dynamic_for(nblocks, [&](int64_t b, int64_t) {
    thread_local std::vector<float> e;
    e.resize(kTokenBlock * W * D);
    {
      const int64_t n0 = b * kTokenBlock;
      const int64_t nt = std::min(kTokenBlock, N - n0);
      int32_t run[kTokenBlock];
      bool careful[kTokenBlock];
      for (int64_t t = 0; t < nt; ++t) {
        const int64_t* row = ids + (n0 + t) * W;
        int64_t r = W - 1;
        while (r > 0 && row[r - 1] == row[W - 1]) --r;
        run[t] = (int32_t)r;
        gather_token(row, table, W, D, e.data() + t * W * D);
        careful[t] = !all_within(e.data() + t * W * D, W * D, lim);
      }
      int64_t off = 0;
      for (size_t i = 0; i < weights.size(); ++i) {
        cpu::CharConvArgs a;
        a.emb = e.data();
        a.ntok = nt;
        a.W = W;
        a.D = D;
        a.width = weights[i].size(2);
        a.wp = packed[i].data_ptr<float>();
        a.ldw = ldws[i];
        a.count = weights[i].size(0);
        a.out = out + n0 * F + off;
        a.arg = arg + n0 * F + off;
        a.ldo = F;
        a.run = run;
        kt.char_conv(a);
        off += a.count;
      }
      for (int64_t t = 0; t < nt; ++t)
        if (careful[t])  // its outputs again, NaN-sticky
          forward_generic<float>(ids + (n0 + t) * W, table, 1, W, D, weights, out + (n0 + t) * F,
                                 arg + (n0 + t) * F, F);
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> char_cnn_forward_cpu(const at::Tensor& ids_in, const at::Tensor& emb_in,
                                                        at::TensorList weights_in, at::TensorList biases_in,
                                                        int64_t activation) {
  const at::Tensor ids = check_filters("char_cnn", ids_in, emb_in, weights_in, activation);
  check_char_cnn_biases(weights_in, biases_in, emb_in.scalar_type());
  const at::Tensor emb = emb_in.contiguous();
  std::vector<at::Tensor> weights;
  int64_t F = 0;
  for (const auto& w : weights_in) {
    weights.push_back(w.contiguous());
    F += w.size(0);
  }
  const at::Tensor bias = at::cat(biases_in.vec(), 0).contiguous();
  const int64_t N = ids.size(0), W = ids.size(1), D = emb.size(1);
  at::Tensor out = at::empty({N, F}, emb.options());
  at::Tensor arg = at::empty({N, F}, emb.options().dtype(at::kInt));
  if (N == 0) return {out, arg};
  if (emb.scalar_type() == at::kFloat) {
    forward_float(ids.data_ptr<int64_t>(), emb.data_ptr<float>(), N, W, D, weights, out.data_ptr<float>(),
                  arg.data_ptr<int32_t>(), F);
  } else {
    AT_DISPATCH_FLOATING_TYPES(emb.scalar_type(), "char_cnn_forward", [&] {
      forward_generic<scalar_t>(ids.data_ptr<int64_t>(), emb.data_ptr<scalar_t>(), N, W, D, weights,
                                out.data_ptr<scalar_t>(), arg.data_ptr<int32_t>(), F);
    });
  }
  // bias + activation (after the max: equal for monotone activations)
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "char_cnn_bias_act", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    const scalar_t* b = bias.data_ptr<scalar_t>();
    at::parallel_for(0, N, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t f = 0; f < F; ++f) o[n * F + f] = activate<scalar_t>(o[n * F + f] + b[f], activation);
    });
  });
  return {out, arg};
}

std::tuple<at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>> char_cnn_backward_cpu(
    const at::Tensor& grad_in, const at::Tensor& out_in, const at::Tensor& arg_in, const at::Tensor& ids_in,
    const at::Tensor& emb_in, at::TensorList weights_in, int64_t activation) {
  const char* op = "char_cnn_backward";
  const at::Tensor ids = check_filters(op, ids_in, emb_in, weights_in, activation);
  const at::Tensor emb = emb_in.contiguous();
  const int64_t N = ids.size(0), W = ids.size(1), D = emb.size(1), V = emb.size(0);
  std::vector<at::Tensor> weights;
  std::vector<int64_t> offs, widths;
  int64_t F = 0;
  for (const auto& w : weights_in) {
    weights.push_back(w.contiguous());
    offs.push_back(F);
    widths.push_back(w.size(2));
    F += w.size(0);
  }
  check_char_cnn_outputs(op, grad_in, out_in, arg_in, N, weights_in);
  const at::Tensor out = out_in.contiguous();
  const at::Tensor arg = arg_in.contiguous();
  check_window_positions(op, arg.data_ptr<int32_t>(), N, W, F, weights_in);  // they index the tokens' characters
  // Gradient at the pre-activation maximum. ReLU's is a select, not a product with a 0/1 mask:
  // an inf gradient (fp16 loss scaling) at a zero output gives 0 there, not inf * 0 = NaN. It
  // passes at a NaN output, as torch.relu's (`out <= 0 ? 0 : grad`).
  at::Tensor g = activation == 0 ? at::where(out <= 0, at::Scalar(0.0), grad_in) : grad_in * (1 - out * out);
  g = g.to(emb.scalar_type()).contiguous();
  std::vector<at::Tensor> dws, dbs;
  at::Tensor db_all = g.sum(0);
  for (size_t i = 0; i < weights.size(); ++i) {
    dws.push_back(at::Tensor());
    dbs.push_back(db_all.narrow(0, offs[i], weights[i].size(0)).clone());
  }
  // Filter-major: a task owns a block of filters of one width and runs every
  // token through it, so it writes its filters' gradient once (no per-thread
  // partial copies of all filters to sum); float32 runs the block in the ISA's
  // vector kernel (this file is built for the baseline ISA, SSE2 on x86-64, which is
  // where the time went: released filters, 1,135 tokens, 36 -> 25-27 ms; the
  // filter-major order alone measured no faster). The window gradients go to
  // per-thread (N, W, D) position buffers, scattered to the table at the end.
  const int nthreads = at::get_num_threads();
  int64_t wtotal = 0;
  std::vector<int64_t> woffs;
  for (size_t i = 0; i < weights.size(); ++i) {
    woffs.push_back(wtotal);
    wtotal += weights[i].numel();
  }
  constexpr int64_t kFilterBlock = 16;
  std::vector<int32_t> blk_filter, blk_first;  // (weight index, first filter) of each task
  for (size_t i = 0; i < weights.size(); ++i)
    for (int64_t f = 0; f < weights[i].size(0); f += kFilterBlock) {
      blk_filter.push_back((int32_t)i);
      blk_first.push_back((int32_t)f);
    }
  at::Tensor dw_flat = at::empty({wtotal}, emb.options());
  at::Tensor dpos_parts = at::zeros({nthreads, N, W, D}, emb.options());
  at::Tensor demb_parts = at::zeros({nthreads, V, D}, emb.options());
  // weights transposed to (f, k, d)
  std::vector<at::Tensor> wt_all;
  for (auto& w : weights) wt_all.push_back(w.permute({0, 2, 1}).contiguous());
  // The embedded characters of every token, (N, W, D): shifted id k >= 1 reads
  // table row k - 1, id 0 (no character) a zero row (padding ids are real rows).
  const at::Tensor e_all =
      at::constant_pad_nd(emb, {0, 0, 1, 0}).index_select(0, ids.reshape({-1})).reshape({N, W, D});
  AT_DISPATCH_FLOATING_TYPES(emb.scalar_type(), "char_cnn_backward", [&] {
    const int64_t* idp = ids.data_ptr<int64_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    const int32_t* ap = arg.data_ptr<int32_t>();
    std::vector<const scalar_t*> wts;
    for (auto& w : wt_all) wts.push_back(w.data_ptr<scalar_t>());
    const scalar_t* ep = e_all.data_ptr<scalar_t>();
    scalar_t* dwf = dw_flat.data_ptr<scalar_t>();
    const auto run_task = [&](int64_t task, scalar_t* dpos) {
      const int32_t i = blk_filter[task];
      const int64_t f0 = blk_first[task], nf = std::min<int64_t>(kFilterBlock, weights[i].size(0) - f0);
      const int64_t K = widths[i] * D, fc0 = offs[i] + f0;
      scalar_t* dw = dwf + woffs[i] + f0 * K;
      const scalar_t* wk0 = wts[i] + f0 * K;
      if (vector_conv_back(gp + fc0, ap + fc0, F, N, nf, K, W, D, ep, wk0, dw, dpos)) return;
      std::fill(dw, dw + nf * K, scalar_t(0));
      for (int64_t n = 0; n < N; ++n) {
        const scalar_t* gn = gp + n * F + fc0;
        const int32_t* an = ap + n * F + fc0;
        for (int64_t f = 0; f < nf; ++f) {
          const scalar_t gv = gn[f];
          if (gv == scalar_t(0)) continue;
          const int64_t p = an[f];
          window_grads<scalar_t>(dw + f * K, ep + (n * W + p) * D, dpos + (n * W + p) * D, wk0 + f * K, gv, K);
        }
      }
    };
    // Part r runs the tasks [first[r], first[r + 1]) in order into position buffer r, not into
    // the buffer of whichever thread took a task: work stealing (cpu::dynamic_for) summed the
    // table's gradient from other partials every call, so it differed in its last bits from run
    // to run and seeded fine-tuning did not repeat. Parts are cut at equal shares of the cost
    // (filters x width).
    std::vector<int64_t> first(nthreads + 1, (int64_t)blk_filter.size());
    {
      std::vector<int64_t> cost(blk_filter.size());
      int64_t total = 0;
      for (size_t t = 0; t < blk_filter.size(); ++t) {
        const int32_t i = blk_filter[t];
        cost[t] = std::min<int64_t>(kFilterBlock, weights[i].size(0) - blk_first[t]) * widths[i];
        total += cost[t];
      }
      int64_t done = 0, r = 0;
      first[0] = 0;
      for (size_t t = 0; t < blk_filter.size() && r + 1 < nthreads; ++t) {
        done += cost[t];
        while (r + 1 < nthreads && done * nthreads >= (r + 1) * total) first[++r] = (int64_t)t + 1;
      }
    }
    at::parallel_for(0, nthreads, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        scalar_t* dpos = dpos_parts.data_ptr<scalar_t>() + r * N * W * D;
        for (int64_t task = first[r]; task < first[r + 1]; ++task) run_task(task, dpos);
      }
    });
    at::parallel_for(0, nthreads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const scalar_t* dpos = dpos_parts.data_ptr<scalar_t>() + t * N * W * D;
        scalar_t* de = demb_parts.data_ptr<scalar_t>() + t * V * D;
        for (int64_t k = 0; k < N * W; ++k) {
          const int64_t id = idp[k];
          if (id <= 0) continue;
          for (int64_t d = 0; d < D; ++d) de[(id - 1) * D + d] += dpos[k * D + d];
        }
      }
    });
  });
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t count = weights[i].size(0), width = widths[i];
    // a copy even where the permuted view is already contiguous (width 1): outputs of
    // a custom op must not share storage (torch.compile plans memory by that)
    dws[i] = dw_flat.narrow(0, woffs[i], count * width * D)
                 .view({count, width, D})
                 .permute({0, 2, 1})
                 .clone(at::MemoryFormat::Contiguous);
  }
  at::Tensor demb = demb_parts.sum(0);
  return {demb, dws, dbs};
}

}  // namespace spacy_elmo
