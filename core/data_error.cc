#include <strata/core/data_error.h>

#include <strata/core/error.h>

namespace strata {

std::string data_error_message(const DataError& e) {
  switch (e.kind) {
    case DataErrorKind::LabelOutOfRange:
      return detail::concat(op_name(e.op), ": label ", e.value, " at position ", e.position,
                            " is out of range [0, ", e.limit, ")");
    case DataErrorKind::IndexOutOfRange:
      return detail::concat(op_name(e.op), ": index ", e.value, " is out of range for axis ", e.axis, " of extent ", e.limit);
    case DataErrorKind::None: break;
  }
  return detail::concat(op_name(e.op), ": data error of unknown kind ", int(e.kind));
}

void raise_data_error(const DataError& e) { throw Error(data_error_message(e)); }

}  // namespace strata
