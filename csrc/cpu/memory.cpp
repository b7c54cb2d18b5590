// CPU memory the kernels keep between calls: per-thread work buffers and a
// list of recycled blocks for saved tensors (see csrc/include/cpu_memory.h).
#include "../include/cpu_memory.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/accumulate.h>

#include <list>
#include <mutex>
#include <utility>

namespace spacy_elmo {
namespace cpu {

namespace {

thread_local at::Tensor work_slots[kWorkSlots];

constexpr int64_t kRecycleMinBytes = int64_t(1) << 20;

class Recycled {
 public:
  // A free block of at least `bytes` and at most 5/4 of it (rows of a slightly
  // shorter batch fit), or null.
  std::pair<void*, int64_t> take(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second >= bytes && it->second <= bytes + bytes / 4) {
        auto block = *it;
        blocks_.erase(it);
        held_ -= block.second;
        return block;
      }
    return {nullptr, 0};
  }

  void give(void* p, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace_back(p, bytes);
    held_ += bytes;
    while (held_ > limit_) drop_oldest();
  }

  int64_t limit() {
    std::lock_guard<std::mutex> lock(mu_);
    return limit_;
  }

  int64_t set_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t previous = limit_;
    limit_ = bytes;
    while (held_ > limit_) drop_oldest();
    return previous;
  }

  int64_t held() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }

  int64_t release() {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t freed = held_;
    while (!blocks_.empty()) drop_oldest();
    return freed;
  }

 private:
  void drop_oldest() {
    c10::free_cpu(blocks_.front().first);
    held_ -= blocks_.front().second;
    blocks_.pop_front();
  }

  std::mutex mu_;
  std::list<std::pair<void*, int64_t>> blocks_;  // oldest first
  int64_t held_ = 0;
  int64_t limit_ = kDefaultRecycleLimit;
};

// Never destroyed: a tensor's deleter may run during interpreter shutdown.
Recycled& recycled() {
  static Recycled* r = new Recycled();
  return *r;
}

int64_t slot_bytes(const at::Tensor& t) { return t.defined() ? int64_t(t.numel() * t.element_size()) : 0; }

}  // namespace

at::Tensor workspace(int slot, at::IntArrayRef sizes, at::ScalarType dtype) {
  TORCH_CHECK(slot >= 0 && slot < kWorkSlots, "workspace: no slot ", slot);
  const int64_t numel = c10::multiply_integers(sizes);
  at::Tensor& t = work_slots[slot];
  if (!t.defined() || t.scalar_type() != dtype || t.numel() < numel || t.numel() > 4 * numel + (1 << 16)) {
    // A normal tensor even when the call runs under torch.inference_mode(): the buffer outlives
    // the call, and an inference tensor made it refuse the in-place writes of every later call
    // outside that mode on this thread ("Inplace update to inference tensor outside InferenceMode").
    c10::InferenceMode normal(false);
    t = at::empty({numel}, at::TensorOptions().dtype(dtype));
  }
  return t.narrow(0, 0, numel).view(sizes);
}

at::Tensor recycled_empty(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  TORCH_CHECK(opts.device().is_cpu(), "recycled_empty: CPU only");
  const int64_t bytes = c10::multiply_integers(sizes) * int64_t(opts.dtype().itemsize());
  if (bytes < kRecycleMinBytes) return at::empty(sizes, opts);
  auto [p, size] = recycled().take(bytes);
  if (p == nullptr) {
    p = c10::alloc_cpu(bytes);
    size = bytes;
  }
  return at::from_blob(p, sizes, [size = size](void* q) { recycled().give(q, size); }, opts);
}

at::Tensor own_storage(const at::Tensor& part) {
  return at::from_blob(part.data_ptr(), part.sizes(), part.strides(), [keep = part.storage()](void*) {},
                       part.options());
}

int64_t recycle_limit() { return recycled().limit(); }

int64_t set_recycle_limit(int64_t bytes) {
  TORCH_CHECK(bytes >= 0, "set_recycle_limit: the limit must be >= 0 bytes, got ", bytes);
  return recycled().set_limit(bytes);
}

int64_t held_bytes() {
  int64_t n = recycled().held();
  for (const auto& t : work_slots) n += slot_bytes(t);
  return n;
}

int64_t release_buffers() {
  int64_t n = recycled().release();
  for (auto& t : work_slots) {
    n += slot_bytes(t);
    t = at::Tensor();
  }
  return n;
}

}  // namespace cpu
}  // namespace spacy_elmo
