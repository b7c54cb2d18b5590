// Argument checks of the operators torch.ops.spacy_elmo.*, shared by their CPU
// (csrc/cpu) and CUDA (csrc/cuda/cuda_ops.cpp) implementations. The operators
// can be called directly, not only through spacy_elmo.ops.fused, and the
// kernels read and write through raw pointers: a shape, dtype or index that
// does not fit would read or write out of bounds. Each message names the
// operator, the argument, what it must be and what it is, and both backends
// give the same message for the same mistake.
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace spacy_elmo {

// ---------------------------------------------------------------- primitives

inline void check_sizes(const at::Tensor& t, at::IntArrayRef sizes, const char* op, const char* name) {
  TORCH_CHECK(t.sizes() == sizes, op, ": ", name, " must have shape ", sizes, ", got ", t.sizes());
}

// The kernels' floating dtypes: float32 or float64 on the CPU (the wrappers in
// spacy_elmo.ops.fused run float16/bfloat16 inputs in float32 there); float32,
// float16 or bfloat16 on CUDA (autocast's dtypes; there are no float64 kernels).
inline void check_float(const at::Tensor& t, const char* op, const char* name) {
  const at::ScalarType s = t.scalar_type();
  if (t.is_cuda()) {
    TORCH_CHECK(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ", name,
                " must be float32, float16 or bfloat16 on CUDA (no float64 kernels), got ", s);
  } else {
    TORCH_CHECK(s == at::kFloat || s == at::kDouble, op, ": ", name,
                " must be float32 or float64 (spacy_elmo.ops.fused casts float16/bfloat16 inputs), got ", s);
  }
}

// A kernel dtype (check_float), and the dtype of the operator's first floating argument.
inline void check_same_float(const at::Tensor& t, at::ScalarType dtype, const char* op, const char* name) {
  check_float(t, op, name);
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " is ", t.scalar_type(), " but the other arguments are ",
              dtype, ": pass every floating argument in one dtype");
}

// Whole numbers (indices, lengths): a float would be truncated and a bool read as 0/1.
inline void check_integer(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), op, ": ", name,
              " must be an integer tensor (any integer dtype, read as int64), got ", t.scalar_type());
}

// Every value of `values` (n int64s on the host) lies in [lo, hi]; `meaning` says
// why. Returns the largest value (lo - 1 when n is 0).
inline int64_t check_range(const int64_t* values, int64_t n, int64_t lo, int64_t hi, const char* op,
                           const char* name, const char* meaning) {
  int64_t top = lo - 1;
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(values[i] >= lo && values[i] <= hi, op, ": ", name, " holds ", values[i], " at flat index ", i,
                "; its values must lie in [", lo, ", ", hi, "] (", meaning, ")");
    top = values[i] > top ? values[i] : top;
  }
  return top;
}

// Range checks of tensors that stay where they are (device tensors): the smallest
// and largest value of each integer tensor in `values` (all on one device),
// reduced there and copied to the host together, in values' order:
// {min_0, max_0, min_1, max_1, ...}. One device->host sync for the lot, none
// when every tensor is empty (an empty one gives min > max, inside any range).
inline std::vector<int64_t> min_max_on_host(std::initializer_list<at::Tensor> values) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& v : values) {
    if (v.numel() == 0) continue;
    const auto mm = at::aminmax(v);
    parts.push_back(std::get<0>(mm).to(at::kLong));
    parts.push_back(std::get<1>(mm).to(at::kLong));
  }
  const at::Tensor host = parts.empty() ? at::Tensor() : at::stack(parts).cpu();
  std::vector<int64_t> out;
  size_t k = 0;
  for (const at::Tensor& v : values) {
    if (v.numel() == 0) {
      out.push_back(std::numeric_limits<int64_t>::max());
      out.push_back(std::numeric_limits<int64_t>::min());
    } else {
      out.push_back(host.data_ptr<int64_t>()[k++]);
      out.push_back(host.data_ptr<int64_t>()[k++]);
    }
  }
  return out;
}

// check_range for the integer tensor `values` (any device) whose smallest and
// largest values are min and max (min_max_on_host): only when they leave
// [lo, hi] are the values copied to the host, to name the first one outside
// with check_range's message. Returns max.
inline int64_t check_min_max(const at::Tensor& values, int64_t min, int64_t max, int64_t lo, int64_t hi,
                             const char* op, const char* name, const char* meaning) {
  if (min < lo || max > hi) {
    const at::Tensor host = values.to(at::kCPU, at::kLong).contiguous();
    check_range(host.data_ptr<int64_t>(), host.numel(), lo, hi, op, name, meaning);
    TORCH_INTERNAL_ASSERT(false, op, ": ", name, " left [", lo, ", ", hi, "] on the device but not on the host");
  }
  return max;
}

