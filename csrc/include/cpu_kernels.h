// Raw-pointer CPU compute kernels of spacy_elmo._C, compiled once per ISA
// (baseline: SSE2 on x86-64, NEON on aarch64, whatever 16-byte vectors the
// target has elsewhere; on x86 also AVX2+FMA and AVX-512) and picked at run time.
#pragma once
#include <cstdint>

// The AVX2 / AVX-512 tables (csrc/cpu/isa_avx2.cpp, isa_avx512.cpp) exist on x86
// only; every other target has the baseline table alone.
#if defined(__x86_64__) || defined(__i386__)
#define SPACY_ELMO_X86 1
#else
#define SPACY_ELMO_X86 0
#endif

namespace spacy_elmo {
namespace cpu {

// One filter of the char CNN over a block of tokens (float32).
//   emb:    (ntok, W * D) gathered embeddings of the block, row-major
//   wp:     packed weights (width * D, ldw), wp[(k * D + d) * ldw + f] = W[f][d][k],
//           ldw a multiple of 16 with zero columns past `count`
//   out:    for token t and channel f < count: max over positions of the conv
//           (no bias) at out[t * ldo + f] and its position at arg[t * ldo + f]
//   run:    (ntok,) start of each token's trailing run of one repeated char id
//           (the padding). Every window inside the run sees the same input, so
//           only the first of them is computed: the result, first argmax
//           included, is the one of computing all W - width + 1 windows.
struct CharConvArgs {
  const float* emb;
  int64_t ntok;
  int64_t W;
  int64_t D;
  int64_t width;
  const float* wp;
  int64_t ldw;
  int64_t count;
  float* out;
  int32_t* arg;
  int64_t ldo;
  const int32_t* run;
};

// The char CNN's backward for a block of nf filters of one width over every
// token (float32), in tiles of tokens, each filter's gradient in registers:
//   dw[f] = sum_n g[n][f] * e[n][arg[n][f] * D + k]  (k < K = width * D, written)
//   dpos[n][arg[n][f] * D + k] += g[n][f] * w[f][k]   (accumulated)
// g, arg: (N, ldg), this block's columns; e, dpos: (N, W * D); w, dw: (nf, K)
// in (position, dim) order. A zero g (the activation was off) adds nothing.
struct CharConvBackArgs {
  const float* g;
  const int32_t* arg;
  int64_t ldg;
  int64_t N;
  int64_t nf;
  int64_t K;
  int64_t W;
  int64_t D;
  const float* e;
  const float* w;
  float* dw;
  float* dpos;
};

// One LSTM step's gate math for a range of channels of one row (float32).
//   z: recurrent product (4C), xi: input product + bias + forget bias (4C),
//   c: state in/out (C), gates out (4C: sigmoid(i), tanh(j), sigmoid(f), sigmoid(o)),
//   c_raw out (pre-clip c), m out (sigmoid(o) * tanh(clip(c))).
struct GateArgs {
  const float* z;
  const float* xi;
  float* c;
  float* gates;  // may be null (inference)
  float* c_raw;  // may be null
  float* m;
  int64_t C;
  int64_t c_begin;
  int64_t c_end;
  float cell_clip;  // < 0: none (0 clips every cell to 0)
};

struct GateBackwardArgs {
  const float* dm;      // (C) grad wrt m
  const float* gates;   // (4C)
  const float* c_raw;   // (C) this step's pre-clip cell
  const float* c_prev;  // (C) previous carried cell (already clipped or c0)
  int prev_is_raw;      // 1: c_prev is a pre-clip value that must be clipped
  float* dc;            // (C) carried grad wrt c, in/out
  float* dz;            // (4C) out
  int64_t C;
  int64_t c_begin;
  int64_t c_end;
  float cell_clip;
};

// Fused LSTM step, recurrent product + gates (float32). One call covers one
// panel of `nc` <= step_vl cells for every row: z = h @ W_rec restricted to the
// panel's 4 gate blocks, computed in registers from the packed panel
// wp (P, 4 * step_vl) (wp[k][g * step_vl + u] = W_rec[k][g * C + c0 + u]),
// then the gate math; z never goes to memory.
struct StepGatesArgs {
  const float* h;  // (B, P) state
  int64_t B, P;
  const float* wp;
  int64_t C, c0, nc;
  // Per row: its input products, null when inactive; this panel's gate block g
  // starts at xi_rows[b] + xi_off + g * xi_gs (a (4C) row: c0 and C; the panel
  // layout of panel_gemm: the panel's offset and step_vl).
  const float* const* xi_rows;
  int64_t xi_off, xi_gs;
  // Or, with x set, the input products are computed here with the recurrent
  // ones: x (B, I; row stride ldx) holds the rows' inputs of this step, wp is
  // (I + P, 4 * step_vl), W_in's panel rows first, and xi_rows only mark the
  // active rows (non-null), never read.
  const float* x = nullptr;
  int64_t ldx = 0, I = 0;
  const float* bias;            // (4C) bias, forget bias included (the input products have none)
  float* c;                     // (B, C) cell state, in/out
  float* m;                     // (B, C) out
  float* const* gates_rows;     // per row (4C) or null (no saving)
  float* const* craw_rows;      // per row (C) or null
  float cell_clip;
  const float* wp_next = nullptr;  // the next task's panel (prefetched), or null
  int64_t next_floats = 0;
};

// Fused LSTM step, projection + projection clip + state + residual + output
// scatter for one panel of np <= 4 * step_vl projection columns:
// hp = m @ W_P restricted to the panel, from wp (C, 4 * step_vl).
struct StepProjArgs {
  const float* m;  // (B, C)
  int64_t B, C;
  const float* wp;
  int64_t P, p0, np;
  float* h;                       // (B, P) state, out
  float* const* out_rows;         // per row: its output row (P), null when inactive
  const float* const* res_rows;   // per row: residual input row, or null
  float* const* hp_rows;          // per row: saved pre-clip hp (P), or null
  float proj_clip;
  const float* wp_next = nullptr;  // the next task's panel (prefetched), or null
  int64_t next_floats = 0;
};

// Fused backward step, part 1: dm = dhp @ W_P^T for a panel of nc <= 4 * step_vl
// cells (wp (P, 4 * step_vl), wp[k][u] = W_P[c0 + u][k]) in registers, then the
// gate backward for those cells: dz (this step's rows of the chunk buffer the
// weight-gradient products read), dc.
struct StepGatesBackArgs {
  const float* dhp;  // (B, P) this step's grad wrt the pre-clip projection
  int64_t B, P;
  const float* wp;
  int64_t C, c0, nc;
  const float* const* g_rows;   // per row: saved gates (4C), null when inactive
  const float* const* cr_rows;  // per row: saved c_raw (C)
  const float* const* cp_rows;  // per row: previous cell (C)
  int prev_is_raw;              // previous cell is a saved raw value (clip it)
  float* dc;                    // (B, C) carried grad wrt c
  float* dz;                    // (B, 4C) this step's rows; inactive rows left alone
  float cell_clip;
  const float* wp_next = nullptr;  // the next task's panel (prefetched), or null
  int64_t next_floats = 0;
};

// Fused backward step, part 2: dh_new = dz @ W_rec^T for a panel of np <= 4 *
// step_vl columns (wp (4C, 4 * step_vl), wp[k][u] = W_rec[p0 + u][k]); rows
// active now take it as their carried dh; then the previous step's dhp
// (through the projection clip) for the rows active then.
struct StepDhArgs {
  const float* dz;  // (B, 4C)
  int64_t B, K;
  const float* wp;
  int64_t P, p0, np;
  const unsigned char* active;     // per row: active at this step
  float* dh;                       // (B, P)
  float* const* dhp_rows;          // per row: dhp row of the previous step, null: none
  const float* const* go_rows;     // per row: output grad row of the previous step
  const float* const* hp_rows;     // per row: saved hp_raw row of the previous step
  float proj_clip;
  const float* wp_next = nullptr;  // the next task's panel (prefetched), or null
  int64_t next_floats = 0;
};

// out (rows, 4 * step_vl) = a (rows, K; row stride lda) @ wp (K, 4 * step_vl), a
// packed panel as the recurrent weights' (one matrix product's panel of columns).
struct PanelGemmArgs {
  const float* a;
  int64_t lda, rows, K;
  const float* wp;
  float* out;
};

struct KernelTable {
  const char* name;
  void (*char_conv)(const CharConvArgs&);
  void (*char_conv_back)(const CharConvBackArgs&);
  void (*gates_forward)(const GateArgs&);
  void (*gates_backward)(const GateBackwardArgs&);
  // y = g * relu(t) + (1 - g) * x over n elements of a row; h = [t | carry] pre-activations
  void (*highway_epilogue)(const float* h_t, const float* h_g, const float* x, float* y, int64_t n);
  void (*highway_backward)(const float* dy, const float* h_t, const float* h_g, const float* x,
                           float* dh_t, float* dh_g, float* dx, int64_t n);
  int64_t step_vl;  // cells per gate panel (the vector width in floats)
  void (*step_gates)(const StepGatesArgs&);
  void (*step_proj)(const StepProjArgs&);
  void (*step_gates_back)(const StepGatesBackArgs&);
  void (*step_dh)(const StepDhArgs&);
  // One sampled-softmax row in place: x (S) products -> softmax(x + off), column
  // `hit` (-1: none) removed; *lse = the row's log-sum-exp.
  void (*softmax_row)(float* x, int64_t S, const float* off, int64_t hit, float* lse);
  void (*panel_gemm)(const PanelGemmArgs&);
};

const KernelTable& kernels();  // the best table for this CPU

}  // namespace cpu
}  // namespace spacy_elmo

