// Body of the per-ISA CPU kernels. Included by csrc/cpu/isa_*.cpp after
// `#pragma GCC target(...)` (clang: `#pragma clang attribute`), with SE_NS (namespace), SE_VBYTES (vector bytes),
// SE_PT (positions per conv tile) and SE_NVMAX (vectors per channel block)
// defined. Only raw pointers here, no ATen: every function compiles for the
// target ISA of the including file.
//
// Exactness: exp/tanh/sigmoid use Cephes-style polynomials (about 2 ulp in
// float32), far inside the project's 1e-5 tolerance against a float64 oracle.

// Wider than 16 bytes only where the x86 intrinsics below (SE_VBYTES 32 / 64)
// exist; the 16-byte base table uses GCC vector extensions alone (SSE2, NEON, ...).
#if SE_VBYTES > 16 && !SPACY_ELMO_X86
#error "SE_VBYTES > 16 uses x86 intrinsics: x86 targets only"
#endif

namespace spacy_elmo {
namespace cpu {
namespace SE_NS {

#define SE_VL (SE_VBYTES / 4)
typedef float vf __attribute__((vector_size(SE_VBYTES)));
typedef int32_t vi __attribute__((vector_size(SE_VBYTES)));

// Cephes float32 exp and tanh coefficients, shared by the scalar forms here
// (vectorised by the compiler) and the N-vector forms of "vector math" below.
constexpr float kExpLo = -87.3f, kExpHi = 88.3f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = kLn2Hi - kLn2Lo
constexpr int kExpDegree = 6;
constexpr float kExpP[kExpDegree] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
constexpr int kTanhDegree = 5;
constexpr float kTanhP[kTanhDegree] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                                       1.33314422036e-1f, -3.33332819422e-1f};
constexpr float kTanhSmall = 0.625f;  // below: the odd polynomial, above: via exp

static inline float se_exp(float x) {
  x = x < kExpLo ? kExpLo : x;
  x = x > kExpHi ? kExpHi : x;
  float fx = x * kLog2e + 0.5f;
  int32_t n = (int32_t)fx;
  n -= (int32_t)(fx < (float)n);  // floor
  float fn = (float)n;
  float r = x - fn * kLn2Hi;
  r = r - fn * kLn2Lo;
  float y = kExpP[0];
  for (int k = 1; k < kExpDegree; ++k) y = y * r + kExpP[k];
  y = y * r * r + r + 1.0f;
  int32_t bits = (n + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return y * scale;
}

static inline float se_sigmoid(float x) { return 1.0f / (1.0f + se_exp(-x)); }

static inline float se_tanh(float x) {
  float ax = x < 0.0f ? -x : x;
  float z = x * x;
  float p = kTanhP[0];
  for (int k = 1; k < kTanhDegree; ++k) p = p * z + kTanhP[k];
  float small = p * z * x + x;
  float e = se_exp(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < kTanhSmall ? small : big;
}

// ---------------------------------------------------------------- vector math
//
// The same polynomials on N whole vectors at once, for the LSTM step epilogue.
// Each function runs its N vectors in lockstep (every line a loop over the N):
// one vector's sigmoid -> cell -> tanh chain is ~170 cycles of dependent
// latency for ~50 cycles of work, and the scalar forms, vectorised by the
// compiler one row at a time, left the vector units mostly idle. 1/x is the
// hardware estimate refined by Newton steps (AVX-512: 14 bits, one step; AVX2:
// 12 bits, two steps), about 1 ulp, inside the tolerance above; every x it gets
// is >= 1 (1 + exp(.)), so no zero, infinity or flushed result arises.
#define SE_EACH _Pragma("GCC unroll 8") for (int i = 0; i < N; ++i)

static inline vf se_vset(float x) { return (vf){} + x; }

static inline vf se_vload(const float* p) {
  vf v;
  __builtin_memcpy(&v, p, sizeof(vf));
  return v;
}

static inline void se_vstore(float* p, vf v) { __builtin_memcpy(p, &v, sizeof(vf)); }

// A store of a value nothing reads again in this pass (what a training forward
// saves for its backward, the backward's dz in position order): non-temporal
// where the address is vector-aligned, so the line is written without first
// being read in (half the memory traffic of a plain store to a cold line) and
// does not push the step's working set out of the caches. The saved tensors are
// 64-byte aligned (c10's CPU allocator) and their panel offsets are whole vectors.
static inline void se_vstream(float* p, vf v) {
#if SE_VBYTES == 64
  if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) return _mm512_stream_ps(p, (__m512)v);
#elif SE_VBYTES == 32
  if ((reinterpret_cast<uintptr_t>(p) & 31) == 0) return _mm256_stream_ps(p, (__m256)v);
#endif
  se_vstore(p, v);
}

// Orders a task's streamed stores before the stores that publish its end (the
// task loop's counters), so that the thread reading them next sees them.
static inline void se_stream_fence() {
#if SE_VBYTES >= 32
  _mm_sfence();
#endif
}

static inline vf se_vsel(vi mask, vf a, vf b) { return mask ? a : b; }

// The AVX-512 intrinsics are used in their all-lanes masked form: GCC 12's plain
// forms start from _mm512_undefined_ps() and warn that it may be uninitialised.
#define SE_ALL ((__mmask16)0xffff)

template <int N>
static inline void se_vrcp(vf* x) {
#if SE_VBYTES == 64
  vf r[N];
  SE_EACH r[i] = (vf)_mm512_mask_rcp14_ps((__m512)x[i], SE_ALL, (__m512)x[i]);
  SE_EACH x[i] = r[i] * (2.0f - x[i] * r[i]);
#elif SE_VBYTES == 32
  vf r[N];
  SE_EACH r[i] = (vf)_mm256_rcp_ps((__m256)x[i]);
  SE_EACH r[i] = r[i] * (2.0f - x[i] * r[i]);
  SE_EACH x[i] = r[i] * (2.0f - x[i] * r[i]);
#else
  SE_EACH x[i] = 1.0f / x[i];
#endif
}

template <int N>
static inline void se_vexp(vf* x) {
  vf fn[N], r[N], y[N];
  SE_EACH x[i] = se_vsel(x[i] < kExpLo, se_vset(kExpLo), x[i]);
  SE_EACH x[i] = se_vsel(x[i] > kExpHi, se_vset(kExpHi), x[i]);
  SE_EACH fn[i] = x[i] * kLog2e + 0.5f;
#if SE_VBYTES == 64
  SE_EACH fn[i] = (vf)_mm512_mask_roundscale_ps((__m512)fn[i], SE_ALL, (__m512)fn[i],
                                                 _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
#elif SE_VBYTES == 32
  SE_EACH fn[i] = (vf)_mm256_floor_ps((__m256)fn[i]);
#else
  SE_EACH {
    vi n = __builtin_convertvector(fn[i], vi);
    n += (vi)(fn[i] < __builtin_convertvector(n, vf));  // floor: true is -1
    fn[i] = __builtin_convertvector(n, vf);
  }
#endif
  SE_EACH r[i] = x[i] - fn[i] * kLn2Hi;
  SE_EACH r[i] = r[i] - fn[i] * kLn2Lo;
  SE_EACH y[i] = se_vset(kExpP[0]);
  for (int k = 1; k < kExpDegree; ++k) SE_EACH y[i] = y[i] * r[i] + kExpP[k];
  SE_EACH y[i] = y[i] * r[i] * r[i] + r[i] + 1.0f;
#if SE_VBYTES == 64
  SE_EACH x[i] = (vf)_mm512_mask_scalef_ps((__m512)y[i], SE_ALL, (__m512)y[i], (__m512)fn[i]);  // y * 2^fn
#else
  SE_EACH x[i] = y[i] * (vf)((__builtin_convertvector(fn[i], vi) + 127) << 23);
#endif
}

template <int N>
static inline void se_vsigmoid(vf* x) {
  SE_EACH x[i] = -x[i];
  se_vexp<N>(x);
  SE_EACH x[i] = 1.0f + x[i];
  se_vrcp<N>(x);
}

template <int N>
static inline void se_vtanh(vf* x) {
  vf ax[N], small[N], e[N];
  SE_EACH ax[i] = se_vsel(x[i] < 0.0f, -x[i], x[i]);
  SE_EACH {
    const vf z = x[i] * x[i];
    vf p = se_vset(kTanhP[0]);
    for (int k = 1; k < kTanhDegree; ++k) p = p * z + kTanhP[k];
    small[i] = p * z * x[i] + x[i];
  }
  SE_EACH e[i] = 2.0f * ax[i];
  se_vexp<N>(e);
  SE_EACH e[i] = e[i] + 1.0f;
  se_vrcp<N>(e);
  SE_EACH {
    vf big = 1.0f - 2.0f * e[i];
    big = se_vsel(x[i] < 0.0f, -big, big);
    x[i] = se_vsel(ax[i] < kTanhSmall, small[i], big);
  }
}

#undef SE_EACH
#undef SE_ALL

static inline vf se_vclip(vf x, vf lo, vf hi) {
  x = se_vsel(x < lo, lo, x);
  return se_vsel(x > hi, hi, x);
}

// clip to [lo, hi] (lo = -inf, hi = +inf: no clip), branch-free
static inline float se_clip(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

static inline float se_hi(float clip) { return clip < 0.0f ? __builtin_inff() : clip; }

// ---------------------------------------------------------------- char CNN

template <int PT, int NV>
static inline void conv_tile(const float* e, int64_t D, const float* wp, int64_t ldw, int64_t K, int32_t p0,
                             vf* mx, vi* ix) {
  vf acc[PT][NV];
#pragma GCC unroll 16
  for (int p = 0; p < PT; ++p)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[p][v] = (vf){};
  const float* ep = e + (int64_t)p0 * D;
  for (int64_t r = 0; r < K; ++r) {
    vf w[NV];
    const float* wr = wp + r * ldw;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) __builtin_memcpy(&w[v], wr + v * SE_VL, sizeof(vf));
#pragma GCC unroll 16
    for (int p = 0; p < PT; ++p) {
      const float a = ep[p * D + r];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[p][v] += a * w[v];
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < PT; ++p) {
    const vi pos = (vi){} + (p0 + p);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      // a tie keeps the first position (strict >), the reference's argmax; a NaN never wins, but no
      // window is NaN here: tokens and filters that could give one take the generic path
      // (csrc/cpu/char_cnn.cpp, forward_float)
      vi gt = acc[p][v] > mx[v];
      mx[v] = gt ? acc[p][v] : mx[v];
      ix[v] = gt ? pos : ix[v];
    }
  }
}

template <int NV>
static void conv_block(const CharConvArgs& a, int64_t f0) {
  const int64_t K = a.width * a.D;
  const int32_t npos_all = (int32_t)(a.W - a.width + 1);
  const float* wp = a.wp + f0;
  for (int64_t t = 0; t < a.ntok; ++t) {
    const float* e = a.emb + t * a.W * a.D;
    // windows past the first one inside the trailing run repeat it exactly;
    // at least one whole tile when there is room (every extra window is real)
    int32_t npos = a.run[t] + 1 < npos_all ? a.run[t] + 1 : npos_all;
    if (npos < SE_PT) npos = npos_all < SE_PT ? npos_all : SE_PT;
    vf mx[NV];
    vi ix[NV];
    for (int v = 0; v < NV; ++v) {
      mx[v] = (vf){} - __builtin_inff();
      ix[v] = (vi){};
    }
    if (npos >= SE_PT) {
      int32_t p0 = 0;
      for (; p0 + SE_PT <= npos; p0 += SE_PT) conv_tile<SE_PT, NV>(e, a.D, wp, a.ldw, K, p0, mx, ix);
      if (p0 < npos) conv_tile<SE_PT, NV>(e, a.D, wp, a.ldw, K, npos - SE_PT, mx, ix);
    } else {
      for (int32_t p0 = 0; p0 < npos; ++p0) conv_tile<1, NV>(e, a.D, wp, a.ldw, K, p0, mx, ix);
    }
    float* out = a.out + t * a.ldo + f0;
    int32_t* arg = a.arg + t * a.ldo + f0;
    const int64_t nvalid = a.count - f0 < NV * SE_VL ? a.count - f0 : NV * SE_VL;
    float mxs[NV * SE_VL];
    int32_t ixs[NV * SE_VL];
    __builtin_memcpy(mxs, mx, sizeof(mx));
    __builtin_memcpy(ixs, ix, sizeof(ix));
    for (int64_t f = 0; f < nvalid; ++f) {
      out[f] = mxs[f];
      arg[f] = ixs[f];
    }
  }
}

static void char_conv(const CharConvArgs& a) {
  int64_t f0 = 0;
  while (f0 < a.count) {
    const int64_t left = a.ldw - f0;  // whole vectors (ldw is a multiple of 16)
    if (left >= SE_NVMAX * SE_VL) {
      conv_block<SE_NVMAX>(a, f0);
      f0 += SE_NVMAX * SE_VL;
    } else if (SE_NVMAX > 2 && left >= 3 * SE_VL) {
      conv_block<(SE_NVMAX > 2 ? 3 : 1)>(a, f0);
      f0 += (SE_NVMAX > 2 ? 3 : 1) * SE_VL;
    } else if (left >= 2 * SE_VL) {
      conv_block<2>(a, f0);
      f0 += 2 * SE_VL;
    } else {
      conv_block<1>(a, f0);
      f0 += SE_VL;
    }
  }
}

// ---------------------------------------------------------------- char CNN backward

// One filter over the tokens listed in `rows` (those where its gradient is not
// zero), its K = NV vectors of gradient in registers; consecutive tokens touch
// different dpos rows, so the updates do not wait on each other's stores.
template <int NV>
static inline void conv_back_filter(const CharConvBackArgs& a, int64_t f, const int32_t* rows, int64_t nrows) {
  const int64_t WD = a.W * a.D;
  const float* wk = a.w + f * a.K;
  vf acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = se_vload(a.dw + f * a.K + v * SE_VL);
  for (int64_t i = 0; i < nrows; ++i) {
    const int64_t n = rows[i];
    const float gv = a.g[n * a.ldg + f];
    const int64_t off = n * WD + a.arg[n * a.ldg + f] * a.D;
    const float* ew = a.e + off;
    float* dp = a.dpos + off;
    const vf gvv = se_vset(gv);
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      acc[v] += gvv * se_vload(ew + v * SE_VL);
      se_vstore(dp + v * SE_VL, se_vload(dp + v * SE_VL) + gvv * se_vload(wk + v * SE_VL));
    }
  }
  for (int v = 0; v < NV; ++v) se_vstore(a.dw + f * a.K + v * SE_VL, acc[v]);
}

static inline void conv_back_filter_any(const CharConvBackArgs& a, int64_t f, const int32_t* rows, int64_t nrows) {
  const int64_t K = a.K, WD = a.W * a.D;
  float* dw = a.dw + f * K;
  const float* wk = a.w + f * K;
  for (int64_t i = 0; i < nrows; ++i) {
    const int64_t n = rows[i];
    const float gv = a.g[n * a.ldg + f];
    const int64_t off = n * WD + a.arg[n * a.ldg + f] * a.D;
    for (int64_t r = 0; r < K; ++r) {
      dw[r] += gv * a.e[off + r];
      a.dpos[off + r] += gv * wk[r];
    }
  }
}

// Tokens in tiles of 8 (their embedded characters and position gradients, 51 KB
// for W = 50, D = 16, stay near L1 while every filter of the block runs over
// them; 8 to 256 measured within 10% of each other).
constexpr int64_t kConvBackTokens = 8;

static void char_conv_back(const CharConvBackArgs& a) {
  int32_t rows[kConvBackTokens];
  for (int64_t i = 0; i < a.nf * a.K; ++i) a.dw[i] = 0.0f;
  for (int64_t n0 = 0; n0 < a.N; n0 += kConvBackTokens) {
    const int64_t n1 = a.N - n0 < kConvBackTokens ? a.N : n0 + kConvBackTokens;
    for (int64_t f = 0; f < a.nf; ++f) {
      // The tile's tokens whose gradient is not zero (about half, after a ReLU),
      // listed without branches; the update loop then runs without mispredictions.
      int64_t nrows = 0;
      for (int64_t n = n0; n < n1; ++n) {
        rows[nrows] = (int32_t)n;
        nrows += a.g[n * a.ldg + f] != 0.0f;
      }
      switch (a.K % SE_VL == 0 ? a.K / SE_VL : 0) {
#define SE_CASE(nv) case nv: conv_back_filter<nv>(a, f, rows, nrows); break;
        SE_CASE(1) SE_CASE(2) SE_CASE(3) SE_CASE(4) SE_CASE(5) SE_CASE(6) SE_CASE(7) SE_CASE(8)
        SE_CASE(9) SE_CASE(10) SE_CASE(11) SE_CASE(12) SE_CASE(13) SE_CASE(14)
#undef SE_CASE
        default: conv_back_filter_any(a, f, rows, nrows);
      }
    }
  }
}

// ---------------------------------------------------------------- LSTM gates

template <bool SAVE>
static inline void gates_forward_impl(const GateArgs& a) {
  const int64_t C = a.C;
  const float* z = a.z;
  const float* xi = a.xi;
  float* cst = a.c;
  float* g = a.gates;
  float* craw = a.c_raw;
  float* m = a.m;
  const float hi = se_hi(a.cell_clip), lo = -hi;
#pragma omp simd
  for (int64_t c = a.c_begin; c < a.c_end; ++c) {
    const float si = se_sigmoid(z[c] + xi[c]);
    const float tj = se_tanh(z[C + c] + xi[C + c]);
    const float sf = se_sigmoid(z[2 * C + c] + xi[2 * C + c]);
    const float so = se_sigmoid(z[3 * C + c] + xi[3 * C + c]);
    const float cr = sf * cst[c] + si * tj;
    const float cn = se_clip(cr, lo, hi);
    cst[c] = cn;
    m[c] = so * se_tanh(cn);
    if (SAVE) {
      g[c] = si;
      g[C + c] = tj;
      g[2 * C + c] = sf;
      g[3 * C + c] = so;
      craw[c] = cr;
    }
  }
}

static void gates_forward(const GateArgs& a) {
  if (a.gates) gates_forward_impl<true>(a);
  else gates_forward_impl<false>(a);
}

static void gates_backward(const GateBackwardArgs& a) {
  const int64_t C = a.C;
  const float* g = a.gates;
  const float hi = se_hi(a.cell_clip), lo = -hi;
  // without a clip every cell passes, a NaN one too (the bounds test alone is false at NaN)
  const int no_clip = a.cell_clip < 0.0f;
  const float* cp = a.c_prev;
  // the previous cell is clipped when it is a raw saved value (no-op bounds otherwise)
  const float phi = a.prev_is_raw ? hi : __builtin_inff(), plo = -phi;
#pragma omp simd
  for (int64_t c = a.c_begin; c < a.c_end; ++c) {
    const float si = g[c], tj = g[C + c], sf = g[2 * C + c], so = g[3 * C + c];
    const float cr = a.c_raw[c];
    const float cn = se_clip(cr, lo, hi);
    const float tc = se_tanh(cn);
    const float dm = a.dm[c];
    const float d_o = dm * tc * so * (1.0f - so);
    float dcn = a.dc[c] + dm * so * (1.0f - tc * tc);
    const int pass = no_clip | ((int)(cr >= lo) & (int)(cr <= hi));
    const float dcr = pass ? dcn : 0.0f;
    const float cprev = se_clip(cp[c], plo, phi);
    a.dz[c] = dcr * tj * si * (1.0f - si);
    a.dz[C + c] = dcr * si * (1.0f - tj * tj);
    a.dz[2 * C + c] = dcr * cprev * sf * (1.0f - sf);
    a.dz[3 * C + c] = d_o;
    a.dc[c] = dcr * sf;
  }
}

// ---------------------------------------------------------------- highway

// relu as `v < 0 ? 0 : v`, so that a NaN stays NaN (torch.relu's); its gradient passes at a NaN
// (torch's `v <= 0 ? 0 : grad`)
static void highway_epilogue(const float* ht, const float* hg, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const float t = ht[k] < 0.0f ? 0.0f : ht[k];
    const float g = se_sigmoid(hg[k]);
    y[k] = g * t + (1.0f - g) * x[k];
  }
}

static void highway_backward(const float* dy, const float* ht, const float* hg, const float* x, float* dht,
                             float* dhg, float* dx, int64_t n) {
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const float t = ht[k] < 0.0f ? 0.0f : ht[k];
    const float g = se_sigmoid(hg[k]);
    dht[k] = ht[k] <= 0.0f ? 0.0f : dy[k] * g;
    dhg[k] = dy[k] * (t - x[k]) * g * (1.0f - g);
    dx[k] = dy[k] * (1.0f - g);
  }
}

// ---------------------------------------------------------------- sampled softmax

// One row of the sampled softmax, in place: x (S) holds the products h . w_s of
// the S candidates and becomes softmax(x + off) with column `hit` removed (the
// row's own target drawn as a candidate; -1: none); *lse gets that row's
// log-sum-exp. As in the reference, the removed column is the lowest float
// before the exp: exactly 0 after it unless it is the whole row (then 1, and
// lse the lowest float). The row is 32 KB at S = 8192, so the passes after the
// first run in L1/L2.
static void softmax_row(float* x, int64_t S, const float* off, int64_t hit, float* lse) {
  constexpr int NV = 4;
  constexpr float kLowest = -__FLT_MAX__;
  int64_t s = 0;
  for (; s + SE_VL <= S; s += SE_VL) se_vstore(x + s, se_vload(x + s) + se_vload(off + s));
  for (; s < S; ++s) x[s] += off[s];
  if (hit >= 0) x[hit] = kLowest;
  vf top[NV];
  for (int i = 0; i < NV; ++i) top[i] = se_vset(kLowest);
  for (s = 0; s + NV * SE_VL <= S; s += NV * SE_VL) for (int i = 0; i < NV; ++i) {
      const vf v = se_vload(x + s + i * SE_VL);
      top[i] = se_vsel(v > top[i], v, top[i]);
    }
  float m = kLowest;
  for (int i = 0; i < NV; ++i)
    for (int l = 0; l < SE_VL; ++l) m = top[i][l] > m ? top[i][l] : m;
  for (int64_t t = s; t < S; ++t) m = x[t] > m ? x[t] : m;
  vf acc[NV];
  for (int i = 0; i < NV; ++i) acc[i] = se_vset(0.0f);
  for (s = 0; s + NV * SE_VL <= S; s += NV * SE_VL) {
    vf v[NV];
    for (int i = 0; i < NV; ++i) v[i] = se_vload(x + s + i * SE_VL) - m;
    se_vexp<NV>(v);
    for (int i = 0; i < NV; ++i) {
      se_vstore(x + s + i * SE_VL, v[i]);
      acc[i] += v[i];
    }
  }
  float total = 0.0f;
  for (int64_t t = s; t < S; ++t) {
    x[t] = se_exp(x[t] - m);
    total += x[t];
  }
  for (int i = 0; i < NV; ++i) for (int l = 0; l < SE_VL; ++l) total += acc[i][l];
  // exp clamps its argument at kExpLo, so a removed column came out ~1e-38, not 0.
  if (hit >= 0 && m > kLowest) {
    total -= x[hit];
    x[hit] = 0.0f;
  }
  const vf inv = se_vset(1.0f / total);
  for (s = 0; s + SE_VL <= S; s += SE_VL) se_vstore(x + s, se_vload(x + s) * inv);
  for (; s < S; ++s) x[s] *= inv[0];
  *lse = m + __builtin_logf(total);
}

// ---------------------------------------------------------------- fused LSTM step

// The next task's weight panel, prefetched into L2 one cache line per k of the
// current task's tiles, so that the panel is on chip when its task starts
// (the weights live in L3 or memory and a cold panel otherwise stalls its
// first row tile). Capped so that it cannot push the current panel out of L2.
struct Ahead {
  const char* p;
  int64_t lines;
  static Ahead of(const float* next, int64_t floats) {
    constexpr int64_t kMaxLines = (512 << 10) / 64;
    if (next == nullptr) return {nullptr, 0};
    const int64_t lines = (floats * 4 + 63) / 64;
    return {reinterpret_cast<const char*>(next), lines < kMaxLines ? lines : kMaxLines};
  }
};

// Prefetch into L2 the lines row + off + g * stride (g < ngroups) of every
// non-null row: the rows a task's epilogue reads (input products, saved gates)
// were written long before and have left the caches; fetched before the task's
// GEMM, they arrive while it runs instead of stalling the gate math.
template <typename Ptr>
static inline void prefetch_rows(const Ptr* rows, int64_t n, int64_t off, int64_t stride, int ngroups) {
  for (int64_t b = 0; b < n; ++b) {
    if (rows[b] == nullptr) continue;
    for (int g = 0; g < ngroups; ++g) __builtin_prefetch(rows[b] + off + g * stride, 0, 2);
  }
}

// acc (R rows x 4 vectors) = A[rows, 0:K] @ Bp (K, 4 * VL) (+ out when `add`),
// stored to out (R, 4 * VL)
template <int R>
static inline void gemm_tile4(const float* A, int64_t lda, const float* Bp, int64_t K, float* out, Ahead& pf,
                              bool add) {
  vf acc[R][4];
#pragma GCC unroll 8
  for (int p = 0; p < R; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      acc[p][v] = (vf){};
      if (add) __builtin_memcpy(&acc[p][v], out + (p * 4 + v) * SE_VL, sizeof(vf));
    }
  const int64_t npf = K < pf.lines ? K : pf.lines;
  const char* pfp = pf.p;
  for (int64_t k = 0; k < K; ++k) {
    if (k < npf) __builtin_prefetch(pfp + k * 64, 0, 2);
    vf w[4];
    const float* wr = Bp + k * 4 * SE_VL;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) __builtin_memcpy(&w[v], wr + v * SE_VL, sizeof(vf));
#pragma GCC unroll 8
    for (int p = 0; p < R; ++p) {
      const float a = A[p * lda + k];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[p][v] += a * w[v];
    }
  }
  pf.p += npf * 64;
  pf.lines -= npf;
#pragma GCC unroll 8
  for (int p = 0; p < R; ++p)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) __builtin_memcpy(out + (p * 4 + v) * SE_VL, &acc[p][v], sizeof(vf));
}

