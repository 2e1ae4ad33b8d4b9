// Helpers shared by the fuzz targets (fuzz/*_fuzz.cc): a per-process scratch directory for
// the parsers that read files, and the splitting of one input into several parts.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace strata::fuzz {

// A directory of this process's own (on tmpfs when there is one: a file is written per
// input), removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      std::error_code ec;
      const std::filesystem::path base =
          std::filesystem::is_directory("/dev/shm", ec) ? std::filesystem::path("/dev/shm")
                                                        : std::filesystem::temp_directory_path();
      path = base / ("strata_fuzz_" + std::to_string(::getpid()));
      std::filesystem::remove_all(path, ec);
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) {
    std::perror(("fuzz: cannot write " + path.string()).c_str());
    std::abort();
  }
}

// Splits `input` at every occurrence of `separator` (a marker that mutations keep or drop
// as a whole, unlike a length prefix that almost every mutation breaks).
inline std::vector<std::string_view> split_parts(std::string_view input, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = input.find(separator);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + separator.size());
  }
  parts.push_back(input);
  return parts;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

inline volatile unsigned touch_sink = 0;

// Reads every byte of a buffer the parser returned, so that AddressSanitizer sees a size
// that overstates the allocation; the result feeds a volatile sink.
inline void touch(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  unsigned sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i];
  touch_sink = sum;
}

}  // namespace strata::fuzz
