// Test helpers that capture error messages, for comparing a data error the CPU raises at
// the call with the one the emulated device defers to the next synchronisation.
#pragma once

#include <string>

#include <strata/core/error.h>
#include <strata/core/stream.h>

namespace strata::cuda_testing {

// The message of the strata::Error fn() raises, or "(no error)".
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The error synchronize(device) raises (a deferred data error), or "" when none.
inline std::string deferred_error(Device device = cuda(0)) {
  const std::string m = error_of([&] { synchronize(device); });
  return m == "(no error)" ? std::string() : m;
}

}  // namespace strata::cuda_testing
