#include <strata/core/op_id.h>

#include <cstring>

namespace strata {

namespace {
constexpr const char* kOpNames[] = {
#define STRATA_OP_NAME(id, name, family) name,
    STRATA_FOR_EACH_OP(STRATA_OP_NAME)
#undef STRATA_OP_NAME
};
}  // namespace

const char* op_name(OpId id) { return kOpNames[size_t(id)]; }

bool op_from_name(const char* name, OpId* out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (std::strcmp(kOpNames[i], name) == 0) {
      *out = OpId(i);
      return true;
    }
  }
  return false;
}

}  // namespace strata