// ------------------------------------------------------------------ char CNN

constexpr const char* kCharIdsMeaning = "0 = no character, k >= 1 reads row k - 1 of the embedding table";

// What both directions share, but for the ids' range (checked where the ids are,
// against emb.size(0) with kCharIdsMeaning): the ids, the table, the filters and
// the activation flag.
inline void check_char_cnn_filters(const char* op, const at::Tensor& ids, const at::Tensor& emb,
                                   at::TensorList weights, int64_t activation) {
  TORCH_CHECK(ids.dim() == 2, op, ": char_ids must be (N, W), got ", ids.sizes());
  check_integer(ids, op, "char_ids");
  TORCH_CHECK(emb.dim() == 2, op, ": embedding must be (261, D), got ", emb.sizes());
  check_float(emb, op, "embedding");
  TORCH_CHECK(activation == 0 || activation == 1, op, ": activation must be 0 (relu) or 1 (tanh), got ", activation);
  TORCH_CHECK(!weights.empty(), op, ": at least one filter");
  for (size_t i = 0; i < weights.size(); ++i) {
    TORCH_CHECK(weights[i].dim() == 3 && weights[i].size(1) == emb.size(1), op, ": weight ", i,
                " must be (count, D, width) with D = ", emb.size(1), ", got ", weights[i].sizes());
    TORCH_CHECK(weights[i].size(2) >= 1, op, ": filter ", i, " has width 0");
    // as the reference's conv1d (the CUDA kernels launched an empty grid when every filter had none)
    TORCH_CHECK(weights[i].size(0) >= 1, op, ": filter ", i, " has no channels (count 0)");
    TORCH_CHECK(weights[i].size(2) <= ids.size(1), op, ": filter ", i, " (width ", weights[i].size(2),
                ") is wider than the tokens (", ids.size(1), " characters)");
    check_same_float(weights[i], emb.scalar_type(), op, "a filter weight");
  }
}

// char_cnn_forward's biases: one (count,) vector per filter, in the table's dtype.
inline void check_char_cnn_biases(at::TensorList weights, at::TensorList biases, at::ScalarType dtype) {
  TORCH_CHECK(biases.size() == weights.size(), "char_cnn: one bias per filter, got ", biases.size(), " biases for ",
              weights.size(), " filters");
  for (size_t i = 0; i < biases.size(); ++i) {
    TORCH_CHECK(biases[i].dim() == 1 && biases[i].size(0) == weights[i].size(0), "char_cnn: bias ", i, " must be (",
                weights[i].size(0), ",), got ", biases[i].sizes());
    check_same_float(biases[i], dtype, "char_cnn", "a bias");
  }
}

// char_cnn_backward's grad, out and argmax: each (N, F), argmax the forward's
// int32 positions (their range: check_window_positions). Returns F.
inline int64_t check_char_cnn_outputs(const char* op, const at::Tensor& grad, const at::Tensor& out,
                                      const at::Tensor& arg, int64_t N, at::TensorList weights) {
  int64_t F = 0;
  for (const auto& w : weights) F += w.size(0);
  check_sizes(grad, {N, F}, op, "grad");
  check_sizes(out, {N, F}, op, "out");
  check_sizes(arg, {N, F}, op, "argmax");
  TORCH_CHECK(arg.scalar_type() == at::kInt, op, ": argmax must be the forward's int32 positions, got ",
              arg.scalar_type());
  return F;
}

// Every argmax of filter i's columns is one of its window positions, 0..W - width_i
// (they index the tokens' characters). arg: (N, F) int32, row-major, on the host.
// F: the filters' total count (check_char_cnn_outputs returns it).
inline void check_window_positions(const char* op, const int32_t* arg, int64_t N, int64_t W, int64_t F,
                                   at::TensorList weights) {
  int64_t off = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int32_t* a = arg + off;
    const int64_t count = weights[i].size(0), last = W - weights[i].size(2);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t f = 0; f < count; ++f)
        TORCH_CHECK(a[n * F + f] >= 0 && a[n * F + f] <= last, op, ": argmax[", n, ", ", off + f, "] = ",
                    a[n * F + f], " is not a window position of filter ", i, " (0..", last,
                    "): pass the argmax char_cnn_forward returned");
    off += count;
  }
}

