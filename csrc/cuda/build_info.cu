// The CUDA architectures this build's kernels were compiled for (declared in csrc/include/ops.h,
// read by spacy_elmo.ops.build_info()). nvcc (CUDA >= 11.5) defines __CUDA_ARCH_LIST__ in every
// compilation, host code included, as the virtual architectures of its -gencode / -arch flags.
// variadic: a list of several architectures is several macro arguments ("750,900")
#define SE_STRINGIFY_(...) #__VA_ARGS__
#define SE_STRINGIFY(...) SE_STRINGIFY_(__VA_ARGS__)

namespace spacy_elmo {
namespace cuda {

const char* arch_list() {
#ifdef __CUDA_ARCH_LIST__
  return SE_STRINGIFY(__CUDA_ARCH_LIST__);
#else
  return "";
#endif
}

}  // namespace cuda
}  // namespace spacy_elmo
