// CPU memory the kernels keep between calls: per-thread work buffers and a
// list of recycled blocks for saved tensors (see csrc/include/cpu_memory.h).
#include "../include/cpu_memory.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/accumulate.h>

#include <pthread.h>

#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace spacy_elmo {
namespace cpu {

namespace {

thread_local at::Tensor work_slots[kWorkSlots];

constexpr int64_t kRecycleMinBytes = int64_t(1) << 20;

class Recycled {
 public:
  Recycled() = default;
  explicit Recycled(int64_t limit) : limit_(limit) {}

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

  // Testing only (test_hold_pool_lock): take the lock, say so (`held`), keep it until `release`.
  void hold(std::promise<void>& held, std::shared_future<void> release) {
    std::lock_guard<std::mutex> lock(mu_);
    held.set_value();
    release.wait();
  }

  // The limit, read without the lock: in a forked child, whose parent's other threads
  // may have held it (and never release it there).
  int64_t limit_unlocked() const { return limit_; }

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
Recycled* pool = new Recycled();

// A child of fork() has only the thread that forked: the pool's mutex, locked by
// another thread of the parent (a forward taking or a deleter giving back a
// block), would stay locked in the child for ever. The child gets a new pool
// with the same limit; the old one (its list may be mid-change) is left as it
// is: its blocks stay allocated, never reused.
void new_pool_in_child() { pool = new Recycled(pool->limit_unlocked()); }

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, new_pool_in_child);

Recycled& recycled() { return *pool; }

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

void test_hold_pool_lock(bool hold) {
  static std::promise<void> release;
  static std::thread holder;
  if (hold) {
    TORCH_CHECK(!holder.joinable(), "test_hold_pool_lock: the lock is held already");
    release = std::promise<void>();
    auto held = std::make_shared<std::promise<void>>();
    holder = std::thread([held, done = release.get_future().share()] { recycled().hold(*held, done); });
    held->get_future().wait();
  } else if (holder.joinable()) {
    release.set_value();
    holder.join();
  }
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