static inline void gemm_rows4(const float* A, int64_t lda, const float* Bp, int64_t K, int64_t rows, float* out,
                              Ahead& pf, bool add) {
  switch (rows) {
#define SE_CASE(n) case n: gemm_tile4<(n <= SE_STEP_PT ? n : 1)>(A, lda, Bp, K, out, pf, add); break;
    SE_CASE(1) SE_CASE(2) SE_CASE(3) SE_CASE(4) SE_CASE(5) SE_CASE(6) SE_CASE(7) SE_CASE(8)
#undef SE_CASE
    default: break;
  }
}

// Row tiles of at most SE_STEP_PT rows; a short last tile is merged with the one
// before and split evenly (32 rows, PT 6: 6,6,6,6,4,4 instead of ...,6,2).
static inline int64_t tile_rows(int64_t r0, int64_t B) {
  const int64_t left = B - r0;
  if (left <= SE_STEP_PT) return left;
  if (left < 2 * SE_STEP_PT) return (left + 1) / 2;
  return SE_STEP_PT;
}

// Rows of one pass over a panel, and the panel rows (k) per block of that pass
// (a panel of at most 2 * kKBlock rows, 32 KB with AVX-512, stays in L1 whole).
constexpr int64_t kChunkRows = 8 * SE_STEP_PT;
constexpr int64_t kKBlock = 64;

