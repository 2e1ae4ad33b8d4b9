// TensorBoard Event records for SummaryWriter (train/summary_writer.h): an event described
// by EventData, serialized in the protobuf wire format of train/event.proto (TensorFlow's
// field numbers).
//
// Two encoders write the same bytes: protobuf-lite's generated code (builds with
// STRATA_WITH_PROTOBUF, the default) and a small hand-written one (always built; the only
// one in builds without protobuf, e.g. on the lent GPU machine). encode_event() is the one
// this build uses; the other is kept for tests that compare them byte for byte.
// Internal to strata_train.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::train::events {

struct HistogramData {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

struct EventData {
  enum class Kind { FileVersion, Scalar, Histogram, Text, Image };
  Kind kind = Kind::Scalar;
  double wall_time = 0;
  int64_t step = 0;          // not written for FileVersion
  std::string tag;           // Scalar, Histogram, Text
  std::string text;          // FileVersion: the version ("brain.Event:2"); Text: the text
  float scalar = 0;          // Scalar: simple_value, plugin "scalars"
  HistogramData histogram;   // Histogram: HistogramProto
  // Image: TensorFlow 2's image summary, a DT_STRING tensor of shape [2 + k] holding the
  // width and height as decimal strings, then k PNG images; plugin "images", data class
  // BLOB_SEQUENCE.
  std::vector<std::string> blobs;
};

// The hand-written encoder (proto3 rules: default scalars omitted, oneof members and
// present sub-messages always written, fields in field-number order).
std::string encode_event_wire(const EventData& event);
// protobuf-lite's serialization; raises strata::Error in builds without protobuf.
std::string encode_event_protobuf(const EventData& event);
// The encoder of this build.
std::string encode_event(const EventData& event);
// True when encode_event_protobuf is available.
bool have_protobuf_encoder();

}  // namespace strata::train::events
