// Run-time choice of the CPU kernel table by CPU capability.
#include <cstdlib>
#include <cstring>
#include <string>

#include "../include/cpu_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {
namespace cpu {

static const KernelTable* choose() {
#if SPACY_ELMO_X86
  // SPACY_ELMO_CPU_ISA=base|avx2|avx512 caps the choice (testing, benchmarking).
  const char* cap = std::getenv("SPACY_ELMO_CPU_ISA");
  std::string want = cap ? cap : "avx512";
  __builtin_cpu_init();
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  if (want == "avx512" && has_avx512) return &isa_avx512::table;
  if ((want == "avx512" || want == "avx2") && has_avx2) return &isa_avx2::table;
#endif
  return &isa_base::table;  // elsewhere the only table (any SPACY_ELMO_CPU_ISA: nothing above it)
}

const KernelTable& kernels() {
  static const KernelTable* table = choose();
  return *table;
}

}  // namespace cpu

std::string cpu_isa() { return cpu::kernels().name; }

}  // namespace spacy_elmo
