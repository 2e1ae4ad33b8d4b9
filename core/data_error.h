// Data errors: checks that depend on tensor values (a label or an index out of range).
//
// The policy, once for every backend: on CPU the kernel raises at once, from the op call.
// An asynchronous device cannot throw from a kernel, so the kernel records the first such
// error in a small per-device record (a DataError, plain data that device code can write)
// and the next synchronisation of that device — a host read, Tensor::to the host,
// synchronize() — raises it. Both paths build the message with the same function, so the
// error a user sees is the same strata::Error on every device; only its timing differs.
#pragma once

#include <cstdint>
#include <string>

#include <strata/core/op_id.h>

namespace strata {

enum class DataErrorKind : int32_t {
  None = 0,
  LabelOutOfRange,  // sparse cross-entropy: value at position, limit = number of classes
  IndexOutOfRange,  // gather/scatter: value at position, limit = extent of `axis`
};

// Trivially copyable so that device kernels can fill it in place (first error wins).
struct DataError {
  DataErrorKind kind = DataErrorKind::None;
  OpId op = OpId::Neg;
  int64_t value = 0;     // the offending label or index
  int64_t position = 0;  // where it was found (flat position in the label/index tensor)
  int64_t limit = 0;     // the exclusive upper bound it broke
  int64_t axis = 0;      // IndexOutOfRange: the indexed axis

  bool any() const { return kind != DataErrorKind::None; }
};

// The message of a data error, e.g. "gather: index 7 is out of range for axis 0 of
// extent 5".
std::string data_error_message(const DataError& e);
// Throws strata::Error with data_error_message(e).
[[noreturn]] void raise_data_error(const DataError& e);

}  // namespace strata
