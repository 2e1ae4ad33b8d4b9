// TempDir: a fresh directory for one test, removed with everything in it at scope exit.
//
// Created with mkdtemp under the system's temporary directory, so its name is unique
// across the processes of a test run (CTest runs programs in parallel, and the
// multi-process tests launch several strata binaries at once).
#pragma once

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <strata/core/error.h>

namespace strata::testing {

struct TempDir {
  // `tag` names the directory (strata_<tag>_XXXXXX), for finding what a failed test left.
  explicit TempDir(const std::string& tag = "test") {
    const std::string pattern = (std::filesystem::temp_directory_path() / ("strata_" + tag + "_XXXXXX")).string();
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    STRATA_CHECK(::mkdtemp(name.data()) != nullptr, "TempDir: mkdtemp(", pattern, ") failed");
    path = name.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }

  std::filesystem::path path;
};

}  // namespace strata::testing
