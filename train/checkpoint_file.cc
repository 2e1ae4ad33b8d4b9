#include <strata/train/checkpoint_file.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <system_error>
#include <vector>

#include <strata/core/error.h>
#include <strata/train/crc32c.h>

namespace strata::train {
namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian; strata writes host bytes directly");

namespace {

constexpr const char* kManifestSuffix = ".manifest.json";
constexpr const char* kDataSuffix = ".safetensors";
constexpr const char* kAltDataSuffix = ".alt.safetensors";
constexpr const char* kFormat = "strata.checkpoint";
// The safetensors reference implementation refuses headers above 100 MB; so do we, which
// also bounds what a corrupt length field can make us allocate.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

fs::path with_suffix(const fs::path& prefix, const char* suffix) {
  return fs::path(prefix.string() + suffix);
}

struct Entry {
  std::string name;
  DType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // offsets into the byte buffer
  uint32_t crc = 0;             // filled when writing
};

struct ParsedFile {
  uint64_t header_bytes = 0;   // 8 + JSON length: where the byte buffer starts
  std::string header_image;    // those first header_bytes bytes, for the header checksum
  std::vector<Entry> entries;  // sorted by offset
  std::map<std::string, std::string> metadata;
};

// Reads a data file front to back. Tensors are read straight into their own memory, so
// loading needs no second copy of the file.
class FileReader {
 public:
  FileReader(const fs::path& path, const char* op, const char* what) : path_(path), op_(op) {
    std::error_code ec;
    STRATA_CHECK(fs::exists(path, ec), op, ": ", what, " ", path, " not found");
    size_ = fs::file_size(path, ec);
    STRATA_CHECK(!ec, op, ": cannot determine the size of ", what, " ", path, ": ", ec.message());
    in_.open(path, std::ios::binary);
    STRATA_CHECK(in_.good(), op, ": cannot open ", what, " ", path);
  }
  uint64_t size() const { return size_; }
  void read(void* dst, uint64_t n, const std::string& what) {
    if (n == 0) return;
    in_.read(static_cast<char*>(dst), std::streamsize(n));
    STRATA_CHECK(uint64_t(in_.gcount()) == n, op_, ": ", path_, ": reading ", what,
                 " failed after ", in_.gcount(), " of ", n, " bytes (file truncated?)");
  }

 private:
  fs::path path_;
  const char* op_;
  uint64_t size_ = 0;
  std::ifstream in_;
};

std::string read_whole_file(const fs::path& path, const char* op, const char* what) {
  FileReader in(path, op, what);
  std::string bytes(size_t(in.size()), '\0');
  in.read(bytes.data(), bytes.size(), what);
  return bytes;
}

std::string dims_str(const Shape& s) { return shape_str(s); }

uint64_t byte_size(const Shape& shape, DType dtype, const std::string& context) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    STRATA_CHECK(d >= 0, context, ": negative dimension in shape ", dims_str(shape));
    STRATA_CHECK(!__builtin_mul_overflow(n, uint64_t(d), &n), context, ": shape ",
                 dims_str(shape), " overflows 64-bit sizes");
  }
  return n;
}

