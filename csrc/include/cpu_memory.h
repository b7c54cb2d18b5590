// CPU memory the kernels keep between calls (csrc/cpu/memory.cpp).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace spacy_elmo {
namespace cpu {

// A (sizes) view of work buffer `slot` (0 <= slot < kWorkSlots) of the calling
// thread, contents undefined. For buffers that never leave a call: the memory
// is kept between calls (a fresh 40-80 MB buffer costs more in page faults and
// in returning the pages than the work done in it); the contents never are.
// Reallocated when a call needs more, or much less, than the slot holds, or
// another dtype.
constexpr int kWorkSlots = 10;
at::Tensor workspace(int slot, at::IntArrayRef sizes, at::ScalarType dtype);

// An uninitialised tensor for memory that leaves the call (the tensors a
// training forward saves for its backward): blocks of 1 MB or more come from a
// process-wide list of recently freed blocks of about the same size (training
// repeats its shapes every step), refilled by the tensors' deleters, holding at
// most recycle_limit() bytes (the oldest go first). Smaller ones: at::empty.
at::Tensor recycled_empty(at::IntArrayRef sizes, const at::TensorOptions& opts);

// The elements of `part` (a view into a larger buffer) as a tensor with a
// storage of its own, without a copy: the buffer stays allocated until every
// such tensor made from it is freed. For outputs cut from one product: outputs
// of a custom op must not share a storage (torch.compile plans memory by that,
// torch.library.opcheck checks it), and views of disjoint parts held in
// separate storages share no element.
at::Tensor own_storage(const at::Tensor& part);

// The most bytes the recycled list holds (default 1 GiB; 0 turns recycling
// off). Setting a lower limit frees the oldest blocks at once. Returns the
// previous limit.
constexpr int64_t kDefaultRecycleLimit = int64_t(1) << 30;
int64_t recycle_limit();
int64_t set_recycle_limit(int64_t bytes);

// Bytes held now in the recycled list and in the calling thread's work buffers.
int64_t held_bytes();
// Frees both (the work buffers of the calling thread only); returns the bytes freed.
int64_t release_buffers();

// Testing only: hold (true) the lock of the recycled list in a thread of its own until
// called with false; returns once it is held. A child forked meanwhile must not
// inherit it locked: memory.cpp gives the child a new list.
void test_hold_pool_lock(bool hold);

}  // namespace cpu
}  // namespace spacy_elmo
