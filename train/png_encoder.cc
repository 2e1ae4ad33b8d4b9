#include <strata/train/png_encoder.h>

#include <zlib.h>

#include <cstring>
#include <limits>
#include <vector>

#include <strata/core/error.h>

namespace strata::train {

namespace {

void put_u32(std::string& out, uint32_t v) {
  const char bytes[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.append(bytes, 4);
}

// length, type, data, CRC-32 of type and data.
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.append(type, 4);
  out += data;
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(out.data() + start), uInt(out.size() - start));
  put_u32(out, uint32_t(crc));
}

uint8_t colour_type(int channels) {
  switch (channels) {
    case 1: return 0;  // greyscale
    case 2: return 4;  // greyscale with alpha
    case 3: return 2;  // truecolour
    default: return 6;  // truecolour with alpha
  }
}

}  // namespace

std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels) {
  STRATA_CHECK(channels >= 1 && channels <= 4, "encode_png: images have 1 to 4 channels, got ", channels);
  // PNG's dimensions are 31-bit; zlib's single-call compression takes a uLong length.
  constexpr int64_t kMaxSide = std::numeric_limits<int32_t>::max();
  STRATA_CHECK(height >= 1 && width >= 1 && height <= kMaxSide && width <= kMaxSide,
               "encode_png: an image needs 1 to 2^31 - 1 rows and columns, got ", height, "x", width);
  const size_t row = size_t(width) * size_t(channels);
  STRATA_CHECK(row + 1 <= std::numeric_limits<uLong>::max() / size_t(height),
               "encode_png: a ", height, "x", width, "x", channels, " image is too large to encode");
  // Each row prefixed with its filter type, 0 (none).
  std::vector<Bytef> raw(size_t(height) * (row + 1));
  for (int64_t y = 0; y < height; ++y) {
    raw[size_t(y) * (row + 1)] = 0;
    std::memcpy(&raw[size_t(y) * (row + 1) + 1], pixels + size_t(y) * row, row);
  }
  uLongf compressed_size = compressBound(uLong(raw.size()));
  std::string compressed(compressed_size, '\0');
  const int rc = compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size, raw.data(),
                           uLong(raw.size()), Z_DEFAULT_COMPRESSION);
  STRATA_CHECK(rc == Z_OK, "encode_png: zlib's compress2 failed (", rc, ") on a ", height, "x", width, " image");
  compressed.resize(compressed_size);

  std::string header;
  put_u32(header, uint32_t(width));
  put_u32(header, uint32_t(height));
  // bit depth 8, colour type, compression 0 (deflate), filter method 0, no interlace.
  const char tail[5] = {8, char(colour_type(channels)), 0, 0, 0};
  header.append(tail, 5);

  std::string out("\x89PNG\r\n\x1a\n", 8);
  put_chunk(out, "IHDR", header);
  // The zlib stream in IDAT chunks of at most 1 MiB (a chunk's length is 31-bit; decoders
  // read the chunks' data as one stream).
  constexpr size_t kIdatBytes = size_t(1) << 20;
  for (size_t at = 0; at < compressed.size(); at += kIdatBytes)
    put_chunk(out, "IDAT", compressed.substr(at, kIdatBytes));
  put_chunk(out, "IEND", "");
  return out;
}

}  // namespace strata::train
