// TensorBoard summaries: the event files are read back by two decoders that share nothing
// with the writer — a wire-format decoder written here, and a Python script using Debian's
// python3-protobuf and python3-crc32c (tests/train/read_tfevents.py).
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cfloat>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "tests/test_util.h"
#include <strata/train/event_file_reader.h>
#include <strata/train/png_encoder.h>
#include <strata/train/summary_writer.h>
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace strata;
using namespace strata::train;

namespace {

using strata::testing::TempDir;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// ---- an independent decoder: CRC32C from its definition, protobuf wire format by hand ----

uint32_t bitwise_crc32c(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}
uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

struct WireField {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t scalar = 0;  // varint, or the raw bits of fixed64/fixed32
  std::string bytes;    // length-delimited
};

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    REQUIRE(pos < s.size());
    const uint8_t b = uint8_t(s[pos++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  FAIL("varint longer than 10 bytes");
  return 0;
}

std::vector<WireField> parse_wire(const std::string& s) {
  std::vector<WireField> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = read_varint(s, pos);
    WireField f;
    f.number = uint32_t(key >> 3);
    f.wire_type = int(key & 7);
    REQUIRE(f.number > 0);
    switch (f.wire_type) {
      case 0: f.scalar = read_varint(s, pos); break;
      case 1:
        REQUIRE(pos + 8 <= s.size());
        std::memcpy(&f.scalar, s.data() + pos, 8);
        pos += 8;
        break;
      case 2: {
        const uint64_t n = read_varint(s, pos);
        REQUIRE(pos + n <= s.size());
        f.bytes = s.substr(pos, n);
        pos += n;
        break;
      }
      case 5: {
        uint32_t v;
        REQUIRE(pos + 4 <= s.size());
        std::memcpy(&v, s.data() + pos, 4);
        f.scalar = v;
        pos += 4;
        break;
      }
      default: FAIL("unexpected wire type " << f.wire_type);
    }
    out.push_back(std::move(f));
  }
  return out;
}

const WireField* find_field(const std::vector<WireField>& fs, uint32_t n, int wire_type) {
  const WireField* found = nullptr;
  for (const auto& f : fs)
    if (f.number == n) {
      REQUIRE(f.wire_type == wire_type);
      found = &f;  // proto semantics: the last occurrence wins
    }
  return found;
}
double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
float as_float(uint64_t bits) {
  const uint32_t b = uint32_t(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
std::vector<double> packed_doubles(const std::string& s) {
  REQUIRE(s.size() % 8 == 0);
  std::vector<double> out(s.size() / 8);
  if (!out.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

struct Histo {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, buckets;
};
struct DecodedValue {
  std::string tag, kind, plugin;
  int64_t data_class = 0;
  double simple_value = 0;
  Histo histo;
  int64_t tensor_dtype = 0;
  bool tensor_has_shape = false;
  std::vector<int64_t> tensor_shape;
  std::vector<std::string> string_val;
};
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string what, file_version;
  std::vector<DecodedValue> values;
};

DecodedValue decode_value(const std::string& s) {
  const auto fs = parse_wire(s);
  DecodedValue v;
  if (auto f = find_field(fs, 1, 2)) v.tag = f->bytes;
  if (auto f = find_field(fs, 9, 2)) {
    const auto md = parse_wire(f->bytes);
    if (auto pd = find_field(md, 1, 2)) {
      const auto plugin_data = parse_wire(pd->bytes);
      if (auto name = find_field(plugin_data, 1, 2)) v.plugin = name->bytes;
    }
    if (auto dc = find_field(md, 4, 0)) v.data_class = int64_t(dc->scalar);
  }
  if (auto f = find_field(fs, 2, 5)) {
    v.kind = "simple_value";
    v.simple_value = as_float(f->scalar);
  }
  if (auto f = find_field(fs, 5, 2)) {
    v.kind = "histo";
    const auto h = parse_wire(f->bytes);
    auto dbl = [&](uint32_t n) {
      auto x = find_field(h, n, 1);
      return x ? as_double(x->scalar) : 0.0;
    };
    v.histo.min = dbl(1);
    v.histo.max = dbl(2);
    v.histo.num = dbl(3);
    v.histo.sum = dbl(4);
    v.histo.sum_squares = dbl(5);
    for (const auto& x : h) {
      if (x.number == 6) v.histo.limits = packed_doubles(x.bytes);
      if (x.number == 7) v.histo.buckets = packed_doubles(x.bytes);
    }
  }
  if (auto f = find_field(fs, 8, 2)) {
    v.kind = "tensor";
    const auto t = parse_wire(f->bytes);
    if (auto d = find_field(t, 1, 0)) v.tensor_dtype = int64_t(d->scalar);
    if (auto sh = find_field(t, 2, 2)) {
      v.tensor_has_shape = true;
      for (const auto& dim : parse_wire(sh->bytes)) {
        REQUIRE(dim.number == 2);
        const auto dim_fields = parse_wire(dim.bytes);
        auto size = find_field(dim_fields, 1, 0);
        v.tensor_shape.push_back(size ? int64_t(size->scalar) : 0);
      }
    }
    for (const auto& x : t)
      if (x.number == 8) v.string_val.push_back(x.bytes);
  }
  return v;
}

// Reads every record, checking lengths and both masked CRCs.
std::vector<DecodedEvent> decode_file_cpp(const fs::path& file) {
  const std::string data = read_bytes(file);
  std::vector<DecodedEvent> events;
  size_t pos = 0;
  while (pos < data.size()) {
    INFO("record " << events.size() << " at byte " << pos);
    REQUIRE(data.size() - pos >= 12);
    const std::string len_bytes = data.substr(pos, 8);
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, len_bytes.data(), 8);
    std::memcpy(&len_crc, data.data() + pos + 8, 4);
    REQUIRE(len_crc == masked(bitwise_crc32c(len_bytes)));
    REQUIRE(data.size() - pos - 12 >= len + 4);
    const std::string payload = data.substr(pos + 12, len);
    std::memcpy(&data_crc, data.data() + pos + 12 + len, 4);
    REQUIRE(data_crc == masked(bitwise_crc32c(payload)));
    pos += 12 + len + 4;

    const auto fs = parse_wire(payload);
    DecodedEvent ev;
    if (auto f = find_field(fs, 1, 1)) ev.wall_time = as_double(f->scalar);
    if (auto f = find_field(fs, 2, 0)) ev.step = int64_t(f->scalar);
    if (auto f = find_field(fs, 3, 2)) {
      ev.what = "file_version";
      ev.file_version = f->bytes;
    }
    if (auto f = find_field(fs, 5, 2)) {
      ev.what = "summary";
      for (const auto& v : parse_wire(f->bytes)) {
        REQUIRE(v.number == 1);
        ev.values.push_back(decode_value(v.bytes));
      }
    }
    events.push_back(std::move(ev));
  }
  return events;
}

// The Python decoder's view of the same file; nullopt (with a warning) when /usr/bin/python3
// or its protobuf/crc32c modules are missing.
std::optional<std::vector<DecodedEvent>> decode_file_python(const fs::path& file, const fs::path& tmp) {
  const fs::path python = "/usr/bin/python3";
  const fs::path script = fs::path(STRATA_SOURCE_DIR) / "tests/train/read_tfevents.py";
  REQUIRE(fs::exists(script));
  if (!fs::exists(python)) {
    WARN("skipped: /usr/bin/python3 is missing; only the C++ decoder checked the event file");
    return std::nullopt;
  }
  const fs::path out = tmp / "decoded.json", err = tmp / "decoded.err";
  const std::string timeout = fs::exists("/usr/bin/timeout") ? "/usr/bin/timeout 120 " : "";
  const std::string cmd = timeout + python.string() + " '" + script.string() + "' '" +
                          file.string() + "' > '" + out.string() + "' 2> '" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  const int code = WEXITSTATUS(status);
  if (code == 3) {
    WARN("skipped: " << read_bytes(err) << " (install python3-protobuf python3-crc32c); "
                     << "only the C++ decoder checked the event file");
    return std::nullopt;
  }
  INFO("read_tfevents.py stderr: " << read_bytes(err));
  REQUIRE(code == 0);
  const json j = json::parse(read_bytes(out));
  std::vector<DecodedEvent> events;
  for (const auto& e : j) {
    DecodedEvent ev;
    ev.wall_time = e["wall_time"];
    ev.step = e["step"];
    ev.what = e["what"].is_null() ? "" : e["what"].get<std::string>();
    if (e.contains("file_version")) ev.file_version = e["file_version"];
    for (const auto& jv : e.value("values", json::array())) {
      DecodedValue v;
      v.tag = jv["tag"];
      v.kind = jv["kind"].is_null() ? "" : jv["kind"].get<std::string>();
      v.plugin = jv.value("plugin_name", "");
      v.data_class = jv.value("data_class", 0);
      if (v.kind == "simple_value") v.simple_value = jv["simple_value"];
      if (v.kind == "histo") {
        const auto& h = jv["histo"];
        v.histo = {h["min"], h["max"], h["num"], h["sum"], h["sum_squares"],
                   h["bucket_limit"].get<std::vector<double>>(),
                   h["bucket"].get<std::vector<double>>()};
      }
      if (v.kind == "tensor") {
        v.tensor_dtype = jv["tensor"]["dtype"];
        v.tensor_has_shape = jv["tensor"]["has_shape"];
        v.tensor_shape = jv["tensor"]["shape"].get<std::vector<int64_t>>();
        // Byte strings arrive in hex (text also as UTF-8, which string_val keeps for it).
        for (const std::string& hex : jv["tensor"]["string_val_hex"].get<std::vector<std::string>>()) {
          std::string bytes;
          for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
          v.string_val.push_back(bytes);
        }
        REQUIRE(v.string_val.size() == jv["tensor"]["string_val"].size());
      }
      ev.values.push_back(std::move(v));
    }
    events.push_back(std::move(ev));
  }
  return events;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const std::vector<double> kHistValues = {-3, -1, 0, 0, 0.5, 1, 1, 2, 100};
const std::string kText = "hello **world**\nline 2: caf\xc3\xa9";

// What the test in "scalars, histogram and text" wrote, checked against either decoder.
void check_written_events(const std::vector<DecodedEvent>& events, double t0, double t1) {
  REQUIRE(events.size() == 6);
  REQUIRE(events[0].what == "file_version");
  REQUIRE(events[0].file_version == "brain.Event:2");
  for (const DecodedEvent& e : events) {
    REQUIRE(e.wall_time >= t0 - 1);
    REQUIRE(e.wall_time <= t1 + 1);
  }
  for (size_t i = 1; i < events.size(); ++i) {
    REQUIRE(events[i].what == "summary");
    REQUIRE(events[i].values.size() == 1);
  }
  auto scalar_ok = [](const DecodedEvent& e, const std::string& tag, float value, int64_t step) {
    const DecodedValue& v = e.values[0];
    REQUIRE(v.tag == tag);
    REQUIRE(v.kind == "simple_value");
    REQUIRE(v.simple_value == value);
    REQUIRE(v.plugin == "scalars");
    REQUIRE(v.data_class == 1);
    REQUIRE(e.step == step);
  };
  scalar_ok(events[1], "loss", 0.25f, 1);
  scalar_ok(events[2], "loss", 0.125f, 2);
  scalar_ok(events[3], "train/accuracy", float(-3.3), 1'000'000'000'000);

  const DecodedEvent& he = events[4];
  REQUIRE(he.step == 5);
  const DecodedValue& h = he.values[0];
  REQUIRE(h.tag == "weights");
  REQUIRE(h.kind == "histo");
  REQUIRE(h.histo.min == -3);
  REQUIRE(h.histo.max == 100);
  REQUIRE(h.histo.num == 9);
  REQUIRE(h.histo.sum == 100.5);
  REQUIRE(h.histo.sum_squares == 10016.25);
  REQUIRE(h.histo.limits.size() == h.histo.buckets.size());
  REQUIRE(h.histo.limits.size() > 2);
  REQUIRE(h.histo.limits.back() == DBL_MAX);
  // Every bucket counts exactly the values in [previous limit, its limit), limits increase,
  // and together they count every value.
  double total = 0;
  for (size_t i = 0; i < h.histo.limits.size(); ++i) {
    const double lo = i == 0 ? -DBL_MAX : h.histo.limits[i - 1];
    const double hi = h.histo.limits[i];
    REQUIRE(lo < hi);
    double want = 0;
    for (double x : kHistValues) want += (x >= lo && x < hi) ? 1 : 0;
    INFO("bucket " << i << " [" << lo << ", " << hi << ")");
    REQUIRE(h.histo.buckets[i] == want);
    total += h.histo.buckets[i];
  }
  REQUIRE(total == 9);
  // Buckets are TensorFlow's 10%-wide ones: the bucket holding 100 is narrow.
  for (size_t i = 1; i < h.histo.limits.size(); ++i)
    if (h.histo.buckets[i] > 0 && h.histo.limits[i] > 50 && h.histo.limits[i] < 1e19)
      REQUIRE(h.histo.limits[i] / h.histo.limits[i - 1] == Approx(1.1).epsilon(1e-9));

  const DecodedEvent& te = events[5];
  REQUIRE(te.step == 7);
  const DecodedValue& t = te.values[0];
  REQUIRE(t.tag == "notes");
  REQUIRE(t.kind == "tensor");
  REQUIRE(t.plugin == "text");
  REQUIRE(t.tensor_dtype == 7);  // DT_STRING
  REQUIRE(t.tensor_has_shape);
  REQUIRE(t.tensor_shape.empty());  // a scalar
  REQUIRE(t.string_val == std::vector<std::string>{kText});
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("summary writer: scalars, histogram and text read back by two independent decoders",
          "[train][summary]") {
  TempDir dir;
  const double t0 = now_seconds();
  fs::path file;
  {
    SummaryWriter w(dir.path / "logs" / "train", /*flush_interval_seconds=*/60);
    file = w.file_path();
    w.scalar("loss", 0.25, 1);
    w.scalar("loss", 0.125, 2);
    w.scalar("train/accuracy", -3.3, 1'000'000'000'000);
    // A non-contiguous float view: the histogram reads its elements, not its storage.
    const Tensor base = Tensor::from_vector<float>(
        {-3, 0, 1, -1, 0.5, 2, 0, 1, 100}, {3, 3});  // transposed below to kHistValues order
    REQUIRE(base.transpose().to_vector<double>() == kHistValues);
    w.histogram("weights", base.transpose(), 5);
    w.text("notes", kText, 7);
    // destructor closes and flushes
  }
  const double t1 = now_seconds();

  // File name: events.out.tfevents.<unix seconds>.<hostname>, in the created log dir.
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  REQUIRE(file.parent_path() == dir.path / "logs" / "train");
  const std::string name = file.filename().string();
  const std::string stem = "events.out.tfevents.";
  REQUIRE(name.rfind(stem, 0) == 0);
  const std::string rest = name.substr(stem.size());
  const size_t dot = rest.find('.');
  REQUIRE(dot != std::string::npos);
  const double secs = std::stod(rest.substr(0, dot));
  REQUIRE(secs >= std::floor(t0) - 1);
  REQUIRE(secs <= t1 + 1);
  REQUIRE(rest.substr(dot + 1) == std::string(host));

  check_written_events(decode_file_cpp(file), t0, t1);
  if (auto py = decode_file_python(file, dir.path)) check_written_events(*py, t0, t1);
}

TEST_CASE("summary writer: records reach the file on the flush interval, on flush() and on close()",
          "[train][summary]") {
  TempDir dir;
  SECTION("background flush after the interval") {
    SummaryWriter w(dir.path, /*flush_interval_seconds=*/0.2);
    const auto initial = fs::file_size(w.file_path());
    REQUIRE(initial > 0);  // the file_version record is written at once
    w.scalar("x", 1.0, 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fs::file_size(w.file_path()) == initial && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(fs::file_size(w.file_path()) > initial);
    REQUIRE(decode_file_cpp(w.file_path()).size() == 2);
  }
  SECTION("a long interval holds records until flush()") {
    SummaryWriter w(dir.path, /*flush_interval_seconds=*/3600);
    const auto initial = fs::file_size(w.file_path());
    w.scalar("x", 1.0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    REQUIRE(fs::file_size(w.file_path()) == initial);
    w.flush();
    REQUIRE(fs::file_size(w.file_path()) > initial);
    w.scalar("x", 2.0, 2);
    const auto t = std::chrono::steady_clock::now();
    w.close();  // prompt: the background thread does not sleep out its hour
    REQUIRE(std::chrono::steady_clock::now() - t < std::chrono::seconds(5));
    const auto events = decode_file_cpp(w.file_path());
    REQUIRE(events.size() == 3);
    REQUIRE(events[2].values[0].simple_value == 2.0f);
    REQUIRE(w.closed());
    w.close();  // idempotent
  }
  SECTION("an interval too long for the clock still closes promptly") {
    SummaryWriter w(dir.path, 1e300);
    w.scalar("x", 1.0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t = std::chrono::steady_clock::now();
    w.close();
    REQUIRE(std::chrono::steady_clock::now() - t < std::chrono::seconds(5));
    REQUIRE(decode_file_cpp(w.file_path()).size() == 2);
  }
  SECTION("interval 0 writes every record at once") {
    SummaryWriter w(dir.path, 0);
    w.scalar("x", 1.0, 1);
    w.text("t", "abc", 1);
    REQUIRE(decode_file_cpp(w.file_path()).size() == 3);
  }
}

TEST_CASE("summary writer: concurrent writers from many threads", "[train][summary]") {
  TempDir dir;
  constexpr int kThreads = 4, kPer = 250;
  fs::path file;
  {
    SummaryWriter w(dir.path, 0.01);
    file = w.file_path();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&w, t] {
        for (int i = 0; i < kPer; ++i) {
          w.scalar("thread" + std::to_string(t), double(i), i);
          if (i % 50 == 0) w.flush();
        }
      });
    for (auto& th : threads) th.join();
    w.close();
  }
  const auto events = decode_file_cpp(file);
  REQUIRE(events.size() == 1 + kThreads * kPer);
  std::set<std::pair<std::string, int64_t>> seen;
  for (size_t i = 1; i < events.size(); ++i) {
    const DecodedValue& v = events[i].values.at(0);
    REQUIRE(v.simple_value == float(events[i].step));
    seen.insert({v.tag, events[i].step});
  }
  REQUIRE(seen.size() == size_t(kThreads * kPer));
  if (auto py = decode_file_python(file, dir.path)) REQUIRE(py->size() == events.size());
}

TEST_CASE("summary writer: two writers in one directory get distinct files", "[train][summary]") {
  TempDir dir;
  SummaryWriter a(dir.path, 1), b(dir.path, 1), c(dir.path, 1, ".v2");
  REQUIRE(a.file_path() != b.file_path());
  REQUIRE(c.file_path().string().size() > 3);
  REQUIRE(c.file_path().filename().string().substr(c.file_path().filename().string().size() - 3) ==
          ".v2");
  a.close();
  b.close();
  c.close();
  REQUIRE(event_files(dir.path).size() == 3);
  for (const auto& f : event_files(dir.path)) REQUIRE(decode_file_cpp(f).size() == 1);
}

TEST_CASE("summary writer: misuse throws strata::Error", "[train][summary]") {
  TempDir dir;
  REQUIRE_THROWS_AS(SummaryWriter(dir.path, -1), strata::Error);
  REQUIRE_THROWS_AS(SummaryWriter(dir.path, std::nan("")), strata::Error);
  REQUIRE_THROWS_AS(SummaryWriter(dir.path, 1, "a/b"), strata::Error);
  // A log "directory" that is a file.
  { std::ofstream(dir.path / "plainfile") << "x"; }
  REQUIRE_THROWS_AS(SummaryWriter(dir.path / "plainfile"), strata::Error);

  SummaryWriter w(dir.path, 0);
  REQUIRE_THROWS_AS(w.scalar("", 1.0, 0), strata::Error);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  try {
    w.histogram("h", Tensor::from_vector<float>({1.0f, nan}), 0);
    FAIL("no error for NaN");
  } catch (const strata::Error& e) {
    REQUIRE(std::string(e.what()).find("'h'") != std::string::npos);
  }
  REQUIRE_THROWS_AS(w.histogram("h", Tensor(), 0), strata::Error);
  w.close();
  try {
    w.scalar("x", 1.0, 0);
    FAIL("no error after close");
  } catch (const strata::Error& e) {
    REQUIRE(std::string(e.what()).find("closed") != std::string::npos);
  }
  REQUIRE_THROWS_AS(w.flush(), strata::Error);
  REQUIRE_THROWS_AS(w.text("t", "x", 0), strata::Error);
  // Nothing but the first record reached the file.
  REQUIRE(decode_file_cpp(w.file_path()).size() == 1);
}

TEST_CASE("summary writer: histogram of an empty tensor and of integer tensors",
          "[train][summary]") {
  TempDir dir;
  SummaryWriter w(dir.path, 0);
  w.histogram("empty", Tensor::empty({0}, kFloat32), 1);
  w.histogram("ints", Tensor::from_vector<int64_t>({5, 5, -5}), 2);
  w.close();
  const auto events = decode_file_cpp(w.file_path());
  REQUIRE(events.size() == 3);
  const Histo& e = events[1].values[0].histo;
  REQUIRE(e.num == 0);
  double total = 0;
  for (double b : e.buckets) total += b;
  REQUIRE(total == 0);
  const Histo& i = events[2].values[0].histo;
  REQUIRE(i.num == 3);
  REQUIRE(i.min == -5);
  REQUIRE(i.max == 5);
  REQUIRE(i.sum == 5);
  REQUIRE(i.sum_squares == 75);
}

namespace {

// An independent PNG reader for 8-bit, non-interlaced images with filter type 0 on every
// row (what the writer makes): checks the signature, every chunk's CRC-32 and the IHDR,
// inflates IDAT with zlib and returns height x width x channels bytes.
struct DecodedPng {
  uint32_t width = 0, height = 0;
  int channels = 0;
  int idat_chunks = 0;
  std::vector<uint8_t> pixels;
};

uint32_t be32(const std::string& s, size_t pos) {
  return (uint32_t(uint8_t(s[pos])) << 24) | (uint32_t(uint8_t(s[pos + 1])) << 16) |
         (uint32_t(uint8_t(s[pos + 2])) << 8) | uint32_t(uint8_t(s[pos + 3]));
}

DecodedPng decode_png(const std::string& png) {
  REQUIRE(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  DecodedPng out;
  std::string idat;
  bool ended = false;
  for (size_t pos = 8; pos < png.size();) {
    REQUIRE(pos + 12 <= png.size());
    const uint32_t len = be32(png, pos);
    REQUIRE(pos + 12 + len <= png.size());
    const std::string type = png.substr(pos + 4, 4), data = png.substr(pos + 8, len);
    const std::string typed = png.substr(pos + 4, 4 + len);
    REQUIRE(be32(png, pos + 8 + len) ==
            uint32_t(crc32(0, reinterpret_cast<const Bytef*>(typed.data()), uInt(typed.size()))));
    if (type == "IHDR") {
      REQUIRE(len == 13);
      out.width = be32(data, 0);
      out.height = be32(data, 4);
      REQUIRE(data[8] == 8);  // bit depth
      const int colour = data[9];
      out.channels = colour == 0 ? 1 : colour == 4 ? 2 : colour == 2 ? 3 : colour == 6 ? 4 : 0;
      REQUIRE(out.channels > 0);
      REQUIRE(data.substr(10) == std::string(3, '\0'));  // deflate, filter 0, no interlace
    } else if (type == "IDAT") {
      idat += data;
      ++out.idat_chunks;
    } else if (type == "IEND") {
      ended = true;
    }
    pos += 12 + len;
  }
  REQUIRE(ended);
  const size_t row = size_t(out.width) * size_t(out.channels);
  std::vector<uint8_t> raw(size_t(out.height) * (row + 1));
  uLongf size = uLongf(raw.size());
  REQUIRE(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())) == Z_OK);
  REQUIRE(size == raw.size());
  for (uint32_t y = 0; y < out.height; ++y) {
    REQUIRE(raw[y * (row + 1)] == 0);
    out.pixels.insert(out.pixels.end(), raw.begin() + long(y * (row + 1) + 1), raw.begin() + long((y + 1) * (row + 1)));
  }
  return out;
}

// The bytes an image value becomes: floor(x * 255.5) clipped (floats), x clipped (ints).
uint8_t expected_byte(double x, bool floating) {
  const double v = floating ? std::floor(x * 255.5) : x;
  return uint8_t(std::min(255.0, std::max(0.0, v)));
}

void check_images(const std::vector<DecodedEvent>& events, const std::vector<double>& rgb,
                  const std::vector<double>& grey) {
  REQUIRE(events.size() == 3);
  // RGB: 2 images of 3 x 4, max_outputs 1 keeps the first.
  const DecodedValue& v = events[1].values.at(0);
  REQUIRE(events[1].step == 4);
  REQUIRE(v.tag == "inputs");
  REQUIRE(v.kind == "tensor");
  REQUIRE(v.plugin == "images");
  REQUIRE(v.data_class == 3);  // DATA_CLASS_BLOB_SEQUENCE
  REQUIRE(v.tensor_dtype == 7);  // DT_STRING
  REQUIRE(v.tensor_shape == std::vector<int64_t>{3});
  REQUIRE(v.string_val.size() == 3);
  REQUIRE(v.string_val[0] == "4");  // width, then height
  REQUIRE(v.string_val[1] == "3");
  const DecodedPng png = decode_png(v.string_val[2]);
  REQUIRE(png.width == 4);
  REQUIRE(png.height == 3);
  REQUIRE(png.channels == 3);
  REQUIRE(png.pixels.size() == 36);
  for (size_t i = 0; i < 36; ++i) REQUIRE(png.pixels[i] == expected_byte(rgb[i], true));
  // Grey int32 images 2 x 2: both kept.
  const DecodedValue& g = events[2].values.at(0);
  REQUIRE(g.tensor_shape == std::vector<int64_t>{4});
  REQUIRE(g.string_val[0] == "2");
  for (size_t k = 0; k < 2; ++k) {
    const DecodedPng p = decode_png(g.string_val[2 + k]);
    REQUIRE(p.channels == 1);
    for (size_t i = 0; i < 4; ++i) REQUIRE(p.pixels[i] == expected_byte(grey[k * 4 + i], false));
  }
}

}  // namespace

TEST_CASE("PNG encoder: grey and alpha, and a stream longer than one IDAT chunk", "[train][summary]") {
  // 700 x 800 x 2 bytes of noise: about 1.1 MB that deflate cannot shrink, so the stream
  // spans two IDAT chunks (at most 1 MiB each), which a decoder reads as one.
  std::vector<uint8_t> pixels(size_t(700) * 800 * 2);
  uint32_t state = 12345;
  for (auto& p : pixels) {
    state = state * 1664525u + 1013904223u;
    p = uint8_t(state >> 24);
  }
  const DecodedPng png = decode_png(encode_png(pixels.data(), 700, 800, 2));
  CHECK(png.width == 800);
  CHECK(png.height == 700);
  CHECK(png.channels == 2);
  CHECK(png.idat_chunks == 2);
  CHECK(png.pixels == pixels);
}

TEST_CASE("summary writer: images as TensorFlow 2 writes them, PNGs read back by an independent decoder",
          "[train][summary]") {
  TempDir dir;
  // Floats in [0, 1] and beyond (clipped), on a non-contiguous view.
  std::vector<double> rgb(2 * 3 * 4 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = double(int(i % 29) - 3) / 20.0;
  const std::vector<double> grey = {0, 17, 255, 300, -5, 128, 64, 1};
  fs::path file;
  {
    SummaryWriter w(dir.path, 0);
    file = w.file_path();
    const Tensor base = Tensor::from_vector(rgb, {2, 3, 4, 3}, kFloat32).permute({0, 2, 1, 3}).contiguous();
    w.image("inputs", base.permute({0, 2, 1, 3}), 4, /*max_outputs=*/1);
    w.image("masks", Tensor::from_vector(grey, {2, 2, 2, 1}, kInt32), 5);
    CHECK_THROWS_WITH(w.image("bad", zeros({3, 4, 3}), 1), Catch::Contains("expected images [k, height, width, channels]"));
    CHECK_THROWS_WITH(w.image("bad", zeros({1, 3, 4, 5}), 1), Catch::Contains("1 to 4 channels"));
    CHECK_THROWS_WITH(w.image("bad", full({1, 1, 1, 1}, std::nan("")), 1), Catch::Contains("NaN"));
    CHECK_THROWS_WITH(w.image("bad", zeros({1, 1, 1, 1}), 1, 0), Catch::Contains("max_outputs"));
  }
  std::vector<double> first(rgb.begin(), rgb.begin() + 36);
  check_images(decode_file_cpp(file), first, grey);
  // strata's own reader (train/event_file_reader.h) gets the same strings.
  const std::vector<SummaryEvent> read = read_event_file(file);
  REQUIRE(read.size() == 3);
  CHECK(read[1].values.at(0).plugin_name == "images");
  CHECK(read[1].values.at(0).strings == decode_file_cpp(file)[1].values.at(0).string_val);
  if (auto py = decode_file_python(file, dir.path)) check_images(*py, first, grey);
}