// Reads the header of a safetensors file and validates the structure it describes against
// the file's size. Leaves `in` at the start of the byte buffer.
ParsedFile parse_safetensors(FileReader& in, const fs::path& file, const char* op) {
  const std::string where = strata::detail::concat(op, ": ", file);
  const uint64_t size = in.size();
  STRATA_CHECK(size >= 8, where, ": file is truncated: ", size,
               " bytes, less than the 8-byte header length");
  ParsedFile out;
  out.header_image.resize(8);
  in.read(out.header_image.data(), 8, "the header length");
  uint64_t n = 0;
  std::memcpy(&n, out.header_image.data(), 8);
  STRATA_CHECK(n <= kMaxHeaderBytes, where, ": header length ", n,
               " exceeds the 100 MB limit (corrupt or not a safetensors file)");
  STRATA_CHECK(n <= size - 8, where, ": file is truncated: header length says ", n,
               " bytes but only ", size - 8, " follow");
  out.header_image.resize(8 + n);
  in.read(out.header_image.data() + 8, n, "the header");
  out.header_bytes = 8 + n;
  const uint64_t buffer_size = size - out.header_bytes;

  json header;
  try {
    header = json::parse(out.header_image.begin() + 8, out.header_image.end());
  } catch (const json::exception& e) {
    fail(where, ": header is not valid JSON: ", e.what());
  }
  STRATA_CHECK(header.is_object(), where, ": header must be a JSON object, got ",
               header.type_name());

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      STRATA_CHECK(value.is_object(), where, ": \"__metadata__\" must be an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        STRATA_CHECK(mv.is_string(), where, ": \"__metadata__\" value for '", mk,
                     "' must be a string, got ", mv.type_name());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string ctx = strata::detail::concat(where, ": tensor '", key, "'");
    STRATA_CHECK(!key.empty(), where, ": a tensor has an empty name");
    STRATA_CHECK(value.is_object(), ctx, ": entry must be an object, got ", value.type_name());
    Entry e;
    e.name = key;
    const auto dt = value.find("dtype");
    STRATA_CHECK(dt != value.end() && dt->is_string(), ctx, ": missing string \"dtype\"");
    e.dtype = dtype_from_safetensors_name(dt->get<std::string>(), ctx);
    const auto sh = value.find("shape");
    STRATA_CHECK(sh != value.end() && sh->is_array(), ctx, ": missing array \"shape\"");
    for (const auto& d : *sh) {
      STRATA_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0),
                   ctx, ": shape entries must be non-negative integers, got ", d.dump());
      STRATA_CHECK(d.get<uint64_t>() <= uint64_t(INT64_MAX), ctx, ": dimension ", d.dump(),
                   " is too large");
      e.shape.push_back(d.get<int64_t>());
    }
    const auto off = value.find("data_offsets");
    STRATA_CHECK(off != value.end() && off->is_array() && off->size() == 2 &&
                     (*off)[0].is_number_unsigned() && (*off)[1].is_number_unsigned(),
                 ctx, ": \"data_offsets\" must be two non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    STRATA_CHECK(e.begin <= e.end, ctx, ": data_offsets [", e.begin, ",", e.end,
                 "] end before they begin");
    STRATA_CHECK(e.end <= buffer_size, ctx, ": data_offsets [", e.begin, ",", e.end,
                 "] run past the end of the ", buffer_size,
                 "-byte data buffer (file truncated?)");
    const uint64_t need = byte_size(e.shape, e.dtype, ctx);
    STRATA_CHECK(need == e.end - e.begin, ctx, ": shape ", dims_str(e.shape), " of ",
                 safetensors_dtype_name(e.dtype), " needs ", need, " bytes but data_offsets [",
                 e.begin, ",", e.end, "] hold ", e.end - e.begin);
    out.entries.push_back(std::move(e));
  }

  // The buffer must be covered exactly: no overlaps (aliasing), no holes (polyglot files),
  // as the safetensors specification requires.
  std::sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : out.entries) {
    STRATA_CHECK(e.begin >= expected, where, ": tensor '", e.name, "' at [", e.begin, ",",
                 e.end, "] overlaps tensor '", prev ? prev->name : "", "' at [",
                 prev ? prev->begin : 0, ",", expected, "]");
    STRATA_CHECK(e.begin == expected, where, ": ", e.begin - expected,
                 " unused bytes before tensor '", e.name, "' at offset ", expected);
    expected = e.end;
    prev = &e;
  }
  STRATA_CHECK(expected == buffer_size, where, ": ", buffer_size - expected,
               " bytes after the last tensor are not part of any tensor");
  return out;
}

// Reads the next entry (entries come in offset order, back to back) into a new contiguous
// CPU tensor.
// When `expected_crc` is given, a mismatch is reported before anything else about the data.
Tensor read_tensor(FileReader& in, const Entry& e, const std::string& ctx,
                   std::optional<uint64_t> expected_crc) {
  Tensor t = Tensor::empty(e.shape, e.dtype, Device());  // host memory: read() writes it
  const uint64_t n = e.end - e.begin;
  char* dst = n ? static_cast<char*>(t.raw_data()) : nullptr;
  in.read(dst, n, strata::detail::concat("tensor '", e.name, "'"));
  if (expected_crc) {
    const uint32_t crc = crc32c(dst, n);
    STRATA_CHECK(crc == *expected_crc, ctx, ": checksum mismatch (data corrupted): crc32c ", crc,
                 ", the manifest records ", *expected_crc);
  }
  if (e.dtype == kBool) {
    // Any byte but 0/1 would be an invalid bool in C++; refuse instead of passing it on.
    for (uint64_t i = 0; i < n; ++i)
      STRATA_CHECK(uint8_t(dst[i]) <= 1, ctx, ": BOOL element ", i, " has byte value ",
                   int(uint8_t(dst[i])), " (expected 0 or 1)");
  }
  return t;
}

