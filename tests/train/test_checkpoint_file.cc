// Tensor-level checkpoint files: CRC32C, atomic writes, the safetensors + manifest format,
// and every way a corrupt checkpoint must be refused.
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include <strata/train/atomic_file.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/crc32c.h>
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

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// The tensor's elements as raw bytes in row-major order.
std::string host_bytes(const Tensor& t) {
  std::string out(t.nbytes(), '\0');
  if (!out.empty()) strata::detail::copy_to_host(t, out.data());
  return out;
}

std::vector<fs::path> temps_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (is_atomic_temp_name(e.path().filename().string())) out.push_back(e.path());
  return out;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Bit-at-a-time CRC32C straight from the definition: the reference the table-driven and
// hardware versions are checked against.
uint32_t reference_crc32c(const std::string& s) {
  uint32_t c = 0xffffffffu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

// Builds a safetensors image by hand: header text as given, then `buffer`.
std::string safetensors_image(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + buffer;
}

// Runs `fn` and returns the strata::Error message it throws (fails the test otherwise).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const strata::Error& e) {
    return e.what();
  }
  FAIL("expected strata::Error, nothing was thrown");
  return {};
}

#define REQUIRE_ERROR_CONTAINS(expr, ...)                              \
  do {                                                                 \
    const std::string msg_ = error_of([&] { (void)(expr); });          \
    INFO("error: " << msg_);                                           \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__}) \
      REQUIRE(msg_.find(part_) != std::string::npos);                  \
  } while (0)

// A set covering every dtype, a 0-d tensor, an empty tensor, and non-contiguous views.
std::map<std::string, Tensor> sample_tensors() {
  std::map<std::string, Tensor> m;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  m["model/f32"] = Tensor::from_vector<float>({1.5f, -0.0f, inf, nan, 3e-40f, -7.25f}, {2, 3});
  m["model/f64"] = Tensor::from_vector<double>({1.0 / 3.0, -2.0, 1e300, 5e-324}, {4});
  m["model/f16"] =
      Tensor::from_vector<float>({0.5f, -1.0f, 65504.0f, 6e-8f, 3.140625f, 0.0f}, {3, 2}, kFloat16);
  m["model/bf16"] = Tensor::from_vector<float>({1.0f, -3.5f, 1e30f, 1e-30f}, {2, 2}, kBFloat16);
  m["model/i32"] = Tensor::from_vector<int32_t>({INT32_MIN, -1, 0, 7, INT32_MAX}, {5});
  m["model/i64"] = Tensor::from_vector<int64_t>({INT64_MIN, -1, 0, INT64_MAX}, {2, 2});
  m["model/bool"] = Tensor::from_vector<bool>({true, false, false, true, true, false}, {2, 3});
  m["scalar"] = Tensor::from_vector<float>({42.0f}, {});
  m["empty"] = Tensor::empty({0, 3}, kFloat32);
  // Views: a transpose of a 3x4 matrix and a strided slice of a vector.
  Tensor base = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  m["view/transposed"] = base.transpose();
  Tensor longs = Tensor::from_vector<int64_t>({10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  m["view/sliced"] = longs.slice(0, 1, 9, 3);
  m["view/half_t"] = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, kBFloat16).transpose();
  m["optimizer/\xc3\xa9t\xc3\xa9/slot"] = Tensor::from_vector<double>({1, 2, 3});  // UTF-8 name
  return m;
}

void require_same(const std::map<std::string, Tensor>& want,
                  const std::map<std::string, Tensor>& got) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, w] : want) {
    INFO("tensor " << name);
    REQUIRE(got.count(name) == 1);
    const Tensor& g = got.at(name);
    REQUIRE(g.dtype() == w.dtype());
    REQUIRE(g.shape() == w.shape());
    REQUIRE(g.is_contiguous());
    REQUIRE(g.device().is_cpu());
    REQUIRE(host_bytes(g) == host_bytes(w));  // bit for bit (NaN payloads, -0.0, denormals)
  }
}

}  // namespace

// ---------------------------------------------------------------- CRC32C

