// CPU kernels compiled for one ISA level (base); see csrc/include/kernels_impl.h.
#include <cstdint>
#include <cstring>

#include "../include/cpu_kernels.h"


#define SE_NS isa_base
#define SE_NAME "base"
#define SE_VBYTES 16
#define SE_PT 4
#define SE_NVMAX 3
#define SE_STEP_PT 3
#include "../include/kernels_impl.h"
