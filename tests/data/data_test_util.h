// Helpers for the data/ tests: turning elements into comparable values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <strata/data/dataset.h>
#include "tests/test_util.h"
#include "tests/temp_dir.h"  // TempDir

namespace strata::testing {

// A printable, comparable form of an element: each component's dtype, shape and values.
inline std::string element_str(const data::Element& e) {
  std::ostringstream os;
  for (const auto& t : e) {
    os << dtype_name(t.dtype()) << shape_str(t.shape()) << '{';
    for (double v : t.to_vector<double>()) os << v << ',';
    os << '}';
  }
  return os.str();
}

// Every remaining element of `it`.
inline std::vector<std::string> drain(data::Iterator& it) {
  std::vector<std::string> out;
  while (auto e = it.next()) out.push_back(element_str(*e));
  return out;
}

// The first `n` elements of `it` (fewer when it ends).
inline std::vector<std::string> take_n(data::Iterator& it, int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    auto e = it.next();
    if (!e) break;
    out.push_back(element_str(*e));
  }
  return out;
}

// Component `c` of each element of one iteration, flattened to int64 values.
inline std::vector<int64_t> ints(const data::Dataset& ds, size_t c = 0) {
  std::vector<int64_t> out;
  for (auto& e : ds) {
    for (int64_t v : e.at(c).to_vector<int64_t>()) out.push_back(v);
  }
  return out;
}

inline std::vector<int64_t> ints(data::Iterator& it, size_t c = 0) {
  std::vector<int64_t> out;
  while (auto e = it.next()) {
    for (int64_t v : e->at(c).to_vector<int64_t>()) out.push_back(v);
  }
  return out;
}

inline std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace strata::testing