TEST_CASE("crc32c: standard test vectors", "[train][crc32c]") {
  REQUIRE(crc32c(std::string_view("123456789")) == 0xE3069283u);
  REQUIRE(crc32c(std::string_view("")) == 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  REQUIRE(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  REQUIRE(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[size_t(i)] = char(i);
    down[size_t(i)] = char(31 - i);
  }
  REQUIRE(crc32c(up) == 0x46DD794Eu);
  REQUIRE(crc32c(down) == 0x113FDB5Cu);
  REQUIRE(crc32c_internal::crc32c_extend_portable(0, "123456789", 9) == 0xE3069283u);
}

TEST_CASE("crc32c: table, hardware and bitwise reference agree at every length and alignment",
          "[train][crc32c]") {
  std::mt19937 rng(7);
  std::string data(4096 + 16, '\0');
  for (char& c : data) c = char(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63),
                       size_t(64), size_t(1000), size_t(4096)}) {
      const std::string piece = data.substr(offset, len);
      const uint32_t want = reference_crc32c(piece);
      INFO("offset " << offset << " len " << len);
      REQUIRE(crc32c_internal::crc32c_extend_portable(0, piece.data(), len) == want);
      REQUIRE(crc32c(piece) == want);
      if (crc32c_internal::crc32c_hardware_available())
        REQUIRE(crc32c_internal::crc32c_extend_hardware(0, data.data() + offset, len) == want);
      // Extending in two parts equals one pass.
      const size_t cut = len / 3;
      REQUIRE(crc32c_extend(crc32c(piece.data(), cut), piece.data() + cut, len - cut) == want);
    }
  }
  if (!crc32c_internal::crc32c_hardware_available()) WARN("skipped: no SSE4.2, hardware CRC32C untested");
}

TEST_CASE("crc32c: TFRecord masking", "[train][crc32c]") {
  REQUIRE(crc32c_mask(0) == 0xa282ead8u);
  const uint32_t c = 0xE3069283u;
  REQUIRE(crc32c_mask(c) == uint32_t(((c >> 15) | (c << 17)) + 0xa282ead8u));
  for (uint32_t v : {0u, 1u, 0xdeadbeefu, 0xffffffffu, c}) REQUIRE(crc32c_unmask(crc32c_mask(v)) == v);
}

// ---------------------------------------------------------------- atomic files

TEST_CASE("atomic file: replaces contents and leaves no temporaries", "[train][atomic]") {
  TempDir dir;
  const fs::path target = dir.path / "state.json";
  write_file_atomic(target, "old");
  REQUIRE(read_bytes(target) == "old");
  bool hook_ran = false;
  AtomicWriteHooks hooks;
  hooks.before_rename = [&](const fs::path& t, const fs::path& temp) {
    hook_ran = true;
    // At this point the new bytes are complete and durable in the temporary, and readers
    // of the target still see the old file.
    REQUIRE(t == target);
    REQUIRE(temp.parent_path() == target.parent_path());
    REQUIRE(is_atomic_temp_name(temp.filename().string()));
    REQUIRE(read_bytes(temp) == "new contents");
    REQUIRE(read_bytes(target) == "old");
  };
  write_file_atomic(target, "new contents", hooks);
  REQUIRE(hook_ran);
  REQUIRE(read_bytes(target) == "new contents");
  REQUIRE(temps_in(dir.path).empty());

  // Large writes go through the buffer and around it.
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  {
    AtomicFile f(target);
    f.write(big.data(), 100);
    f.write(big.data() + 100, big.size() - 100);
    REQUIRE(f.size() == big.size());
    f.commit();
  }
  REQUIRE(read_bytes(target) == big);
}

TEST_CASE("atomic file: an exception mid-save keeps the old file and removes the temp",
          "[train][atomic]") {
  TempDir dir;
  const fs::path target = dir.path / "a.bin";
  write_file_atomic(target, "v1");
  {
    AtomicFile f(target);
    f.write("partial");
    REQUIRE(fs::exists(f.temp_path()));
    // destroyed without commit, as during stack unwinding
  }
  REQUIRE(read_bytes(target) == "v1");
  REQUIRE(temps_in(dir.path).empty());

  AtomicWriteHooks hooks;
  hooks.before_rename = [](const fs::path&, const fs::path&) { throw std::runtime_error("boom"); };
  REQUIRE_THROWS_WITH(write_file_atomic(target, "v2", hooks), "boom");
  REQUIRE(read_bytes(target) == "v1");
  REQUIRE(temps_in(dir.path).empty());
}

