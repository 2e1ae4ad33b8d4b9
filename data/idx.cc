#include <strata/data/idx.h>

#include <limits>

#include <strata/core/error.h>
#include <strata/data/file_io.h>

namespace strata::data {

size_t idx_type_size(uint8_t type_code) {
  switch (type_code) {
    case 0x08:
    case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C:
    case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& path) {
  constexpr const char* op = "read_idx";
  STRATA_CHECK(bytes.size() >= 4, op, ": '", path, "' is truncated: ", bytes.size(),
               " bytes, shorter than the 4-byte IDX magic number");
  const uint32_t magic = uint32_t(bytes[0]) << 24 | uint32_t(bytes[1]) << 16 |
                         uint32_t(bytes[2]) << 8 | uint32_t(bytes[3]);
  const uint8_t type = bytes[2];
  const int64_t ndims = bytes[3];
  STRATA_CHECK(bytes[0] == 0 && bytes[1] == 0 && idx_type_size(type) != 0 && ndims >= 1, op, ": '",
               path, "' is not an IDX file: bad magic number 0x", std::hex, magic, std::dec,
               " (expected 0x000008NN..0x00000ENN with NN >= 1 dimensions)");
  const size_t header = 4 + 4 * size_t(ndims);
  STRATA_CHECK(bytes.size() >= header, op, ": '", path, "' is truncated: its header declares ", ndims,
               " dimensions (", header, " header bytes) but the file has ", bytes.size(), " bytes");
  IdxArray out;
  out.type_code = type;
  uint64_t count = 1;
  for (int64_t d = 0; d < ndims; ++d) {
    const uint8_t* p = bytes.data() + 4 + 4 * d;
    const uint32_t extent = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
    out.dims.push_back(int64_t(extent));
    STRATA_CHECK(extent == 0 || count <= std::numeric_limits<uint64_t>::max() / 16 / extent, op,
                 ": '", path, "' is corrupt: dimensions ", shape_str(out.dims), " overflow");
    count *= extent;
  }
  const uint64_t expected = count * idx_type_size(type);
  const uint64_t actual = bytes.size() - header;
  STRATA_CHECK(actual >= expected, op, ": '", path, "' is truncated: dimensions ", shape_str(out.dims),
               " need ", expected, " bytes of data but the file has ", actual);
  STRATA_CHECK(actual == expected, op, ": '", path, "' is corrupt: dimensions ", shape_str(out.dims),
               " need ", expected, " bytes of data but the file has ", actual - expected,
               " bytes more");
  out.bytes = std::move(bytes);
  out.data_offset = header;
  return out;
}

IdxArray read_idx(const std::string& path) {
  return parse_idx(read_maybe_gzip(path, "read_idx"), path);
}

}  // namespace strata::data
