#include <strata/data/binary_records.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <strata/core/error.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;

size_t record_type_size(RecordType type) {
  switch (type) {
    case RecordType::UInt8:
    case RecordType::Int8: return 1;
    case RecordType::UInt16:
    case RecordType::Int16: return 2;
    case RecordType::Int32:
    case RecordType::Float32: return 4;
    case RecordType::Int64:
    case RecordType::Float64: return 8;
  }
  return 0;
}

int64_t BinaryRecordSpec::record_bytes() const {
  int64_t total = 0;
  for (const auto& f : fields) total += numel_of(f.shape) * int64_t(record_type_size(f.type));
  return total;
}

namespace {

template <typename T>
T load(const uint8_t* p, bool big_endian) {
  uint8_t buf[sizeof(T)];
  std::memcpy(buf, p, sizeof(T));
  if (big_endian) std::reverse(buf, buf + sizeof(T));  // the build targets little-endian hosts
  T v;
  std::memcpy(&v, buf, sizeof(T));
  return v;
}

double load_value(const uint8_t* p, RecordType type, bool big_endian) {
  switch (type) {
    case RecordType::UInt8: return p[0];
    case RecordType::Int8: return int8_t(p[0]);
    case RecordType::UInt16: return load<uint16_t>(p, big_endian);
    case RecordType::Int16: return load<int16_t>(p, big_endian);
    case RecordType::Int32: return load<int32_t>(p, big_endian);
    case RecordType::Int64: return double(load<int64_t>(p, big_endian));
    case RecordType::Float32: return load<float>(p, big_endian);
    case RecordType::Float64: return load<double>(p, big_endian);
  }
  return 0.0;
}

// Records in one file, after checking its size against the spec.
int64_t records_in(const std::string& path, const BinaryRecordSpec& spec) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  STRATA_CHECK(!ec, "binary_records: cannot read '", path, "': ", ec.message());
  const int64_t body = int64_t(size) - spec.header_bytes - spec.footer_bytes;
  const int64_t rb = spec.record_bytes();
  STRATA_CHECK(body >= 0 && body % rb == 0, "binary_records: '", path, "' has ", size,
               " bytes, which is not ", spec.header_bytes, " header + a whole number of ", rb,
               "-byte records + ", spec.footer_bytes, " footer bytes (", body < 0 ? 0 : body % rb,
               " bytes left over: truncated or not this format)");
  return body / rb;
}

class BinaryRecordsNode final : public detail::DatasetNode {
 public:
  BinaryRecordsNode(std::vector<std::string> files, BinaryRecordSpec spec)
      : files_(std::move(files)), spec_(std::move(spec)) {
    for (const auto& f : files_) counts_.push_back(records_in(f, spec_));
  }
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override {
    int64_t total = 0;
    for (int64_t c : counts_) total += c;
    return total;
  }
  std::string name() const override {
    return detail::str_of("binary_records(", files_.size(), " files, ", spec_.record_bytes(),
                          "-byte records)");
  }
  const std::vector<std::string>* files() const override { return &files_; }
  NodePtr with_files(std::vector<std::string> files) const override {
    return std::make_shared<BinaryRecordsNode>(std::move(files), spec_);
  }

  std::vector<std::string> files_;
  BinaryRecordSpec spec_;
  std::vector<int64_t> counts_;
};

class BinaryRecordsIterator final : public IteratorBase {
 public:
  explicit BinaryRecordsIterator(const BinaryRecordsNode& node)
      : node_(node), record_(size_t(node.spec_.record_bytes())) {}

  std::optional<Element> next() override {
    while (file_ < int64_t(node_.files_.size())) {
      if (!open_) open(0);
      if (record_index_ < records_) {
        const auto& path = node_.files_[size_t(file_)];
        in_.read(reinterpret_cast<char*>(record_.data()), std::streamsize(record_.size()));
        STRATA_CHECK(in_.gcount() == std::streamsize(record_.size()), "binary_records: '", path,
                     "' ended inside record ", record_index_, " (it shrank while being read)");
        ++record_index_;
        return decode_record(record_.data(), node_.spec_);
      }
      in_.close();
      open_ = false;
      ++file_;
      record_index_ = 0;
    }
    return std::nullopt;
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::BinaryRecords);
    w.put(file_);
    w.put(record_index_);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::BinaryRecords);
    file_ = r.get_in("binary_records file", 0, int64_t(node_.files_.size()));
    const int64_t rec = r.get_in("binary_records record", 0, INT64_MAX);
    if (file_ < int64_t(node_.files_.size())) {
      open(rec);
    } else {
      STRATA_CHECK(rec == 0, "Iterator::restore: corrupt binary_records state");
    }
  }

 private:
  void open(int64_t record) {
    const auto& path = node_.files_[size_t(file_)];
    in_.close();
    in_.clear();
    // Re-check the size: the file may have changed since the dataset was made.
    records_ = records_in(path, node_.spec_);
    STRATA_CHECK(record <= records_, "binary_records: record ", record, " is beyond the ",
                 records_, " records of '", path, "'");
    in_.open(path, std::ios::binary);
    STRATA_CHECK(in_.is_open(), "binary_records: cannot open '", path, "'");
    in_.seekg(std::streamoff(node_.spec_.header_bytes + record * node_.spec_.record_bytes()));
    record_index_ = record;
    open_ = true;
  }

  const BinaryRecordsNode& node_;
  std::vector<uint8_t> record_;
  std::ifstream in_;
  bool open_ = false;
  int64_t file_ = 0;
  int64_t record_index_ = 0;
  int64_t records_ = 0;
};

std::unique_ptr<IteratorBase> BinaryRecordsNode::make_iterator(uint64_t) const {
  return std::make_unique<BinaryRecordsIterator>(*this);
}

}  // namespace

Element decode_record(const uint8_t* record, const BinaryRecordSpec& spec) {
  Element out;
  out.reserve(spec.fields.size());
  const uint8_t* p = record;
  for (const auto& f : spec.fields) {
    const int64_t n = numel_of(f.shape);
    const size_t size = record_type_size(f.type);
    std::vector<double> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i, p += size) values[size_t(i)] = load_value(p, f.type, spec.big_endian) * f.scale;
    out.push_back(Tensor::from_vector(values, f.shape, f.dtype));
  }
  return out;
}

Dataset binary_records(std::vector<std::string> files, BinaryRecordSpec spec) {
  STRATA_CHECK(!files.empty(), "binary_records: no files given");
  STRATA_CHECK(!spec.fields.empty(), "binary_records: the record spec has no fields");
  STRATA_CHECK(spec.header_bytes >= 0 && spec.footer_bytes >= 0,
               "binary_records: header and footer sizes must be >= 0");
  for (const auto& f : spec.fields) {
    for (int64_t d : f.shape) STRATA_CHECK(d >= 0, "binary_records: field shape ", shape_str(f.shape), " has a negative extent");
  }
  STRATA_CHECK(spec.record_bytes() > 0, "binary_records: records must be at least one byte");
  return Dataset(std::make_shared<BinaryRecordsNode>(std::move(files), std::move(spec)));
}

}  // namespace strata::data
