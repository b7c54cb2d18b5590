// LSTM-with-projection layer on the CPU, forward and backward through time.
//
// * The input products, float32: in a layer whose packed W_in and W_rec fit
//   16 MB (the small preset's), inside the recurrent pass below, each task's
//   panel of W_in with its panel of W_rec (input_in_step). Larger layers: GEMMs
//   over many timesteps at once, a chunk
//   of up to ~1,024 rows (whole steps) at a time into a work buffer, the rows
//   gathered in step order (the backward direction's row b at step t is position
//   len_b - 1 - t), computed a panel of gate columns per task with the step
//   kernels' GEMM into the panel layout the gate epilogue reads, the bias added
//   in the gate epilogue. Other dtypes: one addmm
//   over all B*T positions in their original order, the backward direction
//   reading position len_b - 1 - t; nothing reversed is materialised.
// * float32 (the fast path): each step is two parallel passes over both
//   directions at once (they run concurrently on the thread team, each thread
//   owning the same share of tasks at every step and taking over what others
//   leave, each task prefetching the next one's weights): (1) per panel of
//   cells, z = h @ W_rec for the panel's four gate blocks is computed in
//   registers from prepacked weights (packed on every call into per-thread work
//   buffers: see "work buffers" below) and the bias, gates, cell clip and
//   m = sigmoid(o) * tanh(c) are applied right there, four rows in lockstep;
//   (2) per panel of projection columns, hp = m @ W_P in registers, then the
//   projection clip, the state update, the residual and the scatter of the
//   output to the row's own (possibly reversed) position.
// * Other dtypes (float64 for gradcheck): the same algorithm with the
//   recurrent/projection products as at::mm_out (MKL) on views and scalar
//   gate loops.
// * Backward through time mirrors it (float32: two fused passes per step with
//   packed transposed weights). The gate gradients dz go to a chunk buffer of
//   the same ~1,024 rows, in step order; once a chunk's steps are done, its
//   weight gradients (accumulated over the chunks) and input gradients are
//   GEMMs over its rows. The tensors saved for it use recycled memory
//   (cpu_memory.h).
#include <ATen/Parallel.h>
#define SE_WITH_ATEN_PARALLEL

#include <algorithm>
#include <cmath>
#include <vector>

#include "../include/checks.h"
#include "../include/cpu_kernels.h"
#include "../include/cpu_memory.h"
#include "../include/ops.h"

namespace spacy_elmo {

namespace {

constexpr int64_t kChunk = 256;

template <typename T>
inline T sigm(T x) { return T(1) / (T(1) + std::exp(-x)); }

template <typename T>
inline T clipv(T x, T v) { return v < T(0) ? x : std::min(std::max(x, -v), v); }

template <typename T>
void gates_forward_generic(const T* z, const T* xi, T* cst, T* g, T* craw, T* m, int64_t C,
                           int64_t c0, int64_t c1, T cc) {
  for (int64_t c = c0; c < c1; ++c) {
    const T si = sigm(z[c] + xi[c]);
    const T tj = std::tanh(z[C + c] + xi[C + c]);
    const T sf = sigm(z[2 * C + c] + xi[2 * C + c]);
    const T so = sigm(z[3 * C + c] + xi[3 * C + c]);
    const T cr = sf * cst[c] + si * tj;
    const T cn = clipv(cr, cc);
    cst[c] = cn;
    m[c] = so * std::tanh(cn);
    if (g) {
      g[c] = si;
      g[C + c] = tj;
      g[2 * C + c] = sf;
      g[3 * C + c] = so;
      craw[c] = cr;
    }
  }
}

template <typename T>
void gates_backward_generic(const T* dmv, const T* g, const T* crv, const T* cp, bool prev_raw, T* dc, T* dz,
                            int64_t C, int64_t c0, int64_t c1, T cc) {
  for (int64_t c = c0; c < c1; ++c) {
    const T si = g[c], tj = g[C + c], sf = g[2 * C + c], so = g[3 * C + c];
    const T cr = crv[c];
    const T cn = clipv(cr, cc);
    const T tc = std::tanh(cn);
    const T dm = dmv[c];
    const T d_o = dm * tc * so * (T(1) - so);
    const T dcn = dc[c] + dm * so * (T(1) - tc * tc);
    const bool pass = cc < T(0) || (cr >= -cc && cr <= cc);
    const T dcr = pass ? dcn : T(0);
    const T cprev = prev_raw ? clipv(cp[c], cc) : cp[c];
    dz[c] = dcr * tj * si * (T(1) - si);
    dz[C + c] = dcr * si * (T(1) - tj * tj);
    dz[2 * C + c] = dcr * cprev * sf * (T(1) - sf);
    dz[3 * C + c] = d_o;
    dc[c] = dcr * sf;
  }
}

// ---------------------------------------------------------------- work buffers
//
// The buffers that never leave a call are per-thread work buffers
// (cpu_memory.h): rewritten on every call, never trusted. For the packed
// weights that matters: a cache of packed contents cannot see every update
// (fused optimizers and .data writes leave the version counter alone).
enum WorkSlot {
  kSlotRec0 = 0,    // packed recurrent weights, + direction
  kSlotProj0 = 2,   // packed projection weights, + direction
  kSlotInput0 = 4,  // forward: input products x @ W_in, + direction (float32: in panels)
  kSlotGradZ = 6,   // backward: one chunk's gradient wrt the gate pre-activations, all directions
  kSlotInputRows = 7,  // one chunk's input rows in step order (forward: all directions;
                       // backward: [x | h_prev | 1] of one direction)
  kSlotGradInput = 8,  // backward: one chunk's dx in step order, one direction
  kSlotInputPanel = 9,  // forward: one panel of the input weights, packed by the task that uses it
};

// The position of step t of a row of length len: the backward direction walks
// each sentence from its own last token.
inline int64_t step_pos(bool reverse, int64_t len, int64_t t) { return reverse ? len - 1 - t : t; }

// Steps per chunk of the products over many steps (the forward's input products,
// the backward's weight and input gradients): at most about kStepChunkRows rows
// (B a step), the steps split evenly between the chunks. Smaller chunks made the
// products slower than the cache saved (small layer, 32 x 20: 2 chunks of 320
// rows 31.7 ms, one of 640 rows 26.8 ms); at 128 x 50 chunks of 1,024 rows took
// the forward from 280-289 to 229-260 ms and its input products from 105 MB a
// direction to 16 MB.
constexpr int64_t kStepChunkRows = 1024;
int64_t chunk_steps(int64_t B, int64_t tmax) {
  const int64_t nchunk = std::max<int64_t>(1, (tmax * B + kStepChunkRows - 1) / kStepChunkRows);
  return std::max<int64_t>(1, (tmax + nchunk - 1) / nchunk);
}

// Copies between a (B, T, W) tensor in position order and a chunk's rows in step
// order: row (t - t0) * B + b of `rows` (row stride ld) is position
// step_pos(reverse, len_b, t) of row b, for t in [t0, t1). Gathering writes zeros
// for rows past their length (their products are never read, or meet zero
// gradients); scattering leaves those positions alone.
template <typename S>
void gather_steps(const S* src, int64_t B, int64_t T, int64_t W, const int64_t* lens, bool reverse,
                  int64_t t0, int64_t t1, S* rows, int64_t ld) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < B; ++b) {
      S* o = rows + ((t - t0) * B + b) * ld;
      if (t < lens[b]) {
        const S* s = src + (b * T + step_pos(reverse, lens[b], t)) * W;
        std::copy(s, s + W, o);
      } else {
        std::fill(o, o + W, S(0));
      }
    }
}

