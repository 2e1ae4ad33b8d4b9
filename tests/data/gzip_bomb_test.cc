// A gzip bomb — a small compressed file that inflates far beyond what its IDX header
// declares — is rejected after decompressing at most the declared size (+1 byte), never
// all of it. Before the bound, a 13 MB file inflated to 4.2 GB before the reader noticed.
// The stream here inflates to 64 MiB (enough to tell "bounded" from "read it all" through
// the reported byte count) while the file and every buffer the test holds stay small.
#include <zlib.h>

#include <strata/data/file_io.h>
#include <strata/data/idx.h>
#include "tests/data/data_test_util.h"

using namespace strata;

namespace {

// gzip of: an IDX u8 header declaring `declared` values, those values, then `extra`
// zero bytes — deflated in 1 MiB pieces so that the raw stream never exists in memory.
std::vector<uint8_t> bomb_gzip_stream(uint32_t declared, size_t extra) {
  std::vector<uint8_t> head{0, 0, 0x08, 1, uint8_t(declared >> 24), uint8_t(declared >> 16),
                            uint8_t(declared >> 8), uint8_t(declared)};
  head.resize(head.size() + declared, 7);
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out;
  std::vector<uint8_t> piece(size_t(1) << 20, 0);
  uint8_t buf[1 << 16];
  auto feed = [&](const uint8_t* data, size_t n, int flush) {
    zs.next_in = const_cast<Bytef*>(data);
    zs.avail_in = uInt(n);
    do {
      zs.next_out = buf;
      zs.avail_out = sizeof buf;
      const int rc = deflate(&zs, flush);
      REQUIRE(rc != Z_STREAM_ERROR);
      out.insert(out.end(), buf, buf + (sizeof buf - zs.avail_out));
    } while (zs.avail_out == 0);
  };
  feed(head.data(), head.size(), Z_NO_FLUSH);
  for (size_t left = extra; left > 0;) {
    const size_t n = std::min(left, piece.size());
    feed(piece.data(), n, Z_NO_FLUSH);
    left -= n;
  }
  feed(nullptr, 0, Z_FINISH);
  deflateEnd(&zs);
  return out;
}

}  // namespace

TEST_CASE("gzip bomb: read_idx stops at the size the IDX header declares", "[data][idx]") {
  constexpr size_t kExtra = size_t(64) << 20;  // inflates to 64 MiB beyond the declared 24 bytes
  const std::vector<uint8_t> bomb = bomb_gzip_stream(16, kExtra);
  REQUIRE(bomb.size() < kExtra / 100);  // a small file...
  testing::TempDir dir;
  const std::string path = dir.file("bomb-idx1-ubyte.gz");
  testing::write_bytes(path, bomb);
  // ...rejected after 8 header + 16 declared + 1 bytes: the error reports how far it read.
  CHECK_THROWS_WITH(data::read_idx(path), Catch::Contains(path) && Catch::Contains("corrupt") &&
                                              Catch::Contains("[16]") &&
                                              Catch::Contains("stopped decompressing after 25 bytes"));
}

TEST_CASE("gzip bomb: gunzip_at_most returns exactly the bound and no more", "[data][idx]") {
  const std::vector<uint8_t> bomb = bomb_gzip_stream(4, size_t(8) << 20);
  const auto first = data::gunzip_at_most(bomb, 10, "bomb", "test");
  REQUIRE(first.size() == 10);
  CHECK(first[2] == 0x08);
  CHECK(first[7] == 4);
  CHECK(first[8] == 7);
  // A stream shorter than the bound is read to its end, CRC checked, as gunzip does.
  const std::vector<uint8_t> small = bomb_gzip_stream(4, 0);
  CHECK(data::gunzip_at_most(small, 1000, "small", "test").size() == 12);
  CHECK(data::gunzip(small, "small", "test").size() == 12);
  // An honest gzip IDX file still loads.
  testing::TempDir dir;
  testing::write_bytes(dir.file("ok.gz"), small);
  const data::IdxArray a = data::read_idx(dir.file("ok.gz"));
  CHECK(a.dims == Shape{4});
  CHECK(a.data()[3] == 7);
}
