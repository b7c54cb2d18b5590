// CPU kernels compiled for one ISA level (avx2); see csrc/include/kernels_impl.h.
// x86 only: elsewhere this file compiles to nothing (dispatch.cpp picks the base table).
#include <cstdint>
#include <cstring>

#include "../include/cpu_kernels.h"

#if SPACY_ELMO_X86
#include <immintrin.h>

// GCC takes the ISA from the pragma; clang (Apple's on x86-64 macOS) ignores it and
// needs the attribute on every function of the kernels.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif
#define SE_NS isa_avx2
#define SE_NAME "avx2"
#define SE_VBYTES 32
#define SE_PT 4
#define SE_NVMAX 3
#define SE_STEP_PT 3
#include "../include/kernels_impl.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif  // SPACY_ELMO_X86