template <typename S>
void scatter_steps(const S* rows, int64_t ld, int64_t B, int64_t T, int64_t W, const int64_t* lens, bool reverse,
                   int64_t t0, int64_t t1, S* dst) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < B; ++b)
      if (t < lens[b]) {
        const S* r = rows + ((t - t0) * B + b) * ld;
        std::copy(r, r + W, dst + (b * T + step_pos(reverse, lens[b], t)) * W);
      }
}

float* pack_buffer(int slot, int64_t numel) { return cpu::workspace(slot, {numel}, at::kFloat).data_ptr<float>(); }

// dst[j * pstride + (k * ngroups + g) * width + u] = src[k * ld + g * gstride + j * width + u],
// zero where j * width + u >= nvalid: panels of `width` columns out of `ngroups`
// column groups, each panel K rows deep, panel j at j * pstride (0: K * ngroups *
// width, the panels back to back).
// Neighbouring panels are packed together so that the source is read a row
// span at a time (one panel alone would touch a new page on every read).
void pack_column_panels(const float* src, int64_t K, int64_t ld, int64_t ngroups, int64_t gstride,
                        int64_t nvalid, int64_t width, int64_t npanel, float* dst, int64_t pstride = 0) {
  constexpr int64_t kPanels = 16;
  const int64_t nblock = (npanel + kPanels - 1) / kPanels, psize = pstride > 0 ? pstride : K * ngroups * width;
  at::parallel_for(0, nblock, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j0 = b * kPanels, j1 = std::min(npanel, j0 + kPanels);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t g = 0; g < ngroups; ++g) {
          const float* s = src + k * ld + g * gstride;
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t c0 = j * width, n = std::max<int64_t>(0, std::min(width, nvalid - c0));
            float* o = dst + j * psize + (k * ngroups + g) * width;
            std::copy(s + c0, s + c0 + n, o);
            std::fill(o + n, o + width, 0.0f);
          }
        }
    }
  });
}

// dst[j][k][u] = src[(j * width + u) * K + k], zero where j * width + u >= nrows:
// panels of `width` rows of a row-major (nrows, K) matrix, transposed.
void pack_row_panels_transposed(const float* src, int64_t nrows, int64_t K, int64_t width, int64_t npanel,
                                float* dst) {
  constexpr int64_t kBlock = 64;  // a (kBlock, width) tile of dst stays in L1 while it fills
  at::parallel_for(0, npanel, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t r0 = j * width, n = std::min(width, nrows - r0);
      float* o = dst + j * K * width;
      for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
        const int64_t k1 = std::min(K, k0 + kBlock);
        for (int64_t u = 0; u < width; ++u) {
          if (u < n) {
            const float* s = src + (r0 + u) * K;
            for (int64_t k = k0; k < k1; ++k) o[k * width + u] = s[k];
          } else {
            for (int64_t k = k0; k < k1; ++k) o[k * width + u] = 0.0f;
          }
        }
      }
    }
  });
}

// Zeros t's positions at or past each row's length (dimension batch_dim is the
// row, time_dim the position): the kernels write every position before it, and
// the weight gradients sum over all positions.
void zero_past_lengths(const at::Tensor& t, int64_t batch_dim, int64_t time_dim, const int64_t* lens) {
  const int64_t B = t.size(batch_dim), T = t.size(time_dim);
  const int64_t time_after = time_dim > batch_dim ? time_dim - 1 : time_dim;  // once the row is selected
  for (int64_t b = 0; b < B; ++b)
    if (lens[b] < T) t.select(batch_dim, b).narrow(time_after, lens[b], T - lens[b]).zero_();
}

// Whether the float32 forward computes its input products inside the recurrent
// pass (x_t @ W_in, then h @ W_rec, into the same registers, from one packed
// (I + P, 4 * VL) panel per task) rather than a chunk of steps at a time into a
// work buffer that every step's tasks prefetch back (16 KB a position for the
// small layer: 21 MB at 32 x 20, gone from the caches by the time it is read).
// The products take the same tiles either way; the step's tasks stream W_in's
// panels too, so only while both directions' packed W_in and W_rec fit
// kInputInStepBytes: the small layer's 8 MB (32 x 20, AMD EPYC: 3-8% faster,
// docs/architecture.md), not the original's 128 MB, which would come from
// memory at every step.
constexpr int64_t kInputInStepBytes = int64_t(16) << 20;
bool input_in_step(int64_t ndir, int64_t I, int64_t P, int64_t C) {
  return ndir * (I + P) * 4 * C * int64_t(sizeof(float)) <= kInputInStepBytes;
}

