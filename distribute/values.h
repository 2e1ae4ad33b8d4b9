// Distributed values: PerReplica<T> holds one value per local replica (what Strategy::run
// returns and what a distributed dataset yields); Mirrored<T> is a PerReplica whose
// values are known to be equal.
#pragma once

#include <type_traits>
#include <vector>

#include <strata/core/error.h>

namespace strata::distribute {

template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  const std::vector<T>& values() const { return values_; }
  size_t size() const { return values_.size(); }
  const T& operator[](size_t replica) const {
    STRATA_CHECK(replica < values_.size(), "PerReplica: replica ", replica, " out of range for ",
                 values_.size(), " replicas");
    return values_[replica];
  }
  auto begin() const { return values_.begin(); }
  auto end() const { return values_.end(); }

 private:
  std::vector<T> values_;
};

template <typename T>
class Mirrored : public PerReplica<T> {
 public:
  using PerReplica<T>::PerReplica;
};

template <typename T> struct is_per_replica : std::false_type {};
template <typename T> struct is_per_replica<PerReplica<T>> : std::true_type {};
template <typename T> struct is_per_replica<Mirrored<T>> : std::true_type {};

// The value replica r sees for a run() argument: its component of a PerReplica, or the
// argument itself.
template <typename T>
const auto& select_replica(const T& arg, int replica) {
  if constexpr (is_per_replica<T>::value) {
    return arg[size_t(replica)];
  } else {
    return arg;
  }
}

}  // namespace strata::distribute