TEST_CASE("atomic file: a crash leaves a temp that is ignored and cleaned by the next commit",
          "[train][atomic]") {
  TempDir dir;
  const fs::path target = dir.path / "a.bin";
  write_file_atomic(target, "v1");
  AtomicWriteHooks crash;
  crash.before_rename = [](const fs::path&, const fs::path&) { throw std::runtime_error("crash"); };
  crash.keep_temp_on_failure = true;
  REQUIRE_THROWS(write_file_atomic(target, "v2 never renamed", crash));
  REQUIRE(read_bytes(target) == "v1");
  const auto temps = temps_in(dir.path);
  REQUIRE(temps.size() == 1);
  REQUIRE(read_bytes(temps[0]) == "v2 never renamed");

  // A live writer's temporary is not "stale" even while another commit cleans up.
  AtomicFile live(target);
  live.write("in progress");
  write_file_atomic(target, "v3");
  REQUIRE(read_bytes(target) == "v3");
  REQUIRE(temps_in(dir.path) == std::vector<fs::path>{live.temp_path()});
  live.commit();
  REQUIRE(read_bytes(target) == "in progress");
  REQUIRE(temps_in(dir.path).empty());
}

TEST_CASE("atomic file: misuse and temp-name recognition", "[train][atomic]") {
  TempDir dir;
  REQUIRE_ERROR_CONTAINS(AtomicFile(dir.path / "missing_dir" / "f"), "does not exist");
  AtomicFile f(dir.path / "f");
  f.commit();
  REQUIRE_ERROR_CONTAINS(f.commit(), "already committed");
  REQUIRE_ERROR_CONTAINS(f.write("x"), "already committed");
  REQUIRE(is_atomic_temp_name(".ckpt.manifest.json.tmp-123-0"));
  REQUIRE_FALSE(is_atomic_temp_name("ckpt.manifest.json"));
  REQUIRE_FALSE(is_atomic_temp_name(".hidden"));
  REQUIRE_FALSE(is_atomic_temp_name(".x.tmp-12a-0"));
}

// ---------------------------------------------------------------- checkpoint files

