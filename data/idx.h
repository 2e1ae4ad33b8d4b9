// IDX files (the MNIST container): a big-endian header — two zero bytes, a type code, the
// number of dimensions, then each dimension as a u32 — followed by the values row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/shape.h>

namespace strata::data {

struct IdxArray {
  uint8_t type_code = 0;      // 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
  Shape dims;                 // e.g. [10000, 28, 28]
  std::vector<uint8_t> bytes; // the whole (decompressed) file
  size_t data_offset = 0;     // where the values start in `bytes`

  const uint8_t* data() const { return bytes.data() + data_offset; }
};

// Size in bytes of one value of an IDX type code (0 when the code is not an IDX type).
size_t idx_type_size(uint8_t type_code);

// Reads an IDX file, gzip-compressed or raw. Checks the magic number, the dimension
// count and that the payload is exactly as long as the dimensions say; any mismatch is a
// strata::Error naming the file and what is wrong.
IdxArray read_idx(const std::string& path);
// The same checks on bytes already in memory (`path` names them in errors).
IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& path);

}  // namespace strata::data
