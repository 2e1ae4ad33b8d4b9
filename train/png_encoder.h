// PNG encoding of 8-bit images, for TensorBoard image summaries (SummaryWriter::image).
//
// A PNG file is a signature and chunks (length, type, data, CRC-32): IHDR (size, 8-bit
// depth, colour type), IDAT (the rows, each prefixed with filter type 0, compressed as
// one zlib stream, cut into chunks of at most 1 MiB) and IEND. zlib does the compression and the CRC; this file only lays
// out the container (PNG specification, ISO/IEC 15948).
#pragma once

#include <cstdint>
#include <string>

namespace strata::train {

// `pixels`: height rows of width * channels bytes, interleaved (channels 1: grey,
// 2: grey + alpha, 3: RGB, 4: RGBA). Throws strata::Error on bad sizes.
std::string encode_png(const uint8_t* pixels, int64_t height, int64_t width, int channels);

}  // namespace strata::train