// out (rows, 4 * VL) = A[0:rows, 0:K] @ Bp (K, 4 * VL) (+ out when `add`) for rows <= kChunkRows,
// skipping the row tiles for which active(r0, n) is false (their out rows are
// left as they were). A long K is blocked: a (kKBlock, 4 * VL) slice of the panel
// (16 KB with AVX-512) is read from L2 once and used by every row tile while
// it sits in L1, the partial sums going through `out` (L1 too); without the
// blocking each tile streamed the whole panel from L2 again.
template <typename Active>
static inline void gemm_chunk(const float* A, int64_t lda, const float* Bp, int64_t K, int64_t rows,
                              const Active& active, float* out, Ahead& pf, bool add = false) {
  int64_t t0[kChunkRows], tn[kChunkRows];
  int nt = 0;
  for (int64_t r0 = 0, n = 0; r0 < rows; r0 += n) {
    n = tile_rows(r0, rows);
    if (active(r0, n)) {
      t0[nt] = r0;
      tn[nt++] = n;
    }
  }
  const int64_t kb = K <= 2 * kKBlock ? K : kKBlock;
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kn = K - k0 < kb ? K - k0 : kb;
    for (int i = 0; i < nt; ++i)
      gemm_rows4(A + t0[i] * lda + k0, lda, Bp + k0 * 4 * SE_VL, kn, tn[i], out + t0[i] * 4 * SE_VL, pf, add || k0 > 0);
  }
}

