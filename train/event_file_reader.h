// Reading TensorBoard event files back, as tf.compat.v1.train.summary_iterator does: the
// TFRecord framing (u64le length, masked CRC32C of the length, payload, masked CRC32C of
// the payload) with both checksums verified, and each payload decoded as an Event of
// train/event.proto — wall time, step, file version and the summary values SummaryWriter
// writes (scalars, histograms, text, images), from strata's files or TensorFlow's. Fields
// it does not know are skipped, as protobuf does.
//
// Event files come from other processes and other tools: every malformed input (a
// truncated record, a checksum mismatch, a bad varint, a length past the end, a wire type
// the field cannot have) throws strata::Error naming the file, the record and the offset.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::train {

struct SummaryHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

// One Summary.Value.
struct SummaryValue {
  std::string tag;
  std::string plugin_name;                   // metadata.plugin_data.plugin_name ("scalars", ...)
  std::optional<float> simple_value;         // a scalar
  std::optional<SummaryHistogram> histogram; // histo
  std::vector<std::string> strings;          // tensor.string_val (text; an image's width, height, PNGs)
};

struct SummaryEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;          // "brain.Event:2" in a file's first event
  std::vector<SummaryValue> values;  // empty when the event holds no summary
};

// Splits TFRecord-framed bytes into their payloads, verifying both CRCs of each record.
// `name` names the bytes in errors (a file path).
std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& name);

// Decodes one Event payload. `name` names it in errors ("events.out... record 3").
SummaryEvent parse_summary_event(std::string_view payload, const std::string& name);

// Every event of a file, in order.
std::vector<SummaryEvent> read_event_file(const std::filesystem::path& path);

}  // namespace strata::train
