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

namespace {

// What an IDX header declares: its own size and the payload's, in bytes.
struct IdxLayout {
  size_t header = 0;
  uint64_t payload = 0;
  Shape dims;
};

// Checks the magic number and reads the dimensions from the first bytes of an IDX file.
// Needs only the header (4 + 4 * ndims bytes), so a compressed file's layout is known
// before its payload is decompressed.
IdxLayout idx_layout(const uint8_t* bytes, size_t size, const std::string& path) {
  constexpr const char* op = "read_idx";
  STRATA_CHECK(size >= 4, op, ": '", path, "' is truncated: ", size,
               " bytes, shorter than the 4-byte IDX magic number");
  const uint32_t magic = uint32_t(bytes[0]) << 24 | uint32_t(bytes[1]) << 16 |
                         uint32_t(bytes[2]) << 8 | uint32_t(bytes[3]);
  const uint8_t type = bytes[2];
  const int64_t ndims = bytes[3];
  STRATA_CHECK(bytes[0] == 0 && bytes[1] == 0 && idx_type_size(type) != 0 && ndims >= 1, op, ": '",
               path, "' is not an IDX file: bad magic number 0x", std::hex, magic, std::dec,
               " (expected 0x000008NN..0x00000ENN with NN >= 1 dimensions)");
  IdxLayout layout;
  layout.header = 4 + 4 * size_t(ndims);
  STRATA_CHECK(size >= layout.header, op, ": '", path, "' is truncated: its header declares ", ndims,
               " dimensions (", layout.header, " header bytes) but the file has ", size, " bytes");
  uint64_t count = 1;
  for (int64_t d = 0; d < ndims; ++d) {
    const uint8_t* p = bytes + 4 + 4 * d;
    const uint32_t extent = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
    layout.dims.push_back(int64_t(extent));
    STRATA_CHECK(extent == 0 || count <= std::numeric_limits<uint64_t>::max() / 16 / extent, op,
                 ": '", path, "' is corrupt: dimensions ", shape_str(layout.dims), " overflow");
    count *= extent;
  }
  layout.payload = count * idx_type_size(type);
  return layout;
}

}  // namespace

IdxArray parse_idx(std::vector<uint8_t> bytes, const std::string& path) {
  constexpr const char* op = "read_idx";
  const IdxLayout layout = idx_layout(bytes.data(), bytes.size(), path);
  IdxArray out;
  out.type_code = bytes[2];
  out.dims = layout.dims;
  const uint64_t expected = layout.payload;
  const uint64_t actual = bytes.size() - layout.header;
  STRATA_CHECK(actual >= expected, op, ": '", path, "' is truncated: dimensions ", shape_str(out.dims),
               " need ", expected, " bytes of data but the file has ", actual);
  STRATA_CHECK(actual == expected, op, ": '", path, "' is corrupt: dimensions ", shape_str(out.dims),
               " need ", expected, " bytes of data but the file has ", actual - expected,
               " bytes more");
  out.bytes = std::move(bytes);
  out.data_offset = layout.header;
  return out;
}

IdxArray read_idx(const std::string& path) {
  constexpr const char* op = "read_idx";
  std::vector<uint8_t> bytes = read_file_bytes(path, op);
  if (!is_gzip(bytes)) return parse_idx(std::move(bytes), path);
  // A gzip stream is decompressed no further than the header says the file is (plus one
  // byte, to tell "longer than declared" apart): a small file that inflates to gigabytes
  // (a gzip bomb) is rejected after reading what its header declares, never all of it.
  const std::vector<uint8_t> magic = gunzip_at_most(bytes, 4, path, op);
  const size_t header = magic.size() == 4 ? 4 + 4 * size_t(magic[3]) : magic.size();
  const std::vector<uint8_t> head = gunzip_at_most(bytes, header, path, op);
  const IdxLayout layout = idx_layout(head.data(), head.size(), path);
  const uint64_t declared = uint64_t(layout.header) + layout.payload;
  STRATA_CHECK(declared < std::numeric_limits<size_t>::max(), op, ": '", path, "' is corrupt: dimensions ",
               shape_str(layout.dims), " overflow");
  std::vector<uint8_t> all = gunzip_at_most(bytes, size_t(declared) + 1, path, op);
  STRATA_CHECK(all.size() <= declared, op, ": '", path, "' is corrupt: its header declares dimensions ",
               shape_str(layout.dims), " (", declared, " bytes with the header) but the gzip stream holds more; "
               "stopped decompressing after ", all.size(), " bytes");
  return parse_idx(std::move(all), path);
}

}  // namespace strata::data