// active(r0, n) for gemm_chunk: any of rows[r0 .. r0 + n) is set (a non-null
// row pointer, a non-zero flag).
template <typename T>
struct AnyRow {
  const T* rows;
  bool operator()(int64_t r0, int64_t n) const {
    for (int64_t p = 0; p < n; ++p)
      if (rows[r0 + p]) return true;
    return false;
  }
};

// The gate epilogue of kCellRows rows of a whole panel (chunk rows ps[], z their
// recurrent products, or with XI false their recurrent and input products), the rows in lockstep (see "vector math"). A group short
// of rows repeats its last one: every load of the group comes before its
// stores, so a repeated row stores the same values twice.
constexpr int kCellRows = 4;

template <bool XI>
static inline void cell_rows(const StepGatesArgs& a, int64_t r0, const int64_t* ps, const float* z, const vf* bv,
                             vf vlo, vf vhi) {
  constexpr int N = kCellRows;
  const int64_t C = a.C, c0 = a.c0;
  const float* xi[N];
  float* cst[N];
  vf si[N], tj[N], sf[N], so[N], cr[N], tc[N];
  const int64_t gs = a.xi_gs;
  for (int n = 0; n < N; ++n) {
    cst[n] = a.c + (r0 + ps[n]) * C + c0;
    const float* zr = z + ps[n] * 4 * SE_VL;
    if (XI) {
      xi[n] = a.xi_rows[r0 + ps[n]] + a.xi_off;
      si[n] = se_vload(zr) + (se_vload(xi[n]) + bv[0]);
      tj[n] = se_vload(zr + SE_VL) + (se_vload(xi[n] + gs) + bv[1]);
      sf[n] = se_vload(zr + 2 * SE_VL) + (se_vload(xi[n] + 2 * gs) + bv[2]);
      so[n] = se_vload(zr + 3 * SE_VL) + (se_vload(xi[n] + 3 * gs) + bv[3]);
    } else {
      si[n] = se_vload(zr) + bv[0];
      tj[n] = se_vload(zr + SE_VL) + bv[1];
      sf[n] = se_vload(zr + 2 * SE_VL) + bv[2];
      so[n] = se_vload(zr + 3 * SE_VL) + bv[3];
    }
    cr[n] = se_vload(cst[n]);
  }
  se_vsigmoid<N>(si);
  se_vtanh<N>(tj);
  se_vsigmoid<N>(sf);
  se_vsigmoid<N>(so);
  for (int n = 0; n < N; ++n) {
    cr[n] = sf[n] * cr[n] + si[n] * tj[n];
    tc[n] = se_vclip(cr[n], vlo, vhi);
    se_vstore(cst[n], tc[n]);
  }
  se_vtanh<N>(tc);
  for (int n = 0; n < N; ++n) {
    const int64_t b = r0 + ps[n];
    se_vstore(a.m + b * C + c0, so[n] * tc[n]);
    if (a.gates_rows) {
      float* g = a.gates_rows[b] + c0;
      se_vstream(g, si[n]);
      se_vstream(g + C, tj[n]);
      se_vstream(g + 2 * C, sf[n]);
      se_vstream(g + 3 * C, so[n]);
      se_vstream(a.craw_rows[b] + c0, cr[n]);
    }
  }
}

