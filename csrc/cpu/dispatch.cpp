// Run-time choice of the CPU kernel table by CPU capability.
#include <cstdlib>
#include <cstring>
#include <string>

#include "../include/cpu_kernels.h"
#include "../include/ops.h"

namespace spacy_elmo {
namespace cpu {

// The widest table this CPU runs, whatever SPACY_ELMO_CPU_ISA says.
static const KernelTable* widest() {
#if SPACY_ELMO_X86
  __builtin_cpu_init();
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  if (has_avx512) return &isa_avx512::table;
  if (has_avx2) return &isa_avx2::table;
#endif
  return &isa_base::table;  // elsewhere the only table
}

static const KernelTable* choose() {
  const KernelTable* best = widest();
  // SPACY_ELMO_CPU_ISA=base|avx2|avx512 caps the choice (testing, benchmarking); any other value
  // (the empty one too) runs base, and spacy_elmo/switches.py warns for it when the extension loads.
  const char* cap = std::getenv("SPACY_ELMO_CPU_ISA");
  const std::string want = cap ? cap : "avx512";
#if SPACY_ELMO_X86
  if (want == "avx2" && best == &isa_avx512::table) return &isa_avx2::table;
#endif
  return (want == "avx512" || want == "avx2") ? best : &isa_base::table;
}

const KernelTable& kernels() {
  static const KernelTable* table = choose();
  return *table;
}

}  // namespace cpu

std::string cpu_isa() { return cpu::kernels().name; }

std::string cpu_isa_supported() { return cpu::widest()->name; }

}  // namespace spacy_elmo
