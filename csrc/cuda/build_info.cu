// The CUDA architectures this build's kernels were compiled for (declared in csrc/include/cuda_kernels.h,
// read by spacy_elmo.ops.build_info()). nvcc (CUDA >= 11.5) defines __CUDA_ARCH_LIST__ in every
// compilation, host code included, as the virtual architectures of its -gencode / -arch flags.
#include "../include/cuda_kernels.h"

// variadic: a list of several architectures is several macro arguments ("750,900")
#define SE_STRINGIFY_(...) #__VA_ARGS__
#define SE_STRINGIFY(...) SE_STRINGIFY_(__VA_ARGS__)

// Defined by its qualified name: a definition that no longer matches the header's declaration (its
// parameters or return type) is a compile error here, not an undefined symbol when _C is loaded.
const char* spacy_elmo::cuda::arch_list() {
#ifdef __CUDA_ARCH_LIST__
  return SE_STRINGIFY(__CUDA_ARCH_LIST__);
#else
  return "";
#endif
}
