// The one bindings file of spacy_elmo._C: PyTorch custom operators
// (TORCH_LIBRARY, namespace `spacy_elmo`) with their CPU implementations, and
// a small pybind11 module for introspection. Autograd and fake (meta)
// implementations are registered from Python (spacy_elmo/ops/fused.py); the
// CUDA implementations live in csrc/cuda/cuda_ops.cpp (CUDA builds only).
#include <torch/extension.h>
#include <torch/library.h>

#include "include/cpu_memory.h"
#include "include/ops.h"
#ifdef SPACY_ELMO_WITH_CUDA
#include "include/cuda_kernels.h"  // cuda::arch_list
#endif

namespace spacy_elmo {

static bool built_with_cuda() {
#ifdef SPACY_ELMO_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// What this build of the extension is, for spacy_elmo.ops.build_info(): the CPU kernel table in use
// and the widest this CPU runs, whether OpenMP was on (a macOS build without libomp runs the kernels'
// own loops on one thread: build_flags.py) and which CUDA architectures the kernels were compiled for.
static py::dict build_info() {
  py::dict info;
  info["cpu_isa"] = cpu_isa();
  info["cpu_isa_supported"] = cpu_isa_supported();
#ifdef _OPENMP
  info["openmp"] = _OPENMP;  // the version date, e.g. 201511 (OpenMP 4.5)
#else
  info["openmp"] = 0;
#endif
  info["cuda"] = built_with_cuda();
#ifdef SPACY_ELMO_WITH_CUDA
  info["cuda_arch_list"] = std::string(cuda::arch_list());
#else
  info["cuda_arch_list"] = std::string();
#endif
  return info;
}

}  // namespace spacy_elmo

TORCH_LIBRARY(spacy_elmo, m) {
  m.def("char_cnn_forward(Tensor char_ids, Tensor embedding, Tensor[] weights, Tensor[] biases, int activation) -> "
        "(Tensor, Tensor)");
  m.def("char_cnn_backward(Tensor grad, Tensor out, Tensor argmax, Tensor char_ids, Tensor embedding, "
        "Tensor[] weights, int activation) -> (Tensor, Tensor[], Tensor[])");
  m.def("highway_forward(Tensor x, Tensor weight, Tensor bias) -> (Tensor, Tensor)");
  m.def("highway_backward(Tensor grad, Tensor x, Tensor weight, Tensor h) -> (Tensor, Tensor, Tensor)");
  m.def("lstm_forward(Tensor[] xs, Tensor lengths, Tensor[] weights, Tensor h0, Tensor c0, float? cell_clip, "
        "float? proj_clip, int[] reverse, bool residual, bool save) -> "
        "(Tensor[], Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("lstm_backward(Tensor[] grad_outs, Tensor grad_hn, Tensor grad_cn, Tensor[] xs, Tensor lengths, "
        "Tensor[] weights, Tensor c0, Tensor gates, Tensor c_raw, Tensor hp_raw, Tensor h_prev, Tensor m, "
        "float? cell_clip, float? proj_clip, int[] reverse, bool residual) -> (Tensor[], Tensor[], Tensor, Tensor)");
  m.def("sampled_logsumexp_forward(Tensor h, Tensor weight, Tensor offset, Tensor hit) -> (Tensor, Tensor)");
  m.def("sampled_logsumexp_backward(Tensor grad, Tensor h, Tensor weight, Tensor softmax) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(spacy_elmo, CPU, m) {
  m.impl("char_cnn_forward", &spacy_elmo::char_cnn_forward_cpu);
  m.impl("char_cnn_backward", &spacy_elmo::char_cnn_backward_cpu);
  m.impl("highway_forward", &spacy_elmo::highway_forward_cpu);
  m.impl("highway_backward", &spacy_elmo::highway_backward_cpu);
  m.impl("lstm_forward", &spacy_elmo::lstm_forward_cpu);
  m.impl("lstm_backward", &spacy_elmo::lstm_backward_cpu);
  m.impl("sampled_logsumexp_forward", &spacy_elmo::sampled_logsumexp_forward_cpu);
  m.impl("sampled_logsumexp_backward", &spacy_elmo::sampled_logsumexp_backward_cpu);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "spacy_elmo fused kernels (custom operators in torch.ops.spacy_elmo)";
  m.def("cpu_isa", &spacy_elmo::cpu_isa, "The CPU kernel variant in use: base, avx2 or avx512");
  m.def("built_with_cuda", &spacy_elmo::built_with_cuda, "Whether the CUDA kernels were compiled in");
  m.def("build_info", &spacy_elmo::build_info,
        "This build: cpu_isa, cpu_isa_supported, openmp (_OPENMP, 0: none), cuda, cuda_arch_list");
  m.def("cpu_buffer_bytes", &spacy_elmo::cpu::held_bytes,
        "Bytes the CPU kernels keep between calls (recycled blocks + this thread's work buffers)");
  m.def("release_cpu_buffers", &spacy_elmo::cpu::release_buffers,
        "Free the recycled blocks and this thread's work buffers; returns the bytes freed");
  m.attr("DEFAULT_CPU_RECYCLE_LIMIT") = spacy_elmo::cpu::kDefaultRecycleLimit;
  m.def("cpu_recycle_limit", &spacy_elmo::cpu::recycle_limit,
        "The most bytes the recycled list of saved-tensor blocks holds");
  m.def("set_cpu_recycle_limit", &spacy_elmo::cpu::set_recycle_limit,
        "Set that limit (0: no recycling), freeing the oldest blocks above it; returns the previous limit");
  m.def("_test_hold_pool_lock", &spacy_elmo::cpu::test_hold_pool_lock,
        "Testing only: hold (True) the recycled blocks' lock in a thread of its own until called with False",
        py::call_guard<py::gil_scoped_release>());
}