// ------------------------------------------------------------------- highway

inline int64_t check_highway_input(const char* op, const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(x.dim() == 2, op, ": x must be (N, F), got ", x.sizes());
  const int64_t F = x.size(1);
  check_float(x, op, "x");
  check_sizes(weight, {2 * F, F}, op, "weight (2F, F)");
  check_same_float(weight, x.scalar_type(), op, "weight");
  return F;
}

inline void check_highway_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t F = check_highway_input("highway", x, weight);
  check_sizes(bias, {2 * F}, "highway", "bias (2F,)");
  check_same_float(bias, x.scalar_type(), "highway", "bias");
}

inline void check_highway_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& h) {
  const char* op = "highway_backward";
  const int64_t F = check_highway_input(op, x, weight), N = x.size(0);
  check_sizes(h, {N, 2 * F}, op, "h (the forward's (N, 2F) pre-activations)");
  check_same_float(h, x.scalar_type(), op, "h");
  check_sizes(grad, {N, F}, op, "grad");
}

// ---------------------------------------------------------------------- LSTM

struct LstmDims {
  int64_t ndir, B, T, I, C, P;
};

constexpr const char* kLengthsMeaning = "a row's number of valid positions, at most T";

// What both directions share, but for the lengths' range (check_lstm_lengths,
// where the lengths are): the inputs, the weights, the
// flags and the clips (a negative clip gives garbage on CUDA).
inline LstmDims check_lstm(const char* op, at::TensorList xs, const at::Tensor& lengths, at::TensorList weights,
                           at::IntArrayRef reverse, bool residual, std::optional<double> cell_clip,
                           std::optional<double> proj_clip) {
  const int64_t ndir = (int64_t)xs.size();
  TORCH_CHECK(ndir >= 1 && ndir <= 2, op, ": one or two directions, got ", ndir);
  TORCH_CHECK((int64_t)weights.size() == 4 * ndir, op, ": 4 weights per direction, got ", weights.size(), " for ",
              ndir);
  TORCH_CHECK((int64_t)reverse.size() == ndir, op, ": one reverse flag per direction");
  TORCH_CHECK(xs[0].dim() == 3, op, ": x must be (B, T, I), got ", xs[0].sizes());
  TORCH_CHECK(weights[3].dim() == 2, op, ": w_proj must be (C, P), got ", weights[3].sizes());
  LstmDims d{ndir, xs[0].size(0), xs[0].size(1), xs[0].size(2), weights[3].size(0), weights[3].size(1)};
  // No cells or no projection: nothing to run (the CPU kernels divided by zero or read
  // unwritten memory, the CUDA ones launched an empty grid).
  TORCH_CHECK(d.C >= 1 && d.P >= 1, op, ": w_proj (C, P) must have at least one cell and one projection unit, got ",
              weights[3].sizes(), ": a layer of none has nothing to compute (check the config's cell_dim and ",
              "projection_dim)");
  // No input features: the float32 kernels' input product of width 0 never wrote its
  // accumulator, and the next row's added into it (wrong numbers for B > 1).
  TORCH_CHECK(d.I >= 1, op, ": x (B, T, I) must have at least one input feature, got ", xs[0].sizes(),
              ": an LSTM layer of no inputs is refused (a biLM layer reads projection_dim features). Pass the ",
              "token vectors (B, T, I >= 1) as x, with w_input (I, 4C)");
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == d.B, op, ": lengths must be (B,) = (", d.B, ",), got ",
              lengths.sizes());
  check_integer(lengths, op, "lengths");
  const auto dtype = xs[0].scalar_type();
  check_float(xs[0], op, "x");
  for (int64_t k = 0; k < ndir; ++k) {
    TORCH_CHECK(xs[k].sizes() == xs[0].sizes(), op, ": every direction's input must have the same shape");
    check_same_float(xs[k], dtype, op, "x");
    check_sizes(weights[4 * k], {d.I, 4 * d.C}, op, "w_input (I, 4C)");
    check_sizes(weights[4 * k + 1], {d.P, 4 * d.C}, op, "w_recurrent (P, 4C)");
    // its exact shape, not its number of values: a (2, 2C) or (1, 4C) bias ran, read as (4C,), on both devices
    check_sizes(weights[4 * k + 2], {4 * d.C}, op, "bias (4C,)");
    check_sizes(weights[4 * k + 3], {d.C, d.P}, op, "w_proj (C, P)");
    for (int64_t j = 0; j < 4; ++j) check_same_float(weights[4 * k + j], dtype, op, "an LSTM weight");
  }
  TORCH_CHECK(!residual || d.I == d.P, op, ": residual needs input dim == projection dim");
  TORCH_CHECK(!cell_clip.has_value() || *cell_clip >= 0, op, ": cell_clip must be >= 0");
  TORCH_CHECK(!proj_clip.has_value() || *proj_clip >= 0, op, ": proj_clip must be >= 0");
  return d;
}