TEST_CASE("checkpoint: round trip of every dtype and of non-contiguous views, bit for bit",
          "[train][checkpoint]") {
  TempDir dir;
  const auto tensors = sample_tensors();
  REQUIRE_FALSE(tensors.at("view/transposed").is_contiguous());
  REQUIRE_FALSE(tensors.at("view/sliced").is_contiguous());
  const json meta = {{"step", 1234}, {"note", "hello"}, {"nested", {{"lr", 0.001}}}};
  const fs::path prefix = dir.path / "ckpt-1234";
  save_tensors(prefix, tensors, meta);
  REQUIRE(checkpoint_exists(prefix));
  REQUIRE(names_in(dir.path) ==
          std::vector<std::string>{"ckpt-1234.manifest.json", "ckpt-1234.safetensors"});

  const TensorCheckpoint ck = load_tensors(prefix);
  require_same(tensors, ck.tensors);
  REQUIRE(ck.metadata == meta);
  REQUIRE(ck.step == std::optional<int64_t>(1234));

  // The views hold what their elements say, independently of copy_to_host.
  REQUIRE(ck.tensors.at("view/transposed").to_vector<float>() ==
          std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  REQUIRE(ck.tensors.at("view/sliced").to_vector<int64_t>() == std::vector<int64_t>{11, 14, 17});
  REQUIRE(ck.tensors.at("model/bool").to_vector<bool>() ==
          std::vector<bool>{true, false, false, true, true, false});

  // Without a step, none is reported; metadata can be any JSON.
  save_tensors(dir.path / "nostep", {{"x", Tensor::from_vector<float>({1, 2})}}, json::array({1, "a"}));
  const TensorCheckpoint ns = load_tensors(dir.path / "nostep");
  REQUIRE_FALSE(ns.step.has_value());
  REQUIRE(ns.metadata == json::array({1, "a"}));

  // An empty checkpoint is valid.
  save_tensors(dir.path / "none", {});
  REQUIRE(load_tensors(dir.path / "none").tensors.empty());
}

TEST_CASE("checkpoint: the data file is standard safetensors and the manifest describes it",
          "[train][checkpoint]") {
  TempDir dir;
  const auto tensors = sample_tensors();
  const fs::path prefix = dir.path / "ck";
  save_tensors(prefix, tensors, {{"step", 7}});

  // Parse the safetensors layout here, independently of the library's reader.
  const std::string bytes = read_bytes(dir.path / "ck.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  REQUIRE((8 + n) % 8 == 0);  // buffer aligned
  const json header = json::parse(bytes.substr(8, n));
  const std::string buffer = bytes.substr(8 + n);
  REQUIRE(header["__metadata__"]["format"] == "strata");
  REQUIRE(header["__metadata__"]["strata.step"] == "7");
  REQUIRE(json::parse(header["__metadata__"]["strata.metadata"].get<std::string>()) ==
          json({{"step", 7}}));
  const std::map<DType, std::string> names = {{kFloat32, "F32"},  {kFloat64, "F64"},
                                              {kFloat16, "F16"},  {kBFloat16, "BF16"},
                                              {kInt32, "I32"},    {kInt64, "I64"},
                                              {kBool, "BOOL"}};
  const json manifest = read_checkpoint_manifest(prefix);
  REQUIRE(manifest["format_version"] == kCheckpointFormatVersion);
  REQUIRE(manifest["step"] == 7);
  REQUIRE(manifest["data_file"] == "ck.safetensors");
  REQUIRE(manifest["data_bytes"] == bytes.size());
  REQUIRE(header.size() == tensors.size() + 1);
  for (const auto& [name, t] : tensors) {
    INFO(name);
    const json& h = header.at(name);
    REQUIRE(h["dtype"] == names.at(t.dtype()));
    REQUIRE(h["shape"] == json(t.shape()));
    const uint64_t b = h["data_offsets"][0], e = h["data_offsets"][1];
    REQUIRE(buffer.substr(b, e - b) == host_bytes(t));
    const json& m = manifest["tensors"].at(name);
    REQUIRE(m["dtype"] == h["dtype"]);
    REQUIRE(m["shape"] == h["shape"]);
    REQUIRE(m["data_offsets"] == h["data_offsets"]);
    REQUIRE(m["crc32c"] == reference_crc32c(host_bytes(t)));
  }

  // read_safetensors reads the same file without the manifest.
  const SafetensorsContents st = read_safetensors(dir.path / "ck.safetensors");
  require_same(tensors, st.tensors);
  REQUIRE(st.metadata.at("strata.step") == "7");
}

TEST_CASE("checkpoint: reads safetensors written by other tools", "[train][checkpoint]") {
  TempDir dir;
  // Entries listed out of offset order, no metadata, no padding — all allowed by the spec.
  std::string buf;
  const int64_t ints[2] = {-5, 6};
  const float fl[3] = {1.0f, 2.5f, -4.0f};
  buf.append(reinterpret_cast<const char*>(ints), 16);
  buf.append(reinterpret_cast<const char*>(fl), 12);
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},)"
      R"("a":{"dtype":"I64","shape":[2,1],"data_offsets":[0,16]}})";
  write_bytes(dir.path / "x.safetensors", safetensors_image(header, buf));
  const SafetensorsContents st = read_safetensors(dir.path / "x.safetensors");
  REQUIRE(st.metadata.empty());
  REQUIRE(st.tensors.at("a").shape() == Shape{2, 1});
  REQUIRE(st.tensors.at("a").to_vector<int64_t>() == std::vector<int64_t>{-5, 6});
  REQUIRE(st.tensors.at("b").to_vector<float>() == std::vector<float>{1.0f, 2.5f, -4.0f});

  // write_safetensors round-trips metadata too.
  write_safetensors(dir.path / "y.safetensors", st.tensors, {{"k", "v"}});
  const SafetensorsContents again = read_safetensors(dir.path / "y.safetensors");
  REQUIRE(again.metadata == std::map<std::string, std::string>{{"k", "v"}});
  require_same(st.tensors, again.tensors);
}

