// The only test source compiled with the checkout's absolute paths (see test_paths.h).
#include "tests/test_paths.h"

namespace strata::testing {

std::filesystem::path shared_dir() {
  std::filesystem::path p(STRATA_TEST_SHARED_DIR);
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::string source_dir() { return STRATA_TEST_SOURCE_DIR; }

std::string bin_dir() { return STRATA_TEST_BIN_DIR; }

std::string bin_path(const std::string& name) { return bin_dir() + "/" + name; }

}  // namespace strata::testing