static void step_gates(const StepGatesArgs& a) {
  const int64_t C = a.C, c0 = a.c0, nc = a.nc;
  const float* bi = a.bias + c0;
  const float hi = se_hi(a.cell_clip), lo = -hi;
  const vf vhi = se_vset(hi), vlo = se_vset(lo);
  vf bv[4];
  if (nc == SE_VL)
    for (int k = 0; k < 4; ++k) bv[k] = se_vload(bi + k * C);
  float z[kChunkRows * 4 * SE_VL];
  Ahead pf = Ahead::of(a.wp_next, a.next_floats);
  const int64_t gs = a.xi_gs;
  const bool with_x = a.x != nullptr;  // the input products computed here (x @ W_in's panel, then h @ W_rec's)
  if (!with_x) prefetch_rows(a.xi_rows, a.B, a.xi_off, gs, 4);
  for (int64_t r0 = 0; r0 < a.B; r0 += kChunkRows) {
    const int64_t rows = a.B - r0 < kChunkRows ? a.B - r0 : kChunkRows;
    const AnyRow<const float*> active{a.xi_rows + r0};
    if (with_x) {
      gemm_chunk(a.x + r0 * a.ldx, a.ldx, a.wp, a.I, rows, active, z, pf);
      gemm_chunk(a.h + r0 * a.P, a.P, a.wp + a.I * 4 * SE_VL, a.P, rows, active, z, pf, true);
    } else {
      gemm_chunk(a.h + r0 * a.P, a.P, a.wp, a.P, rows, active, z, pf);
    }
    if (nc == SE_VL) {  // a whole panel: the active rows, kCellRows at a time
      int64_t act[kChunkRows];
      int64_t na = 0;
      for (int64_t p = 0; p < rows; ++p)
        if (a.xi_rows[r0 + p]) act[na++] = p;
      for (int64_t i0 = 0; i0 < na; i0 += kCellRows) {
        int64_t ps[kCellRows];
        for (int n = 0; n < kCellRows; ++n) ps[n] = act[i0 + n < na ? i0 + n : na - 1];
        if (with_x)
          cell_rows<false>(a, r0, ps, z, bv, vlo, vhi);
        else
          cell_rows<true>(a, r0, ps, z, bv, vlo, vhi);
      }
      continue;
    }
    for (int64_t p = 0; p < rows; ++p) {
      const int64_t b = r0 + p;
      const float* xi = a.xi_rows[b];
      if (xi == nullptr) continue;
      const float* zr = z + p * 4 * SE_VL;
      float* cst = a.c + b * C + c0;
      float* m = a.m + b * C + c0;
      float* g = a.gates_rows ? a.gates_rows[b] + c0 : nullptr;
      float* craw = a.craw_rows ? a.craw_rows[b] + c0 : nullptr;
      static const float kNoInput[4 * SE_VL] = {};  // z holds the input products already
      int64_t xs = gs;
      if (with_x) {
        xi = kNoInput;
        xs = SE_VL;
      } else {
        xi += a.xi_off;
      }
#pragma omp simd
      for (int64_t u = 0; u < nc; ++u) {
        const float si = se_sigmoid(zr[u] + (xi[u] + bi[u]));
        const float tj = se_tanh(zr[SE_VL + u] + (xi[xs + u] + bi[C + u]));
        const float sf = se_sigmoid(zr[2 * SE_VL + u] + (xi[2 * xs + u] + bi[2 * C + u]));
        const float so = se_sigmoid(zr[3 * SE_VL + u] + (xi[3 * xs + u] + bi[3 * C + u]));
        const float cr = sf * cst[u] + si * tj;
        const float cn = se_clip(cr, lo, hi);
        cst[u] = cn;
        m[u] = so * se_tanh(cn);
        if (g) {
          g[u] = si;
          g[C + u] = tj;
          g[2 * C + u] = sf;
          g[3 * C + u] = so;
          craw[u] = cr;
        }
      }
    }
  }
  if (a.gates_rows) se_stream_fence();
}

