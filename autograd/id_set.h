// IdSet: a set of tensor ids (non-zero uint64) with open addressing.
//
// The tape inserts one id per recorded op and looks up every input of every op run while
// it is active, so the set sits on the eager hot path: a flat table (linear probing,
// Fibonacci hashing of the sequential ids, at most half full) does both without a heap
// allocation per element, unlike std::unordered_set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::autograd {

class IdSet {
 public:
  bool contains(uint64_t id) const {
    if (size_ == 0) return false;
    for (size_t i = slot_of(id);; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == id) return true;
      if (s == kEmpty) return false;
    }
  }

  // Returns true when the id was not yet present. Id 0 (never handed out) is ignored.
  bool insert(uint64_t id) {
    if (id == kEmpty) return false;
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (size_t i = slot_of(id);; i = (i + 1) & mask_) {
      uint64_t& s = slots_[i];
      if (s == id) return false;
      if (s == kEmpty) {
        s = id;
        ++size_;
        return true;
      }
    }
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Forgets every id and releases the table.
  void clear() {
    std::vector<uint64_t>().swap(slots_);
    size_ = 0;
    mask_ = 0;
    shift_ = 64;
  }

 private:
  static constexpr uint64_t kEmpty = 0;

  size_t slot_of(uint64_t id) const {
    return size_t((id * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }

  void grow() {
    std::vector<uint64_t> old;
    old.swap(slots_);
    const size_t capacity = old.empty() ? 64 : old.size() * 2;
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    shift_ = 64 - __builtin_ctzll(capacity);
    size_ = 0;
    for (uint64_t id : old) {
      if (id != kEmpty) insert(id);
    }
  }

  std::vector<uint64_t> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace strata::autograd
