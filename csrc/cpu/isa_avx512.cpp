// CPU kernels compiled for one ISA level (avx512); see csrc/include/kernels_impl.h.
#include <cstdint>
#include <cstring>

#include <immintrin.h>

#include "../include/cpu_kernels.h"

#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")
#define SE_NS isa_avx512
#define SE_NAME "avx512"
#define SE_VBYTES 64
#define SE_PT 6
#define SE_NVMAX 4
#define SE_STEP_PT 6
#include "../include/kernels_impl.h"