TEST_CASE("checkpoint: save rejects bad input", "[train][checkpoint]") {
  TempDir dir;
  const Tensor x = Tensor::from_vector<float>({1});
  REQUIRE_ERROR_CONTAINS(save_tensors(dir.path / "a", {{"", x}}), "non-empty");
  REQUIRE_ERROR_CONTAINS(save_tensors(dir.path / "a", {{"__metadata__", x}}), "reserved");
  REQUIRE_ERROR_CONTAINS(save_tensors(dir.path / "a", {{"u", Tensor()}}), "'u'", "undefined");
  REQUIRE_ERROR_CONTAINS(save_tensors(dir.path / "no" / "such" / "dir", {{"x", x}}),
                         "does not exist");
  REQUIRE_ERROR_CONTAINS(save_tensors(dir.path / "a", {{"x", x}}, json("\xff\xfe")), "metadata");
  REQUIRE_FALSE(checkpoint_exists(dir.path / "a"));
  REQUIRE(temps_in(dir.path).empty());
}

TEST_CASE("checkpoint: corrupt or missing files are refused, naming file and tensor",
          "[train][checkpoint]") {
  TempDir dir;
  const fs::path prefix = dir.path / "ck";
  const fs::path data = dir.path / "ck.safetensors";
  const fs::path manifest = dir.path / "ck.manifest.json";
  const std::map<std::string, Tensor> tensors = {
      {"w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
      {"b", Tensor::from_vector<double>({0.5, -0.5})}};
  save_tensors(prefix, tensors, {{"step", 3}});
  const std::string good = read_bytes(data);
  const std::string good_manifest = read_bytes(manifest);
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  const size_t buffer_start = size_t(8 + header_len);
  const json header = json::parse(good.substr(8, header_len));
  auto restore = [&] {
    write_bytes(data, good);
    write_bytes(manifest, good_manifest);
  };

  SECTION("truncated at several points") {
    for (size_t cut : {size_t(0), size_t(5), size_t(8), size_t(8 + header_len / 2), buffer_start,
                       buffer_start + 3, good.size() - 1}) {
      INFO("truncated to " << cut << " of " << good.size() << " bytes");
      write_bytes(data, good.substr(0, cut));
      REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "truncated");
      // The structural reader alone also notices (no manifest to compare sizes with).
      const std::string msg = error_of([&] { read_safetensors(data); });
      REQUIRE(msg.find("ck.safetensors") != std::string::npos);
    }
  }
  SECTION("trailing bytes") {
    write_bytes(data, good + "extra");
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "5 bytes more");
  }
  SECTION("a flipped bit in a tensor's data is a checksum error naming that tensor") {
    const uint64_t w_begin = header["w"]["data_offsets"][0];
    std::string bad = good;
    bad[buffer_start + w_begin + 5] ^= 0x10;
    write_bytes(data, bad);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "tensor 'w'",
                           "checksum mismatch");
    const uint64_t b_end = header["b"]["data_offsets"][1];
    bad = good;
    bad[buffer_start + b_end - 1] ^= 0x01;
    write_bytes(data, bad);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "tensor 'b'", "checksum mismatch");
  }
  SECTION("a header edit that stays valid JSON is a header checksum error") {
    std::string bad = good;
    const size_t pos = bad.find("\"w\"", 8);
    REQUIRE(pos < buffer_start);
    bad[pos + 1] = 'v';  // renames tensor w -> v
    write_bytes(data, bad);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "header checksum mismatch");
  }
  SECTION("garbage header") {
    std::string bad = good;
    for (size_t i = 8; i < 8 + 12; ++i) bad[i] = '#';
    write_bytes(data, bad);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "not valid JSON");
    bad = good;
    const uint64_t huge = uint64_t(1) << 40;
    std::memcpy(bad.data(), &huge, 8);
    write_bytes(data, bad);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "header length");
    REQUIRE_ERROR_CONTAINS(read_safetensors(data), "exceeds the 100 MB limit");
  }
  SECTION("missing manifest, missing data, bad manifest") {
    fs::remove(manifest);
    REQUIRE_FALSE(checkpoint_exists(prefix));
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.manifest.json", "not found");
    restore();
    fs::remove(data);
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.safetensors", "not found");
    restore();
    write_bytes(manifest, "{\"format\": \"strata.checkpoint\", ");
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "ck.manifest.json", "not valid JSON");
    json m = json::parse(good_manifest);
    m["format_version"] = 99;
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "format_version 99", "newer");
    m = json::parse(good_manifest);
    m["data_file"] = "../ck.safetensors";
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "data_file", "same directory");
    m = json::parse(good_manifest);
    m["format"] = "something else";
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "not a strata checkpoint manifest");
    m = json::parse(good_manifest);
    m.erase("header_crc32c");
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "header_crc32c");
  }
  SECTION("manifest and data disagree") {
    json m = json::parse(good_manifest);
    m["tensors"]["w"]["shape"] = {3, 2};
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "tensor 'w'", "manifest says");
    m = json::parse(good_manifest);
    m["tensors"].erase("b");
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "holds 2 tensors", "lists 1");
    m = json::parse(good_manifest);
    m["tensors"]["w"]["crc32c"] = 12345;
    write_bytes(manifest, m.dump());
    REQUIRE_ERROR_CONTAINS(load_tensors(prefix), "tensor 'w'", "checksum mismatch");
  }
  restore();
  require_same(tensors, load_tensors(prefix).tensors);  // the originals were fine all along
}