// Rows per task of the passes over projection-side panels: as many as possible
// (a task streams its panel once for all its rows), but at least 4 tasks per
// thread, so that a thread slowed by another process can hand work over.
int64_t row_group(int64_t B, int64_t panels) {
  const int64_t want = 4 * at::get_num_threads();
  const int64_t groups = std::max<int64_t>(1, (want + panels - 1) / panels);
  const int64_t rows = (B + groups - 1) / groups;
  return std::min<int64_t>(48, std::max<int64_t>(6, (rows + 5) / 6 * 6));
}

}  // namespace

LstmForwardResult lstm_forward_cpu(at::TensorList xs, const at::Tensor& lengths_in, at::TensorList weights,
                                   const at::Tensor& h0, const at::Tensor& c0, std::optional<double> cell_clip,
                                   std::optional<double> proj_clip, at::IntArrayRef reverse, bool residual,
                                   bool save) {
  const LstmDims dm = check_lstm("lstm", xs, lengths_in, weights, reverse, residual, cell_clip, proj_clip);
  const int64_t ndir = dm.ndir, B = dm.B, T = dm.T, I = dm.I, C = dm.C, P = dm.P;
  check_lstm_state(dm, h0, c0);
  const auto opts = xs[0].options();
  const at::Tensor lengths = lengths_in.to(at::kCPU, at::kLong).contiguous();
  const int64_t* lens = lengths.data_ptr<int64_t>();
  const int64_t tmax = check_lstm_lengths("lstm", lengths, T);
  const auto& kt = cpu::kernels();
  // float32 runs the ISA-dispatched vector kernels: the fused steps (see the header
  // comment) where the table has them, else the generic loop's gate kernels. One
  // row (a single sentence) uses each weight once per step: packing the weights
  // costs more than the packed steps save there, and MKL's per-step products
  // stream the unpacked weights at least as fast (original layer, 20 tokens:
  // 47.0 ms this way, 60.2 ms packed; from two rows on, packed is as fast or faster).
  const bool use_table = xs[0].scalar_type() == at::kFloat;
  const bool fast = use_table && kt.step_gates != nullptr && B > 1;
  std::vector<at::Tensor> x(ndir), xi(ndir), bias(ndir), outs(ndir), wrec(ndir), wproj(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    x[d] = xs[d].contiguous();
    bias[d] = weights[4 * d + 2].reshape({4 * C}).clone();
    bias[d].narrow(0, 2 * C, C).add_(1.0);  // forget bias
    // The fast path adds the bias in its gate epilogue: addmm would first write the
    // broadcast bias over the whole (B * T, 4C) product.
    // The fast path computes its input products a chunk of steps at a time, in the loop below.
    if (!fast) xi[d] = at::addmm(bias[d], x[d].view({B * T, I}), weights[4 * d]).view({B, T, 4 * C});
    outs[d] = at::zeros({B, T, P}, opts);
    wrec[d] = weights[4 * d + 1];
    wproj[d] = weights[4 * d + 3];
  }
  at::Tensor h = h0.to(opts).reshape({ndir, B, P}).clone().contiguous();
  at::Tensor c = c0.to(opts).reshape({ndir, B, C}).clone().contiguous();
  at::Tensor gates, c_raw, hp_raw, h_prev, m;
  if (save) {
    // Saved for the backward: recycled memory (cpu_memory.h), same shapes every step. A row's steps
    // past its length write nothing to gates, c_raw and hp_raw, and the backward never reads there:
    // those regions stay uninitialised (not zeroed: no use for the cost), so two calls' saved
    // tensors differ there (why the opcheck test leaves out test_aot_dispatch_*).
    gates = cpu::recycled_empty({ndir, T, B, 4 * C}, opts);
    c_raw = cpu::recycled_empty({ndir, T, B, C}, opts);
    hp_raw = cpu::recycled_empty({ndir, T, B, P}, opts);
    // Steps past a row's length write nothing to h_prev and m; those rows must still
    // be zeros (the weight gradients multiply them by zero gradients).
    h_prev = cpu::recycled_empty({ndir, B, T, P}, opts);
    m = cpu::recycled_empty({ndir, T, B, C}, opts);
    zero_past_lengths(h_prev, 1, 2, lens);
    zero_past_lengths(m, 2, 1, lens);
  } else {
    gates = at::empty({0}, opts);
    c_raw = at::empty({0}, opts);
    hp_raw = at::empty({0}, opts);
    h_prev = at::empty({0}, opts);
    m = at::empty({0}, opts);
  }
  const double ccd = cell_clip.has_value() ? *cell_clip : -1.0;
  const double pcd = proj_clip.has_value() ? *proj_clip : -1.0;
  const int64_t nchunk = (C + kChunk - 1) / kChunk;

  if (fast) {
    // float32: fused steps with prepacked weights (see the header comment).
    const int64_t VL = kt.step_vl, npanel = (C + VL - 1) / VL;
    const int64_t pw = 4 * VL, npp = (P + pw - 1) / pw;
    // with_x: each recurrent task's panel is (I + P, 4 * VL), W_in's rows first
    const bool with_x = input_in_step(ndir, I, P, C);
    const int64_t rec_k = with_x ? I + P : P;
    std::vector<const float*> wrec_p(ndir), wproj_p(ndir);
    std::vector<at::Tensor> win(ndir);
    for (int64_t d = 0; d < ndir; ++d) {
      const at::Tensor wr = wrec[d].contiguous(), wp = wproj[d].contiguous();
      win[d] = weights[4 * d].contiguous();
      float* r = pack_buffer(kSlotRec0 + d, npanel * rec_k * 4 * VL);
      if (with_x) pack_column_panels(win[d].data_ptr<float>(), I, 4 * C, 4, C, C, VL, npanel, r, rec_k * 4 * VL);
      pack_column_panels(wr.data_ptr<float>(), P, 4 * C, 4, C, C, VL, npanel, r + (rec_k - P) * 4 * VL,
                         rec_k * 4 * VL);
      float* q = pack_buffer(kSlotProj0 + d, npp * C * pw);
      pack_column_panels(wp.data_ptr<float>(), C, P, 1, 0, P, pw, npp, q);
      wrec_p[d] = r;
      wproj_p[d] = q;
    }
    at::Tensor m_buf = save ? at::Tensor() : at::zeros({ndir, B, C}, opts);
    std::vector<const float*> xi_rows(ndir * B);
    std::vector<float*> g_rows(ndir * B), cr_rows(ndir * B), out_rows(ndir * B), hp_rows(ndir * B);
    std::vector<const float*> res_rows(ndir * B);
    float* hs = h.data_ptr<float>();
    float* cs = c.data_ptr<float>();
    const float cc = (float)ccd, pc = (float)pcd;
    const int64_t rows_per_task = row_group(B, ndir * npp);
    const int64_t nrg = (B + rows_per_task - 1) / rows_per_task;
    // The weight panel of task k of each pass (a task also names its successor's).
    const int64_t rec_floats = rec_k * 4 * VL, proj_floats = C * pw;
    auto rec_panel = [&](int64_t k) { return wrec_p[k / npanel] + (k % npanel) * rec_floats; };
    auto proj_panel = [&](int64_t k) { return wproj_p[k / (npp * nrg)] + ((k / nrg) % npp) * proj_floats; };
    // Input products a chunk of steps at a time, rows in step order (the reversed
    // direction's rows gathered): a large batch's products no longer go out to
    // memory and come back (nor take 16 KB a position of the small layer, 64 KB of
    // the original, for all B * T positions at once). They are one matrix product
    // per direction, computed a panel of columns per task with the recurrent
    // products' kernel, into the panel layout the gate epilogue reads: panel j of
    // direction d holds the chunk's rows, (rows, 4 * VL) each. Each task packs its
    // own panel of W_in (I * 4 * VL floats) into a small per-thread buffer: kept
    // packed, W_in would add 64 MB per calling thread for the original model. (MKL's
    // product spent about a sixth of its time packing W_in and zeroing its output.)
    const int64_t csteps = chunk_steps(B, tmax), panel_stride = csteps * B * 4 * VL;
    const at::Tensor xg = cpu::workspace(kSlotInputRows, {ndir, csteps * B, I}, at::kFloat);
    std::vector<float*> xi_p(ndir), xg_p(ndir);
    for (int64_t d = 0; d < ndir; ++d) {
      if (!with_x) {
        xi[d] = cpu::workspace(kSlotInput0 + d, {npanel * panel_stride}, at::kFloat);
        xi_p[d] = xi[d].data_ptr<float>();
      }
      xg_p[d] = xg.data_ptr<float>() + d * csteps * B * I;
    }
    for (int64_t t = 0; t < tmax; ++t) {
      const int64_t t0 = t / csteps * csteps;
      if (t == t0) {
        const int64_t t1 = std::min(tmax, t0 + csteps), rows = (t1 - t0) * B;
        for (int64_t d = 0; d < ndir; ++d)
          gather_steps(x[d].data_ptr<float>(), B, T, I, lens, reverse[d], t0, t1, xg_p[d], I);
        if (!with_x) cpu::dynamic_for(ndir * npanel, [&](int64_t k, int64_t) {
          const int64_t d = k / npanel, j = k % npanel;
          float* panel = pack_buffer(kSlotInputPanel, I * 4 * VL);  // this thread's
          pack_column_panels(win[d].data_ptr<float>() + j * VL, I, 4 * C, 4, C, C - j * VL, VL, 1, panel);
          cpu::PanelGemmArgs a;
          a.a = xg_p[d];
          a.lda = I;
          a.rows = rows;
          a.K = I;
          a.wp = panel;
          a.out = xi_p[d] + j * panel_stride;
          kt.panel_gemm(a);
        });
      }
      std::vector<float*> m_t(ndir);
      for (int64_t d = 0; d < ndir; ++d) {
        m_t[d] = save ? m.select(0, d).select(0, t).data_ptr<float>() : m_buf.select(0, d).data_ptr<float>();
        // panel 0's input products of step t, or (with_x) the step's input rows, marking the active ones
        const float* xid = with_x ? xg_p[d] + (t - t0) * B * I : xi_p[d] + (t - t0) * B * 4 * VL;
        const float* xd = x[d].data_ptr<float>();
        float* od = outs[d].data_ptr<float>();
        for (int64_t b = 0; b < B; ++b) {
          const int64_t k = d * B + b;
          const bool active = t < lens[b];
          const int64_t src = active ? step_pos(reverse[d], lens[b], t) : 0;
          xi_rows[k] = active ? xid + b * (with_x ? I : 4 * VL) : nullptr;
          out_rows[k] = active ? od + (b * T + src) * P : nullptr;
          res_rows[k] = residual ? xd + (b * T + src) * I : nullptr;
          if (save) {
            g_rows[k] = gates.data_ptr<float>() + ((d * T + t) * B + b) * 4 * C;
            cr_rows[k] = c_raw.data_ptr<float>() + ((d * T + t) * B + b) * C;
            hp_rows[k] = hp_raw.data_ptr<float>() + ((d * T + t) * B + b) * P;
            if (active)
              std::copy(hs + k * P, hs + (k + 1) * P, h_prev.data_ptr<float>() + ((d * B + b) * T + src) * P);
          }
        }
      }
      cpu::dynamic_for(ndir * npanel, [&](int64_t k, int64_t next) {
        {
          const int64_t d = k / npanel, j = k % npanel;
          cpu::StepGatesArgs a;
          a.h = hs + d * B * P;
          a.B = B;
          a.P = P;
          a.wp = rec_panel(k);
          if (next >= 0) a.wp_next = rec_panel(next);
          a.next_floats = rec_floats;
          a.C = C;
          a.c0 = j * VL;
          a.nc = std::min(VL, C - j * VL);
          a.xi_rows = xi_rows.data() + d * B;
          a.xi_off = j * panel_stride;
          a.xi_gs = VL;
          if (with_x) {
            a.x = xg_p[d] + (t - t0) * B * I;
            a.ldx = I;
            a.I = I;
          }
          a.bias = bias[d].data_ptr<float>();
          a.c = cs + d * B * C;
          a.m = m_t[d];
          a.gates_rows = save ? g_rows.data() + d * B : nullptr;
          a.craw_rows = save ? cr_rows.data() + d * B : nullptr;
          a.cell_clip = cc;
          kt.step_gates(a);
        }
      });
      cpu::dynamic_for(ndir * npp * nrg, [&](int64_t k, int64_t next) {
        {
          const int64_t d = k / (npp * nrg), j = (k / nrg) % npp, r0 = (k % nrg) * rows_per_task;
          cpu::StepProjArgs a;
          a.m = m_t[d] + r0 * C;
          a.B = std::min(rows_per_task, B - r0);
          a.C = C;
          a.wp = proj_panel(k);
          if (next >= 0) a.wp_next = proj_panel(next);
          a.next_floats = proj_floats;
          a.P = P;
          a.p0 = j * pw;
          a.np = std::min(pw, P - j * pw);
          a.h = hs + (d * B + r0) * P;
          a.out_rows = out_rows.data() + d * B + r0;
          a.res_rows = residual ? res_rows.data() + d * B + r0 : nullptr;
          a.hp_rows = save ? hp_rows.data() + d * B + r0 : nullptr;
          a.proj_clip = pc;
          kt.step_proj(a);
        }
      });
    }
    return {outs, h, c, gates, c_raw, hp_raw, h_prev, m};
  }

  at::Tensor m_step = save ? at::Tensor() : at::zeros({ndir, B, C}, opts);
  at::Tensor hp_step = save ? at::Tensor() : at::empty({ndir, B, P}, opts);
  at::Tensor z = at::empty({ndir, B, 4 * C}, opts);
  AT_DISPATCH_FLOATING_TYPES(xs[0].scalar_type(), "lstm_forward", [&] {
    using T_ = scalar_t;
    const T_ cc = (T_)ccd, pc = (T_)pcd;
    for (int64_t t = 0; t < tmax; ++t) {
      std::vector<at::Tensor> m_t(ndir), hp_t(ndir);
      for (int64_t d = 0; d < ndir; ++d) {
        at::Tensor zd = z.select(0, d);
        at::mm_out(zd, h.select(0, d), wrec[d]);
        m_t[d] = save ? m.select(0, d).select(0, t) : m_step.select(0, d);
        hp_t[d] = save ? hp_raw.select(0, d).select(0, t) : hp_step.select(0, d);
      }
      // gates + cell clip + m, over (direction, row, channel chunk)
      at::parallel_for(0, ndir * B * nchunk, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t d = k / (B * nchunk), b = (k / nchunk) % B, ch = k % nchunk;
          const int64_t cb = ch * kChunk, ce = std::min(C, cb + kChunk);
          T_* mrow = m_t[d].data_ptr<T_>() + b * C;
          if (t >= lens[b]) {
            if (!save) std::fill(mrow + cb, mrow + ce, T_(0));
            continue;
          }
          const int64_t src = step_pos(reverse[d], lens[b], t);
          const T_* zr = z.data_ptr<T_>() + (d * B + b) * 4 * C;
          const T_* xr = xi[d].data_ptr<T_>() + (b * T + src) * 4 * C;
          T_* cr = c.data_ptr<T_>() + (d * B + b) * C;
          T_* gr = save ? gates.data_ptr<T_>() + ((d * T + t) * B + b) * 4 * C : nullptr;
          T_* crr = save ? c_raw.data_ptr<T_>() + ((d * T + t) * B + b) * C : nullptr;
          if (save && ch == 0) {
            const T_* hs = h.data_ptr<T_>() + (d * B + b) * P;
            std::copy(hs, hs + P, h_prev.data_ptr<T_>() + ((d * B + b) * T + src) * P);
          }
          if (use_table) {  // float32: the ISA-dispatched vector kernel
            cpu::GateArgs a{reinterpret_cast<const float*>(zr), reinterpret_cast<const float*>(xr),
                            reinterpret_cast<float*>(cr), reinterpret_cast<float*>(gr),
                            reinterpret_cast<float*>(crr), reinterpret_cast<float*>(mrow), C, cb, ce, (float)cc};
            kt.gates_forward(a);
            continue;
          }
          gates_forward_generic<T_>(zr, xr, cr, gr, crr, mrow, C, cb, ce, cc);
        }
      });
      for (int64_t d = 0; d < ndir; ++d) at::mm_out(hp_t[d], m_t[d], wproj[d]);
      // projection clip, state, residual, output scatter
      at::parallel_for(0, ndir * B, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t d = k / B, b = k % B;
          if (t >= lens[b]) continue;
          const int64_t src = step_pos(reverse[d], lens[b], t);
          const T_* hp = hp_t[d].data_ptr<T_>() + b * P;
          T_* hs = h.data_ptr<T_>() + (d * B + b) * P;
          T_* o = outs[d].data_ptr<T_>() + (b * T + src) * P;
          const T_* xr = x[d].data_ptr<T_>() + (b * T + src) * I;
          for (int64_t p = 0; p < P; ++p) {
            const T_ v = clipv(hp[p], pc);
            hs[p] = v;
            o[p] = residual ? v + xr[p] : v;
          }
        }
      });
    }
  });
  return {outs, h, c, gates, c_raw, hp_raw, h_prev, m};
}

