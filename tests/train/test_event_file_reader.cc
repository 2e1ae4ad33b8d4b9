// The event-file reader (train/event_file_reader.h): what SummaryWriter writes reads back
// field for field, and damaged files — a flipped bit in either checksum, a truncated
// record, a malformed Event — are refused with a strata::Error naming the record.
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "tests/test_util.h"
#include <strata/train/crc32c.h>
#include <strata/train/event_file_reader.h>
#include <strata/train/summary_writer.h>

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::train;

namespace {

struct EventReaderTempDir {
  fs::path path;
  EventReaderTempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("strata_event_reader_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~EventReaderTempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string event_reader_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One TFRecord around `payload`, framed as TensorFlow frames it.
std::string event_reader_record(const std::string& payload) {
  std::string out(8, '\0');
  const uint64_t n = payload.size();
  std::memcpy(out.data(), &n, 8);
  const uint32_t len_crc = crc32c_mask(crc32c(out.data(), 8));
  const uint32_t data_crc = crc32c_mask(crc32c(payload));
  out.append(reinterpret_cast<const char*>(&len_crc), 4);
  out += payload;
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

}  // namespace

TEST_CASE("event file reader: reads back what SummaryWriter wrote", "[train][summary]") {
  EventReaderTempDir dir;
  fs::path file;
  {
    SummaryWriter w(dir.path, 0.0);
    w.scalar("loss", 0.25, 3);
    w.histogram("w", Tensor::from_vector<float>({-1, 0.5f, 0.5f, 2}, {4}), 4);
    w.text("note", "hello", 5);
    file = w.file_path();
  }
  const std::vector<SummaryEvent> events = read_event_file(file);
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].values.empty());
  CHECK(events[0].wall_time > 1.6e9);

  REQUIRE(events[1].values.size() == 1);
  CHECK(events[1].step == 3);
  CHECK(events[1].values[0].tag == "loss");
  CHECK(events[1].values[0].plugin_name == "scalars");
  REQUIRE(events[1].values[0].simple_value.has_value());
  CHECK(*events[1].values[0].simple_value == 0.25f);

  REQUIRE(events[2].values.size() == 1);
  CHECK(events[2].step == 4);
  REQUIRE(events[2].values[0].histogram.has_value());
  const SummaryHistogram& h = *events[2].values[0].histogram;
  CHECK(h.min == -1);
  CHECK(h.max == 2);
  CHECK(h.num == 4);
  CHECK(h.sum == 2);
  CHECK(h.sum_squares == 5.5);
  REQUIRE(h.bucket.size() == h.bucket_limit.size());
  double total = 0;
  for (double b : h.bucket) total += b;
  CHECK(total == 4);

  REQUIRE(events[3].values.size() == 1);
  CHECK(events[3].step == 5);
  CHECK(events[3].values[0].plugin_name == "text");
  CHECK(events[3].values[0].strings == std::vector<std::string>{"hello"});
}

TEST_CASE("event file reader: damaged files are refused naming the record", "[train][summary]") {
  EventReaderTempDir dir;
  fs::path file;
  {
    SummaryWriter w(dir.path, 0.0);
    w.scalar("loss", 1.0, 1);
    file = w.file_path();
  }
  const std::string good = event_reader_bytes(file);
  REQUIRE(read_tfrecords(good, "good").size() == 2);
  uint64_t first = 0;
  std::memcpy(&first, good.data(), 8);
  const size_t second = 16 + size_t(first);  // offset of record 1

  std::string bad_length_crc = good;
  bad_length_crc[second + 8] ^= 1;
  CHECK_THROWS_WITH(read_tfrecords(bad_length_crc, "f"), Catch::Contains("record 1") &&
                                                               Catch::Contains("length checksum mismatch"));
  std::string bad_payload = good;
  bad_payload[second + 13] ^= 0x40;
  CHECK_THROWS_WITH(read_tfrecords(bad_payload, "f"), Catch::Contains("record 1") &&
                                                          Catch::Contains("payload checksum mismatch"));
  CHECK_THROWS_WITH(read_tfrecords(good.substr(0, good.size() - 1), "f"),
                    Catch::Contains("record 1") && Catch::Contains("truncated"));
  CHECK_THROWS_WITH(read_tfrecords(good + std::string(5, '\0'), "f"),
                    Catch::Contains("record 2") && Catch::Contains("truncated"));
  // A length that points far past the end: refused before anything is allocated.
  std::string huge = good.substr(0, second);
  const uint64_t n = uint64_t(1) << 62;
  huge.append(reinterpret_cast<const char*>(&n), 8);
  const uint32_t crc = crc32c_mask(crc32c(huge.data() + second, 8));
  huge.append(reinterpret_cast<const char*>(&crc), 4);
  CHECK_THROWS_WITH(read_tfrecords(huge, "f"), Catch::Contains("record 1") && Catch::Contains("truncated"));

  // Well-framed records whose payloads are not Events.
  const std::string cut_varint = "\x10\xff";             // step: a varint that never ends
  const std::string past_end = "\x2a\x05\x0a";           // summary: 5 bytes announced, 1 there
  const std::string wrong_type("\x09\x00\x00\x00\x00", 5);  // wall_time: fixed64 with 4 bytes
  const std::string group = "\x0b";                      // wire type 3 (a group)
  for (const std::string& payload : {cut_varint, past_end, wrong_type, group}) {
    const fs::path p = dir.path / "bad.tfevents";
    std::ofstream(p, std::ios::binary) << event_reader_record(payload);
    CHECK_THROWS_WITH(read_event_file(p), Catch::Contains("record 0") && Catch::Contains("malformed Event"));
  }
  CHECK_THROWS_WITH(read_event_file(dir.path / "missing"), Catch::Contains("cannot open"));
}
