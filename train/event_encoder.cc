#include <strata/train/event_encoder.h>

#include <cstring>

#include <strata/core/error.h>
#include "strata_build_config.h"

#if STRATA_HAS_PROTOBUF
#include "train/event.pb.h"  // generated into the build tree (train/CMakeLists.txt)
#endif

namespace strata::train::events {

namespace {

// ---- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) ----
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Event, Summary, Summary.Value, SummaryMetadata(.PluginData), HistogramProto, TensorProto
// field numbers (train/event.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2, kValueHisto = 5, kValueTensor = 8, kValueMetadata = 9;
constexpr uint32_t kMetadataPluginData = 1, kMetadataDataClass = 4, kPluginName = 1;
constexpr uint32_t kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
                   kHistoBucketLimit = 6, kHistoBucket = 7;
constexpr uint32_t kTensorDtype = 1, kTensorShape = 2, kTensorStringVal = 8;
constexpr uint32_t kShapeDim = 2, kDimSize = 1;
constexpr uint64_t kDataClassScalar = 1, kDataClassTensor = 2, kDataClassBlobSequence = 3, kDtString = 7;

class Writer {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(char(uint8_t(v) | 0x80));
      v >>= 7;
    }
    out_.push_back(char(uint8_t(v)));
  }
  void key(uint32_t field, WireType type) { varint((uint64_t(field) << 3) | type); }
  // proto3: a scalar equal to its default is not written (doubles compared by their bits,
  // as protobuf does: -0.0 is written).
  void varint_field(uint32_t field, uint64_t v) {
    if (v == 0) return;
    key(field, kVarint);
    varint(v);
  }
  void double_field(uint32_t field, double v, bool always = false) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    if (bits == 0 && !always) return;
    key(field, kFixed64);
    fixed(bits, 8);
  }
  void float_field(uint32_t field, float v) {  // a oneof member: always written
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    key(field, kFixed32);
    fixed(bits, 4);
  }
  void bytes_field(uint32_t field, const std::string& s) {  // always written (oneof / repeated / sub-message)
    key(field, kLengthDelimited);
    varint(s.size());
    out_ += s;
  }
  void string_field(uint32_t field, const std::string& s) {  // a proto3 singular string
    if (!s.empty()) bytes_field(field, s);
  }
  void packed_doubles(uint32_t field, const std::vector<double>& v) {
    if (v.empty()) return;
    key(field, kLengthDelimited);
    varint(v.size() * 8);
    for (double d : v) {
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      fixed(bits, 8);
    }
  }
  std::string take() { return std::move(out_); }

 private:
  void fixed(uint64_t bits, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(char(uint8_t(bits >> (8 * i))));
  }
  std::string out_;
};

std::string metadata(const char* plugin, uint64_t data_class) {
  Writer plugin_data;
  plugin_data.string_field(kPluginName, plugin);
  Writer m;
  m.bytes_field(kMetadataPluginData, plugin_data.take());
  m.varint_field(kMetadataDataClass, data_class);
  return m.take();
}

std::string summary_value(const EventData& e) {
  Writer v;
  v.string_field(kValueTag, e.tag);
  switch (e.kind) {
    case EventData::Kind::Scalar:
      v.float_field(kValueSimpleValue, e.scalar);
      v.bytes_field(kValueMetadata, metadata("scalars", kDataClassScalar));
      break;
    case EventData::Kind::Histogram: {
      const HistogramData& h = e.histogram;
      Writer w;
      w.double_field(kHistoMin, h.min);
      w.double_field(kHistoMax, h.max);
      w.double_field(kHistoNum, h.num);
      w.double_field(kHistoSum, h.sum);
      w.double_field(kHistoSumSquares, h.sum_squares);
      w.packed_doubles(kHistoBucketLimit, h.bucket_limit);
      w.packed_doubles(kHistoBucket, h.bucket);
      v.bytes_field(kValueHisto, w.take());  // no metadata, as SummaryWriter::histogram writes it
      break;
    }
    case EventData::Kind::Text: {
      Writer t;
      t.varint_field(kTensorDtype, kDtString);
      t.bytes_field(kTensorShape, "");  // present and empty: a scalar
      t.bytes_field(kTensorStringVal, e.text);
      v.bytes_field(kValueTensor, t.take());
      v.bytes_field(kValueMetadata, metadata("text", kDataClassTensor));
      break;
    }
    case EventData::Kind::Image: {
      Writer dim;
      dim.varint_field(kDimSize, uint64_t(e.blobs.size()));
      Writer shape;
      shape.bytes_field(kShapeDim, dim.take());
      Writer t;
      t.varint_field(kTensorDtype, kDtString);
      t.bytes_field(kTensorShape, shape.take());
      for (const std::string& b : e.blobs) t.bytes_field(kTensorStringVal, b);
      v.bytes_field(kValueTensor, t.take());
      v.bytes_field(kValueMetadata, metadata("images", kDataClassBlobSequence));
      break;
    }
    case EventData::Kind::FileVersion:
      break;
  }
  return v.take();
}