LstmBackwardResult lstm_backward_cpu(at::TensorList grad_outs, const at::Tensor& grad_hn, const at::Tensor& grad_cn,
                                     at::TensorList xs, const at::Tensor& lengths_in, at::TensorList weights,
                                     const at::Tensor& c0_in, const at::Tensor& gates, const at::Tensor& c_raw,
                                     const at::Tensor& hp_raw, const at::Tensor& h_prev, const at::Tensor& m,
                                     std::optional<double> cell_clip, std::optional<double> proj_clip,
                                     at::IntArrayRef reverse, bool residual) {
  const char* op = "lstm_backward";
  const LstmDims dm = check_lstm(op, xs, lengths_in, weights, reverse, residual, cell_clip, proj_clip);
  const int64_t ndir = dm.ndir, B = dm.B, T = dm.T, I = dm.I, C = dm.C, P = dm.P;
  const auto dtype = xs[0].scalar_type();
  check_lstm_backward(op, dm, grad_outs, grad_hn, grad_cn, c0_in, dtype, gates, c_raw, hp_raw, h_prev, m);
  const auto opts = xs[0].options();
  const at::Tensor lengths = lengths_in.to(at::kCPU, at::kLong).contiguous();
  const int64_t* lens = lengths.data_ptr<int64_t>();
  const int64_t tmax = check_lstm_lengths(op, lengths, T);
  std::vector<at::Tensor> go(ndir), wrec(ndir), wproj(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    go[d] = grad_outs[d].to(opts).contiguous();
    wrec[d] = weights[4 * d + 1];
    wproj[d] = weights[4 * d + 3];
  }
  const at::Tensor c0 = c0_in.to(opts).contiguous();
  at::Tensor dh = grad_hn.to(opts).clone().contiguous();
  at::Tensor dc = grad_cn.to(opts).clone().contiguous();
  at::Tensor dhp = at::zeros({ndir, T, B, P}, opts);
  // dz a chunk of steps at a time, rows in step order (row (t - t0) * B + b): a
  // step's rows are one (B, 4C) block for its recurrent pass, and the chunk's
  // weight and input gradients are products over its rows once its first step is
  // done. Rows past their length are zeros.
  const int64_t csteps = chunk_steps(B, tmax), crows = csteps * B;
  const at::Tensor dzc = cpu::workspace(kSlotGradZ, {ndir, crows, 4 * C}, dtype);
  std::vector<at::Tensor> x(ndir), dwb(ndir), dxs(ndir);
  for (int64_t d = 0; d < ndir; ++d) {
    x[d] = xs[d].contiguous();
    // (I + P + 1, 4C): the gradients of W_in, W_rec and the bias from one product
    // [x | h_prev | 1]^T dz, 20% faster than two products and a sum at 2560 x 4096; two
    // products into separate outputs (x^T dz, [h_prev | 1]^T dz) took 1.4x as long as this
    // one at the small layer's 640 x 257 x 4096 (each packs dz). Returned by rows (below).
    dwb[d] = at::empty({I + P + 1, 4 * C}, opts);
    dxs[d] = at::empty({B, T, I}, opts);
    zero_past_lengths(dxs[d], 0, 1, lens);
  }
  // The products of the chunk of steps [t0, t1), after its step t0 (the chunks
  // come last first: the first one writes the weight gradients, the others add).
  // The gathers write the first I + P columns of xh_all; its last column stays ones.
  const at::Tensor xh_all = cpu::workspace(kSlotInputRows, {crows, I + P + 1}, dtype);
  const at::Tensor dxc_all = cpu::workspace(kSlotGradInput, {crows, I}, dtype);
  xh_all.select(1, I + P).fill_(1);
  bool first_chunk = true;
  auto chunk_products = [&](int64_t t0, int64_t t1) {
    const int64_t rows = (t1 - t0) * B;
    const at::Tensor xh = xh_all.narrow(0, 0, rows);
    at::Tensor dxc = dxc_all.narrow(0, 0, rows);
    for (int64_t d = 0; d < ndir; ++d) {
      const at::Tensor dz = dzc.select(0, d).narrow(0, 0, rows);
      const bool rev = reverse[d] != 0;
      AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_backward_chunk", [&] {
        scalar_t* r = xh.data_ptr<scalar_t>();
        gather_steps(x[d].data_ptr<scalar_t>(), B, T, I, lens, rev, t0, t1, r, I + P + 1);
        gather_steps(h_prev.select(0, d).data_ptr<scalar_t>(), B, T, P, lens, rev, t0, t1, r + I, I + P + 1);
      });
      if (first_chunk) {
        at::mm_out(dwb[d], xh.t(), dz);
      } else {
        dwb[d].addmm_(xh.t(), dz);
      }
      at::mm_out(dxc, dz, weights[4 * d].t());
      AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_backward_chunk", [&] {
        scatter_steps(dxc.data_ptr<scalar_t>(), I, B, T, I, lens, rev, t0, t1, dxs[d].data_ptr<scalar_t>());
      });
    }
    first_chunk = false;
  };
  at::Tensor dm_buf = at::empty({ndir, B, C}, opts);
  at::Tensor dh_tmp = at::empty({ndir, B, P}, opts);
  const double ccd = cell_clip.has_value() ? *cell_clip : -1.0;
  const double pcd = proj_clip.has_value() ? *proj_clip : -1.0;
  const int64_t nchunk = (C + kChunk - 1) / kChunk;
  const bool use_table = xs[0].scalar_type() == at::kFloat;
  const auto& kt = cpu::kernels();

  if (use_table && kt.step_gates_back != nullptr) {
    // float32: fused backward steps with prepacked transposed weights.
    const int64_t VL = kt.step_vl, pw = 4 * VL;
    const int64_t ncp = (C + pw - 1) / pw;
    const int64_t npp = (P + pw - 1) / pw;
    const int64_t rows_per_task = row_group(B, ndir * npp);
    const int64_t nrg = (B + rows_per_task - 1) / rows_per_task;
    // The weight panel of task k of each pass (a task also names its successor's).
    const int64_t proj_floats = P * pw, rec_floats = 4 * C * pw;
    std::vector<const float*> wpt(ndir), wrt(ndir);
    auto proj_panel = [&](int64_t k) { return wpt[k / ncp] + (k % ncp) * proj_floats; };
    auto rec_panel = [&](int64_t k) { return wrt[k / (npp * nrg)] + ((k / nrg) % npp) * rec_floats; };
    for (int64_t d = 0; d < ndir; ++d) {
      const at::Tensor wp = wproj[d].contiguous(), wr = wrec[d].contiguous();
      float* q = pack_buffer(kSlotProj0 + d, ncp * P * pw);
      pack_row_panels_transposed(wp.data_ptr<float>(), C, P, pw, ncp, q);
      float* r = pack_buffer(kSlotRec0 + d, npp * 4 * C * pw);
      pack_row_panels_transposed(wr.data_ptr<float>(), P, 4 * C, pw, npp, r);
      wpt[d] = q;
      wrt[d] = r;
    }
    float* dhpp = dhp.data_ptr<float>();
    float* dzcp = dzc.data_ptr<float>();
    const float* gp = gates.data_ptr<float>();
    const float* crp = c_raw.data_ptr<float>();
    const float* hrp = hp_raw.data_ptr<float>();
    const float* c0p = c0.data_ptr<float>();
    float* dhs = dh.data_ptr<float>();
    float* dcs = dc.data_ptr<float>();
    const float cc = (float)ccd, pc = (float)pcd;
    auto src_of = [&](int64_t d, int64_t b, int64_t t) { return step_pos(reverse[d], lens[b], t); };
    // dhp of the last step (the following ones come out of the dh pass)
    if (tmax > 0) {
      const int64_t t = tmax - 1;
      for (int64_t d = 0; d < ndir; ++d)
        for (int64_t b = 0; b < B; ++b) {
          if (t >= lens[b]) continue;
          const float* g = go[d].data_ptr<float>() + (b * T + src_of(d, b, t)) * P;
          const float* hr = hrp + ((d * T + t) * B + b) * P;
          float* o = dhpp + ((d * T + t) * B + b) * P;
          for (int64_t p = 0; p < P; ++p) {
            const bool pass = pc < 0.0f || (hr[p] >= -pc && hr[p] <= pc);
            o[p] = pass ? g[p] + dhs[(d * B + b) * P + p] : 0.0f;
          }
        }
    }
    std::vector<const float*> g_rows(ndir * B), cr_rows(ndir * B), cp_rows(ndir * B), go_rows(ndir * B),
        hp_rows(ndir * B);
    std::vector<float*> dhp_rows(ndir * B);
    std::vector<unsigned char> active(ndir * B);
    for (int64_t t = tmax - 1; t >= 0; --t) {
      const int64_t t0 = t / csteps * csteps;
      // this step's dz rows, direction d: dzcp + (d * crows + (t - t0) * B) * 4C
      auto dz_step = [&](int64_t d) { return dzcp + (d * crows + (t - t0) * B) * 4 * C; };
      for (int64_t d = 0; d < ndir; ++d)
        for (int64_t b = 0; b < B; ++b) {
          const int64_t k = d * B + b;
          const bool act = t < lens[b];
          active[k] = act ? 1 : 0;
          if (!act) std::fill(dz_step(d) + b * 4 * C, dz_step(d) + (b + 1) * 4 * C, 0.0f);
          g_rows[k] = act ? gp + ((d * T + t) * B + b) * 4 * C : nullptr;
          cr_rows[k] = crp + ((d * T + t) * B + b) * C;
          cp_rows[k] = t == 0 ? c0p + (d * B + b) * C : crp + ((d * T + t - 1) * B + b) * C;
          const bool prev = t > 0 && t - 1 < lens[b];
          dhp_rows[k] = prev ? dhpp + ((d * T + t - 1) * B + b) * P : nullptr;
          go_rows[k] = prev ? go[d].data_ptr<float>() + (b * T + src_of(d, b, t - 1)) * P : nullptr;
          hp_rows[k] = prev ? hrp + ((d * T + t - 1) * B + b) * P : nullptr;
        }
      cpu::dynamic_for(ndir * ncp, [&](int64_t k, int64_t next) {
        const int64_t d = k / ncp, j = k % ncp;
        cpu::StepGatesBackArgs a;
        a.dhp = dhpp + (d * T + t) * B * P;
        a.B = B;
        a.P = P;
        a.wp = proj_panel(k);
        if (next >= 0) a.wp_next = proj_panel(next);
        a.next_floats = proj_floats;
        a.C = C;
        a.c0 = j * pw;
        a.nc = std::min(pw, C - j * pw);
        a.g_rows = g_rows.data() + d * B;
        a.cr_rows = cr_rows.data() + d * B;
        a.cp_rows = cp_rows.data() + d * B;
        a.prev_is_raw = t > 0 ? 1 : 0;
        a.dc = dcs + d * B * C;
        a.dz = dz_step(d);
        a.cell_clip = cc;
        kt.step_gates_back(a);
      });
      cpu::dynamic_for(ndir * npp * nrg, [&](int64_t k, int64_t next) {
        const int64_t d = k / (npp * nrg), j = (k / nrg) % npp, r0 = (k % nrg) * rows_per_task;
        cpu::StepDhArgs a;
        a.dz = dz_step(d) + r0 * 4 * C;
        a.B = std::min(rows_per_task, B - r0);
        a.K = 4 * C;
        a.wp = rec_panel(k);
        if (next >= 0) a.wp_next = rec_panel(next);
        a.next_floats = rec_floats;
        a.P = P;
        a.p0 = j * pw;
        a.np = std::min(pw, P - j * pw);
        a.active = active.data() + d * B + r0;
        a.dh = dhs + (d * B + r0) * P;
        a.dhp_rows = t > 0 ? dhp_rows.data() + d * B + r0 : nullptr;
        a.go_rows = go_rows.data() + d * B + r0;
        a.hp_rows = hp_rows.data() + d * B + r0;
        a.proj_clip = pc;
        kt.step_dh(a);
      });
      if (t == t0) chunk_products(t0, std::min(tmax, t0 + csteps));
    }
  } else
  AT_DISPATCH_FLOATING_TYPES(xs[0].scalar_type(), "lstm_backward", [&] {
    using T_ = scalar_t;
    const T_ cc = (T_)ccd, pc = (T_)pcd;
    for (int64_t t = tmax - 1; t >= 0; --t) {
      const int64_t t0 = t / csteps * csteps;
      // this step's dz rows: (ndir, B, 4C) with direction stride crows * 4C
      const at::Tensor dz_step = dzc.narrow(1, (t - t0) * B, B);
      // grad at the projected output (output grad + carried state grad), through the clip
      at::parallel_for(0, ndir * B, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t d = k / B, b = k % B;
          if (t >= lens[b]) continue;
          const int64_t src = step_pos(reverse[d], lens[b], t);
          const T_* g = go[d].data_ptr<T_>() + (b * T + src) * P;
          const T_* hr = hp_raw.data_ptr<T_>() + ((d * T + t) * B + b) * P;
          const T_* dhr = dh.data_ptr<T_>() + (d * B + b) * P;
          T_* out = dhp.data_ptr<T_>() + ((d * T + t) * B + b) * P;
          for (int64_t p = 0; p < P; ++p) {
            const bool pass = pc < T_(0) || (hr[p] >= -pc && hr[p] <= pc);
            out[p] = pass ? g[p] + dhr[p] : T_(0);
          }
        }
      });
      for (int64_t d = 0; d < ndir; ++d) {
        at::Tensor dmd = dm_buf.select(0, d);
        at::mm_out(dmd, dhp.select(0, d).select(0, t), wproj[d].t());
      }
      at::parallel_for(0, ndir * B * nchunk, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t d = k / (B * nchunk), b = (k / nchunk) % B, ch = k % nchunk;
          const int64_t cb = ch * kChunk, ce = std::min(C, cb + kChunk);
          T_* dzr = dz_step.select(0, d).select(0, b).data_ptr<T_>();
          if (t >= lens[b]) {
            for (int q = 0; q < 4; ++q) std::fill(dzr + q * C + cb, dzr + q * C + ce, T_(0));
            continue;
          }
          const T_* dmr = dm_buf.data_ptr<T_>() + (d * B + b) * C;
          const T_* gr = gates.data_ptr<T_>() + ((d * T + t) * B + b) * 4 * C;
          const T_* crr = c_raw.data_ptr<T_>() + ((d * T + t) * B + b) * C;
          const T_* cp = t == 0 ? c0.data_ptr<T_>() + (d * B + b) * C
                                : c_raw.data_ptr<T_>() + ((d * T + t - 1) * B + b) * C;
          T_* dcr = dc.data_ptr<T_>() + (d * B + b) * C;
          bool done = false;
          if (use_table) {  // float32: the ISA-dispatched vector kernel
            cpu::GateBackwardArgs a{reinterpret_cast<const float*>(dmr), reinterpret_cast<const float*>(gr),
                                    reinterpret_cast<const float*>(crr), reinterpret_cast<const float*>(cp),
                                    t > 0 ? 1 : 0, reinterpret_cast<float*>(dcr), reinterpret_cast<float*>(dzr),
                                    C, cb, ce, (float)cc};
            kt.gates_backward(a);
            done = true;
          }
          if (!done) gates_backward_generic<T_>(dmr, gr, crr, cp, t > 0, dcr, dzr, C, cb, ce, cc);
        }
      });
      for (int64_t d = 0; d < ndir; ++d) {
        at::Tensor dhd = dh_tmp.select(0, d);
        at::mm_out(dhd, dz_step.select(0, d), wrec[d].t());
      }
      at::parallel_for(0, ndir * B, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t d = k / B, b = k % B;
          if (t >= lens[b]) continue;
          const T_* s = dh_tmp.data_ptr<T_>() + (d * B + b) * P;
          std::copy(s, s + P, dh.data_ptr<T_>() + (d * B + b) * P);
        }
      });
      if (t == t0) chunk_products(t0, std::min(tmax, t0 + csteps));
    }
  });
  std::vector<at::Tensor> dws;
  for (int64_t d = 0; d < ndir; ++d) {
    if (first_chunk) dwb[d].zero_();  // no steps: every length is zero
    // rows of one product, each in a storage of its own: outputs of a custom op must not
    // share one (cpu::own_storage: no copy; copies were estimated at ~20% of the backward)
    dws.push_back(cpu::own_storage(dwb[d].narrow(0, 0, I)));
    dws.push_back(cpu::own_storage(dwb[d].narrow(0, I, P)));
    dws.push_back(cpu::own_storage(dwb[d].select(0, I + P).view(weights[4 * d + 2].sizes())));
    dws.push_back(at::mm(m.select(0, d).reshape({T * B, C}).t(), dhp.select(0, d).reshape({T * B, P})));
    if (residual) {
      at::Tensor valid = at::arange(T, lengths.options()).unsqueeze(0).lt(lengths.unsqueeze(1));
      dxs[d].add_(at::where(valid.unsqueeze(-1), go[d], at::Scalar(0.0)));  // select: inf * 0 is NaN
    }
  }
  return {dxs, dws, dh, dc};
}

}  // namespace spacy_elmo
