#include <strata/train/event_file_reader.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

#include <strata/core/error.h>
#include <strata/train/crc32c.h>

namespace strata::train {

static_assert(std::endian::native == std::endian::little, "TFRecord framing is little-endian");

std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& name) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t index = records.size();
    STRATA_CHECK(bytes.size() - pos >= 12, "read_tfrecords: ", name, ": record ", index, " at offset ", pos,
                 " is truncated: ", bytes.size() - pos, " bytes, less than its 12-byte length header");
    uint64_t length = 0;
    uint32_t length_crc = 0;
    std::memcpy(&length, bytes.data() + pos, 8);
    std::memcpy(&length_crc, bytes.data() + pos + 8, 4);
    STRATA_CHECK(crc32c_unmask(length_crc) == crc32c(bytes.data() + pos, 8), "read_tfrecords: ", name,
                 ": record ", index, " at offset ", pos, ": length checksum mismatch (corrupt file)");
    const size_t left = bytes.size() - pos - 12;
    STRATA_CHECK(left >= 4 && length <= left - 4, "read_tfrecords: ", name, ": record ", index, " at offset ",
                 pos, " is truncated: its length says ", length, " bytes but ", left < 4 ? 0 : left - 4,
                 " follow before the checksum");
    const char* data = bytes.data() + pos + 12;
    uint32_t data_crc = 0;
    std::memcpy(&data_crc, data + length, 4);
    STRATA_CHECK(crc32c_unmask(data_crc) == crc32c(data, size_t(length)), "read_tfrecords: ", name, ": record ",
                 index, " at offset ", pos, ": payload checksum mismatch (corrupt file)");
    records.emplace_back(data, size_t(length));
    pos += 12 + size_t(length) + 4;
  }
  return records;
}

namespace {

// ---- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ----
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Field numbers of train/event.proto.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2, kValueHisto = 5, kValueTensor = 8, kValueMetadata = 9;
constexpr uint32_t kMetadataPluginData = 1, kPluginName = 1;
constexpr uint32_t kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
                   kHistoBucketLimit = 6, kHistoBucket = 7;
constexpr uint32_t kTensorStringVal = 8;

// One field of a message: its number, wire type and value (the varint or fixed bits, or
// the bytes of a length-delimited field).
struct Field {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t bits = 0;
  std::string_view bytes;
};

// Walks the fields of one message; throws naming `name` and the message on malformed input.
class FieldReader {
 public:
  FieldReader(std::string_view message, const std::string& name, const char* what)
      : s_(message), name_(name), what_(what) {}

  bool next(Field& f) {
    if (pos_ == s_.size()) return false;
    const uint64_t key = varint();
    const uint64_t number = key >> 3;
    check(number >= 1 && number <= (uint64_t(1) << 29) - 1, "field number ", number, " is out of range");
    f.number = uint32_t(number);
    f.type = WireType(key & 7);
    switch (f.type) {
      case kVarint: f.bits = varint(); break;
      case kFixed64: f.bits = fixed(8); break;
      case kFixed32: f.bits = fixed(4); break;
      case kLengthDelimited: {
        const uint64_t n = varint();
        check(n <= s_.size() - pos_, "a ", n, "-byte field runs past the end of the ", s_.size(), "-byte message");
        f.bytes = s_.substr(pos_, size_t(n));
        pos_ += size_t(n);
        break;
      }
      default: check(false, "wire type ", uint32_t(f.type), " (groups are not used by event files)");
    }
    return true;
  }

  // The value of `f` as the wire type its field must have.
  double as_double(const Field& f) {
    expect(f, kFixed64);
    return std::bit_cast<double>(f.bits);
  }
  float as_float(const Field& f) {
    expect(f, kFixed32);
    return std::bit_cast<float>(uint32_t(f.bits));
  }
  uint64_t as_varint(const Field& f) {
    expect(f, kVarint);
    return f.bits;
  }
  std::string_view as_bytes(const Field& f) {
    expect(f, kLengthDelimited);
    return f.bytes;
  }
  // A repeated double: packed (one length-delimited run) or one fixed64 per element.
  void append_doubles(const Field& f, std::vector<double>& out) {
    if (f.type == kFixed64) {
      out.push_back(std::bit_cast<double>(f.bits));
      return;
    }
    const std::string_view run = as_bytes(f);
    check(run.size() % 8 == 0, "a packed double field of ", run.size(), " bytes (not a multiple of 8)");
    for (size_t i = 0; i < run.size(); i += 8) {
      uint64_t bits = 0;
      std::memcpy(&bits, run.data() + i, 8);
      out.push_back(std::bit_cast<double>(bits));
    }
  }