#if STRATA_HAS_PROTOBUF
namespace tb = strata::tensorboard;
#endif

}  // namespace

std::string encode_event_wire(const EventData& e) {
  Writer w;
  w.double_field(kEventWallTime, e.wall_time);
  if (e.kind == EventData::Kind::FileVersion) {
    w.bytes_field(kEventFileVersion, e.text);
    return w.take();
  }
  w.varint_field(kEventStep, uint64_t(e.step));  // int64: negative steps take 10 bytes
  Writer summary;
  summary.bytes_field(kSummaryValue, summary_value(e));
  w.bytes_field(kEventSummary, summary.take());
  return w.take();
}

std::string encode_event_protobuf(const EventData& e) {
#if STRATA_HAS_PROTOBUF
  tb::Event ev;
  ev.set_wall_time(e.wall_time);
  if (e.kind == EventData::Kind::FileVersion) {
    ev.set_file_version(e.text);
  } else {
    ev.set_step(e.step);
    tb::Summary::Value* v = ev.mutable_summary()->add_value();
    v->set_tag(e.tag);
    switch (e.kind) {
      case EventData::Kind::Scalar:
        v->set_simple_value(e.scalar);
        v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("scalars");
        v->mutable_metadata()->set_data_class(tb::DATA_CLASS_SCALAR);
        break;
      case EventData::Kind::Histogram: {
        const HistogramData& h = e.histogram;
        tb::HistogramProto* p = v->mutable_histo();
        p->set_min(h.min);
        p->set_max(h.max);
        p->set_num(h.num);
        p->set_sum(h.sum);
        p->set_sum_squares(h.sum_squares);
        for (double l : h.bucket_limit) p->add_bucket_limit(l);
        for (double c : h.bucket) p->add_bucket(c);
        break;
      }
      case EventData::Kind::Text: {
        tb::TensorProto* t = v->mutable_tensor();
        t->set_dtype(tb::DT_STRING);
        t->mutable_tensor_shape();  // present and empty: a scalar
        t->add_string_val(e.text);
        v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
        v->mutable_metadata()->set_data_class(tb::DATA_CLASS_TENSOR);
        break;
      }
      case EventData::Kind::Image: {
        tb::TensorProto* t = v->mutable_tensor();
        t->set_dtype(tb::DT_STRING);
        t->mutable_tensor_shape()->add_dim()->set_size(int64_t(e.blobs.size()));
        for (const std::string& b : e.blobs) t->add_string_val(b);
        v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("images");
        v->mutable_metadata()->set_data_class(tb::DATA_CLASS_BLOB_SEQUENCE);
        break;
      }
      case EventData::Kind::FileVersion:
        break;
    }
  }
  std::string data;
  STRATA_CHECK(ev.SerializeToString(&data), "SummaryWriter: protobuf serialization failed");
  return data;
#else
  (void)e;
  fail("SummaryWriter: this strata was built without protobuf (STRATA_WITH_PROTOBUF=OFF); "
       "its event files are written by strata's own encoder");
#endif
}

std::string encode_event(const EventData& e) {
  return STRATA_HAS_PROTOBUF ? encode_event_protobuf(e) : encode_event_wire(e);
}

bool have_protobuf_encoder() { return STRATA_HAS_PROTOBUF; }

}  // namespace strata::train::events
