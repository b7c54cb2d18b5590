// CPU kernels compiled for one ISA level (avx2); see csrc/include/kernels_impl.h.
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "../include/cpu_kernels.h"

#pragma GCC target("avx2,fma")
#define SE_NS isa_avx2
#define SE_NAME "avx2"
#define SE_VBYTES 32
#define SE_PT 4
#define SE_NVMAX 3
#define SE_STEP_PT 3
#include "../include/kernels_impl.h"