static void panel_gemm(const PanelGemmArgs& a) {
  Ahead pf = Ahead::of(nullptr, 0);
  const auto all = [](int64_t, int64_t) { return true; };
  for (int64_t r0 = 0; r0 < a.rows; r0 += kChunkRows) {
    const int64_t rows = a.rows - r0 < kChunkRows ? a.rows - r0 : kChunkRows;
    gemm_chunk(a.a + r0 * a.lda, a.lda, a.wp, a.K, rows, all, a.out + r0 * 4 * SE_VL, pf);
  }
}

static void step_proj(const StepProjArgs& a) {
  const float hi = se_hi(a.proj_clip), lo = -hi;
  const int64_t p0 = a.p0, np = a.np;
  float hp[kChunkRows * 4 * SE_VL];
  Ahead pf = Ahead::of(a.wp_next, a.next_floats);
  for (int64_t r0 = 0; r0 < a.B; r0 += kChunkRows) {
    const int64_t rows = a.B - r0 < kChunkRows ? a.B - r0 : kChunkRows;
    gemm_chunk(a.m + r0 * a.C, a.C, a.wp, a.C, rows, AnyRow<float*>{a.out_rows + r0}, hp, pf);
    for (int64_t p = 0; p < rows; ++p) {
      const int64_t b = r0 + p;
      float* out = a.out_rows[b];
      if (out == nullptr) continue;
      const float* v = hp + p * 4 * SE_VL;
      float* h = a.h + b * a.P + p0;
      const float* res = a.res_rows ? a.res_rows[b] + p0 : nullptr;
      float* save = a.hp_rows ? a.hp_rows[b] + p0 : nullptr;
      out += p0;
      for (int64_t u = 0; u < np; ++u) {
        const float x = se_clip(v[u], lo, hi);
        h[u] = x;
        out[u] = res ? x + res[u] : x;
        if (save) save[u] = v[u];
      }
    }
  }
}

