// Whole-file reads for the readers in data/, with gzip decompression through zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::data {

// The file's bytes; throws strata::Error naming `op` and the path when it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path, const char* op);

// True when the bytes start with the gzip magic (1f 8b).
bool is_gzip(const std::vector<uint8_t>& bytes);

// Decompresses a gzip stream (concatenated members allowed). A truncated or corrupt
// stream throws strata::Error naming `op`, `path` and what zlib found wrong.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed, const std::string& path,
                            const char* op);

// Like gunzip, but stops once `max_bytes` have been decompressed and returns them: a
// result of exactly max_bytes means "at least that many" (the rest of the stream, its end
// marker and CRC are then not read). A reader that knows how large its content should be
// asks for one byte more and so never inflates a gzip bomb beyond that.
std::vector<uint8_t> gunzip_at_most(const std::vector<uint8_t>& compressed, size_t max_bytes,
                                    const std::string& path, const char* op);

// read_file_bytes, decompressed when the content is gzip (decided by the magic bytes,
// not by the file name).
std::vector<uint8_t> read_maybe_gzip(const std::string& path, const char* op);

}  // namespace strata::data
