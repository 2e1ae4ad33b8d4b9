// strata::Error — the one exception type every misuse raises.
//
// Messages follow "op: what was wrong: what was given (what was expected)", e.g.
// "matmul: inner dimensions differ: [2,3] @ [4,5]". Build them with STRATA_CHECK or
// strata::error(...) which stream any printable arguments together.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws strata::Error with the streamed arguments as its message.
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(detail::concat(std::forward<Args>(args)...));
}

}  // namespace strata

// STRATA_CHECK(cond, "op: ", "message parts", ...) throws strata::Error when cond is false.
#define STRATA_CHECK(cond, ...)              \
  do {                                       \
    if (!(cond)) ::strata::fail(__VA_ARGS__); \
  } while (0)
