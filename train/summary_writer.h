// SummaryWriter: writes TensorBoard event files (scalars, histograms, text, images), like
// tf.summary.create_file_writer.
//
// One file per writer in `logdir`: events.out.tfevents.<unix seconds>.<hostname>, with
// ".<pid>.<n>" appended when that name is taken. Records use TFRecord framing (u64le
// length, masked CRC32C of the length, payload, masked CRC32C of the payload); the first
// is an Event with file_version "brain.Event:2". Records are buffered in memory and
// written out every `flush_interval_seconds` by a background thread (0 writes each record
// at once), when the buffer passes a few MiB, on flush(), and on close() (or destruction).
// All methods are thread-safe. An I/O error in the background is reported by the next
// call on the writer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <strata/core/tensor.h>

namespace strata::train {

class SummaryWriter {
 public:
  // Creates `logdir` when missing. `flush_interval_seconds` must be >= 0 (TensorFlow's
  // default is 120 s). `filename_suffix` is appended to the file name (e.g. ".v2").
  explicit SummaryWriter(const std::filesystem::path& logdir,
                         double flush_interval_seconds = 120.0,
                         const std::string& filename_suffix = "");
  ~SummaryWriter();  // closes; errors at that point are printed, not thrown
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // A scalar (stored as a float32 simple_value, plugin "scalars").
  void scalar(const std::string& tag, double value, int64_t step);
  // The distribution of every element of `values` (any dtype, any device) as a
  // HistogramProto with TensorFlow's default exponential buckets (10% wide, +-1e-12 to
  // +-1e20, runs of empty buckets collapsed). NaN or infinite elements are an error, as in
  // TensorFlow.
  void histogram(const std::string& tag, const Tensor& values, int64_t step);
  // A text summary: a scalar DT_STRING tensor, plugin "text" (Markdown in TensorBoard).
  void text(const std::string& tag, const std::string& text, int64_t step);
  // Images, as tf.summary.image: `images` is [k, height, width, channels] with 1 (grey),
  // 2 (grey and alpha), 3 (RGB) or 4 (RGBA) channels, any device; floating values are in
  // [0, 1] (scaled to 0..255 as TensorFlow converts them: floor(x * 255.5), clipped),
  // integer values in 0..255 (clipped). The first max_outputs (>= 1) images are encoded as PNG and stored in
  // TensorFlow 2's format (plugin "images"); NaN values are an error.
  void image(const std::string& tag, const Tensor& images, int64_t step, int64_t max_outputs = 3);

  // Writes every buffered record to the file.
  void flush();
  // Flushes, fsyncs and closes the file and stops the background thread. Idempotent;
  // any later write throws.
  void close();
  bool closed() const;

  const std::filesystem::path& file_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::train