// The number of steps, max(lengths), after checking every length lies in [0, T]
// (kLengthsMeaning): a longer row would make the kernels read and write past its
// T positions. lengths: int64, contiguous, where the kernels read them: read in
// place on the host; on a device, their smallest and largest values are copied
// to the host (one sync, min_max_on_host) and the values only when one is outside.
inline int64_t check_lstm_lengths(const char* op, const at::Tensor& lengths, int64_t T) {
  int64_t top;
  if (lengths.device().is_cpu()) {
    top = check_range(lengths.data_ptr<int64_t>(), lengths.numel(), 0, T, op, "lengths", kLengthsMeaning);
  } else {
    const std::vector<int64_t> range = min_max_on_host({lengths});
    top = check_min_max(lengths, range[0], range[1], 0, T, op, "lengths", kLengthsMeaning);
  }
  return std::max<int64_t>(0, top);  // no rows: no steps
}

// lstm_forward's initial state, in its exact shapes: a reshape would silently read
// a (P, B) state as (B, P).
inline void check_lstm_state(const LstmDims& d, const at::Tensor& h0, const at::Tensor& c0) {
  check_sizes(h0, {d.ndir, d.B, d.P}, "lstm", "h0 (ndir, B, P)");
  check_float(h0, "lstm", "h0");
  check_sizes(c0, {d.ndir, d.B, d.C}, "lstm", "c0 (ndir, B, C)");
  check_float(c0, "lstm", "c0");
}

// lstm_backward's gradients, initial cell state and what the forward saved (read
// through raw pointers: their shapes, dtype (x's, `dtype`) and layout). Not their
// values: called directly with other lengths (or inputs, weights, c0) than the
// lstm_forward that saved them, the op reads in bounds but its gradients are
// undefined (docs/architecture.md); the autograd formula passes the forward's own.
inline void check_lstm_backward(const char* op, const LstmDims& d, at::TensorList grad_outs,
                                const at::Tensor& grad_hn, const at::Tensor& grad_cn, const at::Tensor& c0,
                                at::ScalarType dtype, const at::Tensor& gates, const at::Tensor& c_raw,
                                const at::Tensor& hp_raw, const at::Tensor& h_prev, const at::Tensor& m) {
  const int64_t ndir = d.ndir, B = d.B, T = d.T, C = d.C, P = d.P;
  TORCH_CHECK(gates.numel() == ndir * T * B * 4 * C, op, ": the forward did not save its tensors");
  TORCH_CHECK((int64_t)grad_outs.size() == ndir, op, ": one output gradient per direction, got ", grad_outs.size(),
              " for ", ndir);
  for (int64_t k = 0; k < ndir; ++k) check_sizes(grad_outs[k], {B, T, P}, op, "each output gradient (B, T, P)");
  check_sizes(grad_hn, {ndir, B, P}, op, "grad_hn (ndir, B, P)");
  check_sizes(grad_cn, {ndir, B, C}, op, "grad_cn (ndir, B, C)");
  check_sizes(c0, {ndir, B, C}, op, "c0 (ndir, B, C)");
  const at::Tensor* saved[] = {&gates, &c_raw, &hp_raw, &h_prev, &m};
  const char* names[] = {"gates (ndir, T, B, 4C)", "c_raw (ndir, T, B, C)", "hp_raw (ndir, T, B, P)",
                         "h_prev (ndir, B, T, P)", "m (ndir, T, B, C)"};
  const std::vector<std::vector<int64_t>> sizes = {
      {ndir, T, B, 4 * C}, {ndir, T, B, C}, {ndir, T, B, P}, {ndir, B, T, P}, {ndir, T, B, C}};
  for (int k = 0; k < 5; ++k) {
    check_sizes(*saved[k], sizes[k], op, names[k]);
    check_same_float(*saved[k], dtype, op, names[k]);
    TORCH_CHECK(saved[k]->is_contiguous(), op, ": ", names[k],
                " must be contiguous: pass the tensors lstm_forward saved");
  }
}

}  // namespace spacy_elmo