TEST_CASE("safetensors reader: structural validation", "[train][checkpoint]") {
  TempDir dir;
  const fs::path f = dir.path / "t.safetensors";
  const std::string eight(8, '\0'), sixteen(16, '\0');
  auto check = [&](const std::string& header, const std::string& buffer,
                   std::vector<std::string> parts) {
    write_bytes(f, safetensors_image(header, buffer));
    const std::string msg = error_of([&] { read_safetensors(f); });
    INFO("header " << header << "\nerror: " << msg);
    REQUIRE(msg.find("t.safetensors") != std::string::npos);
    for (const auto& p : parts) REQUIRE(msg.find(p) != std::string::npos);
  };
  check("[1,2]", "", {"must be a JSON object"});
  check(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", eight,
        {"tensor 'a'", "unknown safetensors dtype \"F17\""});
  check(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight,
        {"tensor 'a'", "U8 is not supported"});
  check(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight, {"tensor 'a'", "dtype"});
  check(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]}})", eight,
        {"tensor 'a'", "non-negative"});
  check(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight,
        {"tensor 'a'", "needs 12 bytes", "hold 8"});
  check(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", eight,
        {"tensor 'a'", "run past the end"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight,
        {"tensor 'a'", "end before they begin"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        sixteen, {"overlaps tensor 'a'"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", sixteen,
        {"8 unused bytes before tensor 'a'"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", sixteen,
        {"8 bytes after the last tensor"});
  check(R"({"__metadata__":{"k":1}})", "", {"__metadata__", "must be a string"});
  check(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2),
        {"tensor 'a'", "BOOL element 1", "byte value 2"});
  check(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
        eight, {"tensor 'a'", "overflows"});
  REQUIRE_ERROR_CONTAINS(read_safetensors(dir.path / "absent.safetensors"), "not found");
}

TEST_CASE("checkpoint: re-saving a prefix is atomic at every step", "[train][checkpoint][atomic]") {
  TempDir dir;
  const fs::path prefix = dir.path / "ck";
  const std::map<std::string, Tensor> v1 = {{"x", Tensor::from_vector<float>({1, 1, 1})}};
  const std::map<std::string, Tensor> v2 = {{"x", Tensor::from_vector<float>({2, 2, 2})},
                                            {"y", Tensor::from_vector<int32_t>({2})}};
  const std::map<std::string, Tensor> v3 = {{"x", Tensor::from_vector<float>({3, 3, 3})}};
  save_tensors(prefix, v1, {{"step", 1}});

  SECTION("crash before the data file is renamed") {
    SaveTensorsOptions crash;
    crash.hooks.keep_temp_on_failure = true;
    crash.hooks.before_rename = [](const fs::path&, const fs::path&) {
      throw std::runtime_error("simulated crash");
    };
    REQUIRE_THROWS_WITH(save_tensors(prefix, v2, {{"step", 2}}, crash), "simulated crash");
    REQUIRE(temps_in(dir.path).size() == 1);  // what a crash leaves behind
    const TensorCheckpoint ck = load_tensors(prefix);
    require_same(v1, ck.tensors);
    REQUIRE(ck.step == 1);
  }
  SECTION("crash after the data file, before the manifest is renamed") {
    SaveTensorsOptions crash;
    crash.hooks.keep_temp_on_failure = true;
    crash.hooks.before_rename = [](const fs::path& target, const fs::path&) {
      if (target.filename() == "ck.manifest.json") throw std::runtime_error("simulated crash");
    };
    REQUIRE_THROWS_WITH(save_tensors(prefix, v2, {{"step", 2}}, crash), "simulated crash");
    // The new data went to the other data file; the committed manifest still points at the
    // old one, which was not touched.
    REQUIRE(fs::exists(dir.path / "ck.alt.safetensors"));
    const TensorCheckpoint ck = load_tensors(prefix);
    require_same(v1, ck.tensors);
    REQUIRE(ck.step == 1);
  }
  SECTION("an exception (no crash) cleans up at once") {
    SaveTensorsOptions fail_opts;
    fail_opts.hooks.before_rename = [](const fs::path&, const fs::path&) {
      throw std::runtime_error("disk full");
    };
    REQUIRE_THROWS(save_tensors(prefix, v2, {}, fail_opts));
    REQUIRE(temps_in(dir.path).empty());
    require_same(v1, load_tensors(prefix).tensors);
  }
  // Whatever happened, the next save commits and leaves exactly one checkpoint behind.
  save_tensors(prefix, v3, {{"step", 3}});
  const TensorCheckpoint ck = load_tensors(prefix);
  require_same(v3, ck.tensors);
  REQUIRE(ck.step == 3);
  REQUIRE(temps_in(dir.path).empty());
  REQUIRE(names_in(dir.path).size() == 2);
  // And once more: the data file alternates, the stale one is removed.
  save_tensors(prefix, v1, {{"step", 4}});
  require_same(v1, load_tensors(prefix).tensors);
  REQUIRE(names_in(dir.path).size() == 2);

  remove_checkpoint(prefix);
  REQUIRE_FALSE(checkpoint_exists(prefix));
  REQUIRE(names_in(dir.path).empty());
}

TEST_CASE("checkpoint: a real crash (process killed mid-save) leaves the old checkpoint",
          "[train][checkpoint][atomic]") {
  TempDir dir;
  const fs::path prefix = dir.path / "ck";
  const std::map<std::string, Tensor> v1 = {{"x", Tensor::from_vector<float>({1, 2, 3})}};
  const std::map<std::string, Tensor> v2 = {{"x", Tensor::from_vector<float>({4, 5, 6})}};
  save_tensors(prefix, v1, {{"step", 1}});

  for (const char* crash_at : {"ck.safetensors", "ck.alt.safetensors", "ck.manifest.json"}) {
    INFO("process exits just before renaming " << crash_at);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      SaveTensorsOptions opts;
      const std::string at = crash_at;
      opts.hooks.before_rename = [at](const fs::path& target, const fs::path&) {
        if (target.filename() == at) ::_exit(17);  // no unwinding, no cleanup: a crash
      };
      try {
        save_tensors(prefix, v2, {{"step", 2}}, opts);
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    pid_t done = 0;
    while ((done = ::waitpid(child, &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (done == 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL("child did not finish");
    }
    REQUIRE(WIFEXITED(status));
    // ck.safetensors is in use by v1, so the save never renames onto it: the child saves
    // completely (0) in that case and crashes (17) in the other two.
    const int want = std::string(crash_at) == "ck.safetensors" ? 0 : 17;
    REQUIRE(WEXITSTATUS(status) == want);
    const TensorCheckpoint ck = load_tensors(prefix);
    if (want == 0) {
      require_same(v2, ck.tensors);
      save_tensors(prefix, v1, {{"step", 1}});  // back to v1 for the next round
    } else {
      require_same(v1, ck.tensors);
      REQUIRE(ck.step == 1);
    }
  }
  save_tensors(prefix, v2, {{"step", 2}});
  require_same(v2, load_tensors(prefix).tensors);
  REQUIRE(temps_in(dir.path).empty());
}