void check_name(const std::string& name, const char* op, const fs::path& path) {
  STRATA_CHECK(!name.empty(), op, ": ", path, ": tensor names must be non-empty");
  STRATA_CHECK(name != "__metadata__", op, ": ", path,
               ": \"__metadata__\" is reserved by safetensors and cannot name a tensor");
}

// Writes a safetensors image to `file`; returns the entries with offsets and CRCs and the
// header's length and CRC.
struct WriteResult {
  std::vector<Entry> entries;
  uint64_t header_bytes = 0;
  uint32_t header_crc = 0;
};

WriteResult write_image(AtomicFile& file, const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata, const char* op) {
  WriteResult r;
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check_name(name, op, file.target());
    STRATA_CHECK(t.defined(), op, ": ", file.target(), ": tensor '", name, "' is undefined");
    Entry e;
    e.name = name;
    e.dtype = t.dtype();
    e.shape = t.shape();
    e.begin = offset;
    e.end = offset + t.nbytes();
    offset = e.end;
    header[name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                    {"shape", e.shape},
                    {"data_offsets", {e.begin, e.end}}};
    r.entries.push_back(std::move(e));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail(op, ": ", file.target(), ": cannot encode the header (names and metadata must be UTF-8): ",
         e.what());
  }
  // Pad with spaces (allowed by the spec) so the byte buffer starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  char len[8];
  std::memcpy(len, &n, 8);
  r.header_bytes = 8 + n;
  r.header_crc = crc32c_extend(crc32c(len, 8), text.data(), text.size());
  file.write(len, 8);
  file.write(text);

  std::vector<char> staging;
  size_t i = 0;
  for (const auto& [name, t] : tensors) {
    Entry& e = r.entries[i++];
    const size_t nbytes = t.nbytes();
    if (nbytes == 0) {
      e.crc = crc32c(nullptr, 0);
      continue;
    }
    const void* src;
    if (t.device().is_cpu() && t.is_contiguous()) {
      src = t.raw_data();
    } else {  // strided views and device tensors: gather into host memory first
      staging.resize(nbytes);
      strata::detail::copy_to_host(t, staging.data());
      src = staging.data();
    }
    e.crc = crc32c(src, nbytes);
    file.write(src, nbytes);
  }
  return r;
}

const json& field(const json& m, const char* key, const fs::path& file, const char* op) {
  const auto it = m.find(key);
  STRATA_CHECK(it != m.end(), op, ": manifest ", file, " has no \"", key, "\" field");
  return *it;
}

uint64_t unsigned_field(const json& m, const char* key, const fs::path& file, const char* op) {
  const json& v = field(m, key, file, op);
  STRATA_CHECK(v.is_number_unsigned(), op, ": manifest ", file, ": \"", key,
               "\" must be a non-negative integer, got ", v.dump());
  return v.get<uint64_t>();
}

json parse_manifest(const fs::path& file, const char* op) {
  std::error_code ec;
  STRATA_CHECK(fs::exists(file, ec), op, ": checkpoint manifest ", file,
               " not found (no checkpoint was committed under this prefix)");
  const std::string text = read_whole_file(file, op, "checkpoint manifest");
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    fail(op, ": checkpoint manifest ", file, " is not valid JSON: ", e.what());
  }
  STRATA_CHECK(m.is_object(), op, ": checkpoint manifest ", file, " must be a JSON object");
  const json& format = field(m, "format", file, op);
  STRATA_CHECK(format == kFormat, op, ": ", file, " is not a strata checkpoint manifest (format ",
               format.dump(), ", expected \"", kFormat, "\")");
  const uint64_t version = unsigned_field(m, "format_version", file, op);
  STRATA_CHECK(version >= 1 && version <= uint64_t(kCheckpointFormatVersion), op, ": manifest ",
               file, " has format_version ", version, "; this build reads versions 1..",
               kCheckpointFormatVersion, " (written by a newer strata?)");
  const json& data_file = field(m, "data_file", file, op);
  STRATA_CHECK(data_file.is_string(), op, ": manifest ", file, ": \"data_file\" must be a string");
  const std::string df = data_file.get<std::string>();
  // A bare file name next to the manifest: never follow a path elsewhere.
  STRATA_CHECK(!df.empty() && df.find('/') == std::string::npos && df != "." && df != "..", op,
               ": manifest ", file, ": \"data_file\" must be a file name in the same directory, got \"",
               df, "\"");
  STRATA_CHECK(field(m, "tensors", file, op).is_object(), op, ": manifest ", file,
               ": \"tensors\" must be an object");
  return m;
}