#ifdef SE_WITH_ATEN_PARALLEL
#include <ATen/Parallel.h>

#include <atomic>
#include <vector>

namespace spacy_elmo {
namespace cpu {

// Tasks 0..n-1 over the thread team. Thread i owns the i-th contiguous share
// and runs it front to back: the same tasks every call with the same n and
// team, so the state a task of a step loop updates (an LSTM panel's cell and
// output rows) stays in one core's cache from step to step instead of moving
// between cores. A thread done with its share then takes what is left of the
// others' (from a shared cursor per share), so a core busy with another
// process hands its work over instead of holding the team up. fn(k, next) also
// learns the task its thread runs after k (-1: not known), so it can prefetch
// that task's data while it works on k.
template <typename Fn>
inline void dynamic_for(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  struct alignas(64) Share {  // one cache line each: no false sharing of cursors
    std::atomic<int64_t> next;
    int64_t end;
  };
  const int64_t team = std::min<int64_t>(at::get_num_threads(), n);
  std::vector<Share> shares(team);
  for (int64_t i = 0; i < team; ++i) {
    shares[i].next.store(i * n / team, std::memory_order_relaxed);
    shares[i].end = (i + 1) * n / team;
  }
  at::parallel_for(0, team, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t s = 0; s < team; ++s) {  // its own share first
        Share& sh = shares[(i + s) % team];
        int64_t k = sh.next.fetch_add(1, std::memory_order_relaxed);
        while (k < sh.end) {
          const int64_t after = sh.next.fetch_add(1, std::memory_order_relaxed);
          fn(k, after < sh.end ? after : int64_t(-1));
          k = after;
        }
      }
  });
}

}  // namespace cpu
}  // namespace spacy_elmo
#endif

namespace spacy_elmo {
namespace cpu {

namespace isa_base { extern const KernelTable table; }
#if SPACY_ELMO_X86
namespace isa_avx2 { extern const KernelTable table; }
namespace isa_avx512 { extern const KernelTable table; }
#endif

}  // namespace cpu
}  // namespace spacy_elmo