static void step_gates_back(const StepGatesBackArgs& a) {
  const int64_t C = a.C, c0 = a.c0, nc = a.nc;
  const float hi = se_hi(a.cell_clip), lo = -hi;
  // without a clip every cell passes, a NaN one too (the bounds test alone is false at NaN)
  const int no_clip = a.cell_clip < 0.0f;
  const float phi = a.prev_is_raw ? hi : __builtin_inff(), plo = -phi;
  float dmt[kChunkRows * 4 * SE_VL];
  Ahead pf = Ahead::of(a.wp_next, a.next_floats);
  for (int64_t v = 0; v < nc; v += SE_VL) {  // a panel here is 4 vectors of cells
    prefetch_rows(a.g_rows, a.B, c0 + v, C, 4);
    prefetch_rows(a.cr_rows, a.B, c0 + v, 0, 1);
    prefetch_rows(a.cp_rows, a.B, c0 + v, 0, 1);
  }
  for (int64_t r0 = 0; r0 < a.B; r0 += kChunkRows) {
    const int64_t rows = a.B - r0 < kChunkRows ? a.B - r0 : kChunkRows;
    gemm_chunk(a.dhp + r0 * a.P, a.P, a.wp, a.P, rows, AnyRow<const float*>{a.g_rows + r0}, dmt, pf);
    for (int64_t p = 0; p < rows; ++p) {
      const int64_t b = r0 + p;
      const float* g = a.g_rows[b];
      if (g == nullptr) continue;
      g += c0;
      const float* dmv = dmt + p * 4 * SE_VL;
      const float* crv = a.cr_rows[b] + c0;
      const float* cp = a.cp_rows[b] + c0;
      float* dc = a.dc + b * C + c0;
      float* dz = a.dz + b * 4 * C + c0;
#pragma omp simd
      for (int64_t u = 0; u < nc; ++u) {
        const float si = g[u], tj = g[C + u], sf = g[2 * C + u], so = g[3 * C + u];
        const float cr = crv[u];
        const float cn = se_clip(cr, lo, hi);
        const float tc = se_tanh(cn);
        const float dm = dmv[u];
        const float dcn = dc[u] + dm * so * (1.0f - tc * tc);
        const int pass = no_clip | ((int)(cr >= lo) & (int)(cr <= hi));
        const float dcr = pass ? dcn : 0.0f;
        const float cprev = se_clip(cp[u], plo, phi);
        const float di = dcr * tj * si * (1.0f - si);
        const float dj = dcr * si * (1.0f - tj * tj);
        const float df = dcr * cprev * sf * (1.0f - sf);
        const float d_o = dm * tc * so * (1.0f - so);
        dz[u] = di;
        dz[C + u] = dj;
        dz[2 * C + u] = df;
        dz[3 * C + u] = d_o;
        dc[u] = dcr * sf;
      }
    }
  }
}

