#include <strata/data/file_io.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <strata/core/error.h>

namespace strata::data {

std::vector<uint8_t> read_file_bytes(const std::string& path, const char* op) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(op, ": cannot open '", path, "': ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  STRATA_CHECK(size >= 0, op, ": cannot determine the size of '", path, "'");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), size);
  STRATA_CHECK(in.gcount() == size, op, ": reading '", path, "' stopped after ", in.gcount(),
               " of ", size, " bytes");
  return bytes;
}

bool is_gzip(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed, const std::string& path,
                            const char* op) {
  return gunzip_at_most(compressed, std::numeric_limits<size_t>::max(), path, op);
}

std::vector<uint8_t> gunzip_at_most(const std::vector<uint8_t>& compressed, size_t max_bytes,
                                    const std::string& path, const char* op) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (CRC and length are checked).
  STRATA_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, op, ": zlib inflateInit2 failed");
  struct Guard {
    z_stream* zs;
    ~Guard() { inflateEnd(zs); }
  } guard{&zs};

  std::vector<uint8_t> out;
  // The trailer's ISIZE (size mod 2^32) is a good first guess for the output size.
  if (compressed.size() >= 18) {
    const uint8_t* t = compressed.data() + compressed.size() - 4;
    const uint32_t isize = uint32_t(t[0]) | uint32_t(t[1]) << 8 | uint32_t(t[2]) << 16 |
                           uint32_t(t[3]) << 24;
    // ISIZE comes from the file: never reserve more than the caller allows, nor more than
    // the input can inflate to (deflate expands at most 1032:1), so that a few bytes
    // claiming a 2 GB content reserve nothing near that (found by fuzz/idx_fuzz.cc).
    const size_t inflatable = compressed.size() > (size_t(1) << 31) / 1032 ? size_t(1) << 31
                                                                           : compressed.size() * 1032;
    out.reserve(std::min({size_t(isize), max_bytes, inflatable}));
  }
  constexpr size_t kChunk = size_t(1) << 20;
  constexpr size_t kMaxAvail = std::numeric_limits<uInt>::max();
  size_t in_pos = 0;
  bool stream_end = false;
  for (;;) {
    if (zs.avail_in == 0 && in_pos < compressed.size()) {
      const size_t n = std::min(kMaxAvail, compressed.size() - in_pos);
      zs.next_in = const_cast<Bytef*>(compressed.data() + in_pos);
      zs.avail_in = uInt(n);
      in_pos += n;
    }
    const size_t before = out.size();
    if (before == max_bytes) return out;  // the caller's bound: stop inflating here
    const size_t chunk = std::min(kChunk, max_bytes - before);
    out.resize(before + chunk);
    zs.next_out = out.data() + before;
    zs.avail_out = uInt(chunk);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(before + (chunk - zs.avail_out));
    if (rc == Z_STREAM_END) {
      stream_end = true;
      // Another gzip member may follow (as `cat a.gz b.gz` makes).
      if (zs.avail_in == 0 && in_pos == compressed.size()) break;
      STRATA_CHECK(inflateReset(&zs) == Z_OK, op, ": zlib inflateReset failed on '", path, "'");
      stream_end = false;
      continue;
    }
    if (rc == Z_DATA_ERROR) {
      fail(op, ": '", path, "' is corrupt: gzip data error after ", zs.total_in,
           " compressed bytes (zlib: ", zs.msg ? zs.msg : "invalid data", ")");
    }
    if (rc == Z_MEM_ERROR) fail(op, ": out of memory decompressing '", path, "'");
    if (rc == Z_NEED_DICT) fail(op, ": '", path, "' is not a plain gzip stream (needs a dictionary)");
    if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == 0 && in_pos == compressed.size() &&
                              zs.avail_out != 0)) {
      // No progress possible: the input ended inside the stream.
      break;
    }
    STRATA_CHECK(rc == Z_OK, op, ": zlib error ", rc, " decompressing '", path, "'");
  }
  STRATA_CHECK(stream_end, op, ": '", path, "' is truncated: the gzip stream ends after ",
               compressed.size(), " compressed bytes (", out.size(),
               " bytes decompressed) without its end marker");
  return out;
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path, const char* op) {
  auto bytes = read_file_bytes(path, op);
  if (is_gzip(bytes)) return gunzip(bytes, path, op);
  return bytes;
}

}  // namespace strata::data
