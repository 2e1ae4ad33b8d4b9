// Fixed-size binary records (TensorFlow's FixedLengthRecordDataset, with the decoding
// built in): each file is an optional header, whole records, an optional footer. A record
// is a sequence of fields; each field becomes one component of the element.
//
//   // CIFAR-10 binary: 1 label byte, then 3x32x32 image bytes.
//   data::BinaryRecordSpec spec;
//   spec.fields = {{data::RecordType::UInt8, {}, kInt64},
//                  {data::RecordType::UInt8, {3, 32, 32}, kFloat32, 1.0 / 255}};
//   auto ds = data::binary_records({"data_batch_1.bin", "data_batch_2.bin"}, spec);
//
// Records are read lazily, one at a time, so files larger than memory are fine. A file
// whose size is not header + k * record + footer is a strata::Error naming the file. The
// file list is what AutoShardPolicy::File splits across workers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/shape.h>
#include <strata/data/dataset.h>

namespace strata::data {

// How a value is stored in the file.
enum class RecordType { UInt8, Int8, UInt16, Int16, Int32, Int64, Float32, Float64 };
size_t record_type_size(RecordType type);

struct RecordField {
  RecordType type = RecordType::UInt8;
  Shape shape;             // [] for one value
  DType dtype = kFloat32;  // of the component
  double scale = 1.0;      // component = stored value * scale (then cast to dtype)
};

struct BinaryRecordSpec {
  std::vector<RecordField> fields;
  int64_t header_bytes = 0;  // skipped at the start of each file
  int64_t footer_bytes = 0;  // ignored at the end of each file
  bool big_endian = false;   // byte order of multi-byte values
  int64_t record_bytes() const;
};

// Checks every file's size against the spec up front.
Dataset binary_records(std::vector<std::string> files, BinaryRecordSpec spec);

// Decodes one record's bytes into its components (used by binary_records; exposed for
// tests and custom readers).
Element decode_record(const uint8_t* record, const BinaryRecordSpec& spec);

}  // namespace strata::data
