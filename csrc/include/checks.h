// Argument checks of the CPU operators. The operators torch.ops.spacy_elmo.*
// can be called directly, not only through spacy_elmo.ops.fused, and the
// kernels read and write through raw pointers: a shape, dtype or index that
// does not fit would read or write out of bounds. Each message names the
// operator, the argument, what it must be and what it is.
#pragma once
#include <ATen/ATen.h>

#include <string>

namespace spacy_elmo {

inline void check_sizes(const at::Tensor& t, at::IntArrayRef sizes, const char* op, const char* name) {
  TORCH_CHECK(t.sizes() == sizes, op, ": ", name, " must have shape ", sizes, ", got ", t.sizes());
}

// float32 or float64: the kernels' dtypes (the wrappers in spacy_elmo.ops.fused
// run float16/bfloat16 inputs in float32).
inline void check_float(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": ", name,
              " must be float32 or float64 (spacy_elmo.ops.fused casts float16/bfloat16 inputs), got ",
              t.scalar_type());
}

// float32 or float64, and the dtype of the operator's first floating argument.
inline void check_same_float(const at::Tensor& t, at::ScalarType dtype, const char* op, const char* name) {
  check_float(t, op, name);
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " is ", t.scalar_type(), " but the other arguments are ",
              dtype, ": pass every floating argument in one dtype");
}

// Whole numbers (indices, lengths): a float would be truncated and a bool read as 0/1.
inline void check_integer(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), op, ": ", name,
              " must be an integer tensor (int64 or int32), got ", t.scalar_type());
}

// Every value of `values` (n int64s) lies in [lo, hi]; `meaning` says why. Returns
// the largest value (lo - 1 when n is 0).
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

}  // namespace spacy_elmo