std::optional<std::string> committed_data_file(const fs::path& prefix) {
  try {
    return parse_manifest(checkpoint_manifest_path(prefix), "save_tensors")["data_file"]
        .get<std::string>();
  } catch (const Error&) {
    return std::nullopt;  // no (readable) committed checkpoint: nothing to protect
  }
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
  }
  fail("safetensors: unknown DType value ", int(dtype));
}

DType dtype_from_safetensors_name(const std::string& name, const std::string& context) {
  if (name == "F32") return kFloat32;
  if (name == "F64") return kFloat64;
  if (name == "F16") return kFloat16;
  if (name == "BF16") return kBFloat16;
  if (name == "I32") return kInt32;
  if (name == "I64") return kInt64;
  if (name == "BOOL") return kBool;
  static const char* const kOther[] = {"U8",  "I8",  "U16", "I16",      "U32",     "U64",
                                       "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                                       "F6_E3M2", "C64"};
  for (const char* other : kOther)
    STRATA_CHECK(name != other, context, ": safetensors dtype ", name,
                 " is not supported by strata (F32, F64, F16, BF16, I32, I64, BOOL)");
  fail(context, ": unknown safetensors dtype \"", name, "\"");
}

fs::path checkpoint_manifest_path(const fs::path& prefix) {
  return with_suffix(prefix, kManifestSuffix);
}

bool checkpoint_exists(const fs::path& prefix) {
  std::error_code ec;
  return fs::is_regular_file(checkpoint_manifest_path(prefix), ec);
}

void save_tensors(const fs::path& prefix, const std::map<std::string, Tensor>& tensors,
                  const json& metadata, const SaveTensorsOptions& options) {
  constexpr const char* op = "save_tensors";
  STRATA_CHECK(!prefix.empty() && prefix.has_filename(), op, ": invalid checkpoint prefix ",
               prefix);
  const fs::path manifest_path = checkpoint_manifest_path(prefix);
  const fs::path plain = with_suffix(prefix, kDataSuffix);
  const fs::path alt = with_suffix(prefix, kAltDataSuffix);
  // Never overwrite the data file the committed manifest points at.
  const std::optional<std::string> committed = committed_data_file(prefix);
  const fs::path data_path = committed == plain.filename().string() ? alt : plain;

  std::string metadata_text;
  try {
    metadata_text = metadata.dump();
  } catch (const json::exception& e) {
    fail(op, ": ", prefix, ": metadata cannot be encoded as JSON: ", e.what());
  }
  std::optional<int64_t> step;
  if (metadata.is_object()) {
    const auto it = metadata.find("step");
    if (it != metadata.end() && it->is_number_integer()) step = it->get<int64_t>();
  }

  // The data file is self-describing too: any safetensors reader sees where it came from.
  std::map<std::string, std::string> st_meta = {
      {"format", "strata"},
      {"strata.format_version", std::to_string(kCheckpointFormatVersion)},
      {"strata.metadata", metadata_text}};
  if (step) st_meta["strata.step"] = std::to_string(*step);

  WriteResult written;
  uint64_t data_bytes = 0;
  {
    AtomicFile data(data_path, options.hooks);
    written = write_image(data, tensors, st_meta, op);
    data_bytes = data.size();
    data.commit();
  }

  json manifest = {{"format", kFormat},
                   {"format_version", kCheckpointFormatVersion},
                   {"data_file", data_path.filename().string()},
                   {"data_bytes", data_bytes},
                   {"header_bytes", written.header_bytes},
                   {"header_crc32c", written.header_crc},
                   {"metadata", metadata}};
  if (step) manifest["step"] = *step;
  json entries = json::object();
  for (const Entry& e : written.entries)
    entries[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                       {"shape", e.shape},
                       {"data_offsets", {e.begin, e.end}},
                       {"crc32c", e.crc}};
  manifest["tensors"] = std::move(entries);
  write_file_atomic(manifest_path, manifest.dump(1) + "\n", options.hooks);

  // Committed: the other data file (the previous checkpoint's) is garbage now, and so is
  // anything a crashed save under this prefix left behind.
  std::error_code ec;
  fs::remove(data_path == plain ? alt : plain, ec);
  remove_stale_atomic_temps(plain);
  remove_stale_atomic_temps(alt);
}

TensorCheckpoint load_tensors(const fs::path& prefix) {
  constexpr const char* op = "load_tensors";
  const fs::path manifest_path = checkpoint_manifest_path(prefix);
  const json m = parse_manifest(manifest_path, op);
  fs::path data_path = manifest_path.parent_path() / m["data_file"].get<std::string>();
  const uint64_t data_bytes = unsigned_field(m, "data_bytes", manifest_path, op);
  const uint64_t header_bytes = unsigned_field(m, "header_bytes", manifest_path, op);
  const uint64_t header_crc = unsigned_field(m, "header_crc32c", manifest_path, op);

  FileReader in(data_path, op, "checkpoint data file");
  STRATA_CHECK(in.size() >= data_bytes, op, ": ", data_path, " is truncated: ", in.size(),
               " bytes, the manifest ", manifest_path, " records ", data_bytes);
  STRATA_CHECK(in.size() == data_bytes, op, ": ", data_path, " has ", in.size() - data_bytes,
               " bytes more than the ", data_bytes, " its manifest records");
  const ParsedFile parsed = parse_safetensors(in, data_path, op);
  STRATA_CHECK(parsed.header_bytes == header_bytes && crc32c(parsed.header_image) == header_crc,
               op, ": ", data_path, ": header checksum mismatch (the header was modified or "
               "corrupted after the checkpoint was written)");

  const json& mt = m["tensors"];
  STRATA_CHECK(mt.size() == parsed.entries.size(), op, ": ", data_path, " holds ",
               parsed.entries.size(), " tensors but its manifest lists ", mt.size());
  TensorCheckpoint out;
  for (const Entry& e : parsed.entries) {
    const std::string ctx = strata::detail::concat(op, ": ", data_path, ": tensor '", e.name, "'");
    const auto it = mt.find(e.name);
    STRATA_CHECK(it != mt.end() && it->is_object(), ctx, " is not in the manifest ",
                 manifest_path);
    const json& me = *it;
    const json expect_offsets = {e.begin, e.end};
    STRATA_CHECK(me.value("dtype", json()) == safetensors_dtype_name(e.dtype) &&
                     me.value("shape", json()) == json(e.shape) &&
                     me.value("data_offsets", json()) == expect_offsets,
                 ctx, ": header says ", safetensors_dtype_name(e.dtype), " ", dims_str(e.shape),
                 " at [", e.begin, ",", e.end, "] but the manifest says ", me.dump());
    const auto crc_it = me.find("crc32c");
    STRATA_CHECK(crc_it != me.end() && crc_it->is_number_unsigned(), ctx,
                 ": the manifest has no crc32c for it");
    out.tensors.emplace(e.name, read_tensor(in, e, ctx, crc_it->get<uint64_t>()));
  }
  out.metadata = m.contains("metadata") ? m["metadata"] : json::object();
  if (m.contains("step")) {
    STRATA_CHECK(m["step"].is_number_integer(), op, ": manifest ", manifest_path,
                 ": \"step\" must be an integer");
    out.step = m["step"].get<int64_t>();
  }
  return out;
}

json read_checkpoint_manifest(const fs::path& prefix) {
  return parse_manifest(checkpoint_manifest_path(prefix), "read_checkpoint_manifest");
}

void remove_checkpoint(const fs::path& prefix) {
  const fs::path paths[] = {checkpoint_manifest_path(prefix), with_suffix(prefix, kDataSuffix),
                            with_suffix(prefix, kAltDataSuffix)};
  for (const fs::path& p : paths) {
    std::error_code ec;
    fs::remove(p, ec);
    STRATA_CHECK(!ec, "remove_checkpoint: cannot remove ", p, ": ", ec.message());
    remove_stale_atomic_temps(p);
  }
}

void write_safetensors(const fs::path& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const AtomicWriteHooks& hooks) {
  AtomicFile file(path, hooks);
  write_image(file, tensors, metadata, "write_safetensors");
  file.commit();
}

SafetensorsContents read_safetensors(const fs::path& path) {
  constexpr const char* op = "read_safetensors";
  FileReader in(path, op, "safetensors file");
  const ParsedFile parsed = parse_safetensors(in, path, op);
  SafetensorsContents out;
  out.metadata = parsed.metadata;
  for (const Entry& e : parsed.entries)
    out.tensors.emplace(
        e.name, read_tensor(in, e, strata::detail::concat(op, ": ", path, ": tensor '", e.name, "'"),
                            std::nullopt));
  return out;
}

}  // namespace strata::train
