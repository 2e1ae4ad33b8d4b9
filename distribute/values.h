// Distributed values: PerReplica<T> holds one value per local replica (what Strategy::run
// returns and what a distributed dataset yields); Mirrored<T> is a PerReplica whose
// values are known to be equal.
#pragma once

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>
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

// ---- what Strategy::run accepts (its constraints name the argument that does not fit) ----

// The type replica r receives for a run() argument of type T.
template <typename T>
using replica_value_t = decltype(select_replica(std::declval<const T&>(), 0));

template <typename T> struct is_optional_per_replica : std::false_type {};
template <typename T> struct is_optional_per_replica<std::optional<T>> : is_per_replica<T> {};

// A run() argument: a PerReplica / Mirrored value (each replica receives its component) or
// any other value (every replica receives it). Not an std::optional of a per-replica value
// — DistributedIterator::next()'s result: test it and pass the value,
//   if (auto batch = iterator.next()) strategy.run(step, *batch);
template <typename T>
concept RunArgument = !is_optional_per_replica<std::remove_cvref_t<T>>::value;

// fn can be called with what each replica receives for args (replica_value_t<Args>...).
template <typename Fn, typename... Args>
concept ReplicaCallable = std::invocable<Fn&, replica_value_t<Args>...>;

}  // namespace strata::distribute
