// Where tests find the checkout, the build's programs and ../shared.
//
// The absolute paths are compiled into one translation unit only (test_paths.cc): a
// compile definition holding them would differ between checkouts and make every test
// source miss the compiler cache in a fresh clone (CCACHE_BASEDIR rewrites -I and source
// paths, not the values of -D). Everything else reaches them through these functions.
#pragma once

#include <filesystem>
#include <string>

namespace strata::testing {

// ../shared (golden cases, MNIST) or empty when absent from this checkout.
std::filesystem::path shared_dir();
// The repository root.
std::string source_dir();
// The build's bin/ (CMAKE_RUNTIME_OUTPUT_DIRECTORY): strata's programs and the test helpers.
std::string bin_dir();
// bin_dir() + "/" + name.
std::string bin_path(const std::string& name);

}  // namespace strata::testing

// The spellings the tests use (once compile definitions with absolute paths): each is a
// std::string expression.
#define STRATA_SOURCE_DIR (::strata::testing::source_dir())
#define STRATA_BIN_DIR (::strata::testing::bin_dir())
// Programs started by the distribute and tools tests (all built into bin/).
#define STRATA_TRAIN_BIN (::strata::testing::bin_path("strata-train"))
#define STRATA_LAUNCH_BIN (::strata::testing::bin_path("strata-launch"))
#define STRATA_MWMS_HELPER (::strata::testing::bin_path("strata_mwms_helper"))
#define STRATA_DISTRIBUTE_HELPER (::strata::testing::bin_path("strata_distribute_helper"))
#define STRATA_PS_HELPER (::strata::testing::bin_path("strata_ps_helper"))