 private:
  template <typename... Args>
  void check(bool ok, const Args&... args) {
    if (!ok) fail("read_event_file: ", name_, ": malformed ", what_, " at byte ", pos_, ": ", args...);
  }
  void expect(const Field& f, WireType type) {
    check(f.type == type, "field ", f.number, " has wire type ", uint32_t(f.type), ", expected ", uint32_t(type));
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      check(pos_ < s_.size(), "a varint runs past the end");
      const auto b = uint8_t(s_[pos_++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    check(false, "a varint longer than 10 bytes");
    return 0;
  }
  uint64_t fixed(size_t n) {
    check(s_.size() - pos_ >= n, "a ", n, "-byte fixed field runs past the end");
    uint64_t v = 0;
    std::memcpy(&v, s_.data() + pos_, n);
    pos_ += n;
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
  const std::string& name_;
  const char* what_;
};

SummaryHistogram parse_histogram(std::string_view message, const std::string& name) {
  SummaryHistogram h;
  FieldReader r(message, name, "HistogramProto");
  for (Field f; r.next(f);) {
    switch (f.number) {
      case kHistoMin: h.min = r.as_double(f); break;
      case kHistoMax: h.max = r.as_double(f); break;
      case kHistoNum: h.num = r.as_double(f); break;
      case kHistoSum: h.sum = r.as_double(f); break;
      case kHistoSumSquares: h.sum_squares = r.as_double(f); break;
      case kHistoBucketLimit: r.append_doubles(f, h.bucket_limit); break;
      case kHistoBucket: r.append_doubles(f, h.bucket); break;
      default: break;  // unknown fields are skipped
    }
  }
  return h;
}

std::string parse_plugin_name(std::string_view metadata, const std::string& name) {
  std::string plugin;
  FieldReader r(metadata, name, "SummaryMetadata");
  for (Field f; r.next(f);) {
    if (f.number != kMetadataPluginData) continue;
    FieldReader p(r.as_bytes(f), name, "SummaryMetadata.PluginData");
    for (Field g; p.next(g);)
      if (g.number == kPluginName) plugin = std::string(p.as_bytes(g));
  }
  return plugin;
}

SummaryValue parse_value(std::string_view message, const std::string& name) {
  SummaryValue v;
  FieldReader r(message, name, "Summary.Value");
  for (Field f; r.next(f);) {
    switch (f.number) {
      case kValueTag: v.tag = std::string(r.as_bytes(f)); break;
      case kValueSimpleValue: v.simple_value = r.as_float(f); break;
      case kValueHisto: v.histogram = parse_histogram(r.as_bytes(f), name); break;
      case kValueMetadata: v.plugin_name = parse_plugin_name(r.as_bytes(f), name); break;
      case kValueTensor: {
        FieldReader t(r.as_bytes(f), name, "TensorProto");
        for (Field g; t.next(g);)
          if (g.number == kTensorStringVal) v.strings.emplace_back(t.as_bytes(g));
        break;
      }
      default: break;
    }
  }
  return v;
}

}  // namespace

SummaryEvent parse_summary_event(std::string_view payload, const std::string& name) {
  SummaryEvent e;
  FieldReader r(payload, name, "Event");
  for (Field f; r.next(f);) {
    switch (f.number) {
      case kEventWallTime: e.wall_time = r.as_double(f); break;
      case kEventStep: e.step = int64_t(r.as_varint(f)); break;
      case kEventFileVersion: e.file_version = std::string(r.as_bytes(f)); break;
      case kEventSummary: {
        FieldReader s(r.as_bytes(f), name, "Summary");
        for (Field g; s.next(g);)
          if (g.number == kSummaryValue) e.values.push_back(parse_value(s.as_bytes(g), name));
        break;
      }
      default: break;
    }
  }
  return e;
}

std::vector<SummaryEvent> read_event_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in.good(), "read_event_file: cannot open ", path);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  STRATA_CHECK(!in.bad(), "read_event_file: reading ", path, " failed");
  const std::vector<std::string> records = read_tfrecords(bytes, path.string());
  std::vector<SummaryEvent> events;
  events.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i)
    events.push_back(parse_summary_event(records[i], path.string() + " record " + std::to_string(i)));
  return events;
}

}  // namespace strata::train