static void step_dh(const StepDhArgs& a) {
  const float hi = se_hi(a.proj_clip), lo = -hi;
  // without a clip every output passes, a NaN one too (the bounds test alone is false at NaN)
  const int no_clip = a.proj_clip < 0.0f;
  const int64_t p0 = a.p0, np = a.np;
  float acc[kChunkRows * 4 * SE_VL];
  Ahead pf = Ahead::of(a.wp_next, a.next_floats);
  for (int64_t r0 = 0; r0 < a.B; r0 += kChunkRows) {
    const int64_t rows = a.B - r0 < kChunkRows ? a.B - r0 : kChunkRows;
    gemm_chunk(a.dz + r0 * a.K, a.K, a.wp, a.K, rows, AnyRow<unsigned char>{a.active + r0}, acc, pf);
    for (int64_t p = 0; p < rows; ++p) {
      const int64_t b = r0 + p;
      float* dh = a.dh + b * a.P + p0;
      if (a.active[b]) {
        const float* v = acc + p * 4 * SE_VL;
        for (int64_t u = 0; u < np; ++u) dh[u] = v[u];
      }
      if (a.dhp_rows == nullptr || a.dhp_rows[b] == nullptr) continue;
      float* dhp = a.dhp_rows[b] + p0;
      const float* go = a.go_rows[b] + p0;
      const float* hp = a.hp_rows[b] + p0;
#pragma omp simd
      for (int64_t u = 0; u < np; ++u) {
        const int pass = no_clip | ((int)(hp[u] >= lo) & (int)(hp[u] <= hi));
        dhp[u] = pass ? go[u] + dh[u] : 0.0f;
      }
    }
  }
}

const KernelTable table = {SE_NAME,          char_conv,        char_conv_back, gates_forward,   gates_backward,
                           highway_epilogue, highway_backward, SE_VL,          step_gates,      step_proj,
                           step_gates_back,  step_dh,          softmax_row,    panel_gemm};

#undef SE_VL
}  // namespace SE_NS
}  // namespace cpu
}  // namespace spacy_elmo
