#include <strata/train/summary_writer.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <strata/core/error.h>
#include <strata/train/crc32c.h>
#include <strata/train/event_encoder.h>
#include <strata/train/png_encoder.h>

namespace strata::train {
namespace fs = std::filesystem;
using events::EventData;

namespace {

// Write out early when this much is buffered, whatever the interval.
constexpr size_t kMaxBufferedBytes = size_t(4) << 20;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h(buf);
  std::replace(h.begin(), h.end(), '/', '_');  // a name, never a path
  return h;
}

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<char*>(&v), 4); }

// TFRecord framing (tensorflow/core/lib/io/record_writer.cc).
void append_record(std::string& out, const std::string& data) {
  const uint64_t len = data.size();
  char len_bytes[8];
  std::memcpy(len_bytes, &len, 8);
  out.append(len_bytes, 8);
  append_u32(out, crc32c_mask(crc32c(len_bytes, 8)));
  out.append(data);
  append_u32(out, crc32c_mask(crc32c(data)));
}

// TensorFlow's default histogram bucket limits (tensorflow/core/lib/histogram/histogram.cc):
// -DBL_MAX, ..., -1e-12, 0, 1e-12, ..., growing by 10% ..., DBL_MAX.
const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> pos;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) pos.push_back(v);
    pos.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * pos.size() + 1);
    for (auto it = pos.rbegin(); it != pos.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), pos.begin(), pos.end());
    return all;
  }();
  return limits;
}

}  // namespace

struct SummaryWriter::Impl {
  fs::path path;
  double interval = 0;
  mutable std::mutex mu;
  std::condition_variable cv;
  int fd = -1;
  bool closed = false;
  bool stop = false;
  std::string buffer;                 // framed records not yet written
  std::optional<std::string> error;   // a background write failure, reported once
  std::thread flusher;

  void write_all_locked(const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("SummaryWriter: writing ", path, " failed: ", std::strerror(errno));
      }
      p += w;
      n -= size_t(w);
    }
  }

  void flush_locked() {
    if (buffer.empty()) return;
    std::string pending;
    pending.swap(buffer);  // a failed write drops these records rather than retrying forever
    write_all_locked(pending.data(), pending.size());
  }

  void raise_pending_locked() {
    if (error) {
      std::string e = *error;
      error.reset();
      throw Error(e);
    }
  }

  void add_event(const EventData& event, const char* op) {
    const std::string data = events::encode_event(event);
    std::lock_guard<std::mutex> lock(mu);
    raise_pending_locked();
    STRATA_CHECK(!closed, "SummaryWriter::", op, ": the writer for ", path, " is closed");
    append_record(buffer, data);
    if (interval == 0 || buffer.size() >= kMaxBufferedBytes) flush_locked();
  }

  void run_flusher() {
    std::unique_lock<std::mutex> lock(mu);
    const auto period = std::chrono::duration<double>(interval);
    // Beyond ~3 years the deadline would overflow the clock's nanoseconds: such an interval
    // means "only on flush() and close()".
    const bool timed = interval <= 1e8;
    while (!stop) {
      if (timed)
        cv.wait_for(lock, period, [&] { return stop; });
      else
        cv.wait(lock, [&] { return stop; });
      if (stop) break;
      try {
        flush_locked();
      } catch (const Error& e) {
        if (!error) error = e.what();
      }
    }
  }
};

SummaryWriter::SummaryWriter(const fs::path& logdir, double flush_interval_seconds,
                             const std::string& filename_suffix)
    : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(std::isfinite(flush_interval_seconds) && flush_interval_seconds >= 0,
               "SummaryWriter: flush_interval_seconds must be a finite value >= 0, got ",
               flush_interval_seconds);
  STRATA_CHECK(filename_suffix.find('/') == std::string::npos,
               "SummaryWriter: filename_suffix must not contain '/': \"", filename_suffix, "\"");
  std::error_code ec;
  fs::create_directories(logdir, ec);
  STRATA_CHECK(fs::is_directory(logdir), "SummaryWriter: cannot create log directory ", logdir,
               ec ? ": " + ec.message() : std::string());
  impl_->interval = flush_interval_seconds;

  const std::string base = "events.out.tfevents." + std::to_string(long(std::time(nullptr))) +
                           "." + host_name();
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 1000 && impl_->fd < 0; ++attempt) {
    // Two writers in one second on one host: keep TensorBoard's pattern, add pid + counter.
    const std::string name =
        attempt == 0 ? base + filename_suffix
                     : base + "." + std::to_string(::getpid()) + "." +
                           std::to_string(counter.fetch_add(1)) + filename_suffix;
    impl_->path = logdir / name;
    impl_->fd = ::open(impl_->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (impl_->fd < 0 && errno != EEXIST)
      fail("SummaryWriter: cannot create ", impl_->path, ": ", std::strerror(errno));
  }
  STRATA_CHECK(impl_->fd >= 0, "SummaryWriter: no free event file name in ", logdir);

  try {
    EventData first;
    first.kind = EventData::Kind::FileVersion;
    first.wall_time = now_seconds();
    first.text = "brain.Event:2";
    impl_->add_event(first, "SummaryWriter");
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->flush_locked();  // a valid event file exists from the start
  } catch (...) {
    ::close(impl_->fd);
    throw;
  }
  if (impl_->interval > 0) impl_->flusher = std::thread([this] { impl_->run_flusher(); });
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "strata: SummaryWriter: closing " << impl_->path << " failed: " << e.what()
              << "\n";
  }
}

void SummaryWriter::scalar(const std::string& tag, double value, int64_t step) {
  STRATA_CHECK(!tag.empty(), "SummaryWriter::scalar: empty tag");
  EventData ev;
  ev.kind = EventData::Kind::Scalar;
  ev.wall_time = now_seconds();
  ev.step = step;
  ev.tag = tag;
  ev.scalar = float(value);
  impl_->add_event(ev, "scalar");
}

void SummaryWriter::histogram(const std::string& tag, const Tensor& values, int64_t step) {
  STRATA_CHECK(!tag.empty(), "SummaryWriter::histogram: empty tag");
  STRATA_CHECK(values.defined(), "SummaryWriter::histogram: '", tag, "': undefined tensor");
  const std::vector<double> xs = values.to_vector<double>();
  const std::vector<double>& limits = default_bucket_limits();
  std::vector<double> counts(limits.size(), 0.0);
  double lo = DBL_MAX, hi = -DBL_MAX, sum = 0, sum_sq = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    STRATA_CHECK(std::isfinite(x), "SummaryWriter::histogram: '", tag, "': element ", i,
                 " is ", x, " (NaN or infinite values cannot be summarised)");
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
    sum_sq += x * x;
    // As TensorFlow counts: x goes to the first bucket whose limit is strictly above it,
    // i.e. bucket i holds [limits[i-1], limits[i]); DBL_MAX itself lands in the last one.
    size_t b = size_t(std::upper_bound(limits.begin(), limits.end(), x) - limits.begin());
    if (b == limits.size()) b = limits.size() - 1;
    counts[b] += 1.0;
  }
  EventData ev;
  ev.kind = EventData::Kind::Histogram;
  ev.wall_time = now_seconds();
  ev.step = step;
  ev.tag = tag;
  events::HistogramData& h = ev.histogram;
  h.min = xs.empty() ? 0.0 : lo;
  h.max = xs.empty() ? 0.0 : hi;
  h.num = double(xs.size());
  h.sum = sum;
  h.sum_squares = sum_sq;
  // TensorFlow's Histogram::EncodeToProto: a run of empty buckets becomes one bucket
  // ending at the run's last limit, so only a few hundred numbers are stored.
  for (size_t i = 0; i < counts.size();) {
    double end = limits[i];
    double count = counts[i];
    ++i;
    if (count <= 0.0) {
      while (i < counts.size() && counts[i] <= 0.0) {
        end = limits[i];
        count = counts[i];
        ++i;
      }
    }
    h.bucket_limit.push_back(end);
    h.bucket.push_back(count);
  }
  impl_->add_event(ev, "histogram");
}

void SummaryWriter::text(const std::string& tag, const std::string& text, int64_t step) {
  STRATA_CHECK(!tag.empty(), "SummaryWriter::text: empty tag");
  EventData ev;
  ev.kind = EventData::Kind::Text;
  ev.wall_time = now_seconds();
  ev.step = step;
  ev.tag = tag;
  ev.text = text;
  impl_->add_event(ev, "text");
}

void SummaryWriter::image(const std::string& tag, const Tensor& images, int64_t step, int64_t max_outputs) {
  STRATA_CHECK(!tag.empty(), "SummaryWriter::image: empty tag");
  STRATA_CHECK(images.defined() && images.ndim() == 4, "SummaryWriter::image: '", tag,
               "': expected images [k, height, width, channels], got ",
               images.defined() ? shape_str(images.shape()) : std::string("an undefined tensor"));
  const int64_t k = images.dim(0), height = images.dim(1), width = images.dim(2), channels = images.dim(3);
  STRATA_CHECK(channels >= 1 && channels <= 4, "SummaryWriter::image: '", tag,
               "': images need 1 to 4 channels (grey, grey and alpha, RGB, RGBA), got ", shape_str(images.shape()));
  STRATA_CHECK(height >= 1 && width >= 1, "SummaryWriter::image: '", tag, "': empty images ",
               shape_str(images.shape()));
  STRATA_CHECK(max_outputs >= 1, "SummaryWriter::image: '", tag, "': max_outputs must be >= 1, got ", max_outputs);
  STRATA_CHECK(images.dtype() != kBool, "SummaryWriter::image: '", tag, "': bool images are not supported");
  const int64_t n = std::min(k, max_outputs);
  const std::vector<double> values = images.slice(0, 0, n).to_vector<double>();
  const bool floating = is_floating(images.dtype());
  const size_t pixels = size_t(height * width * channels);
  std::vector<uint8_t> bytes(pixels);
  EventData ev;
  ev.kind = EventData::Kind::Image;
  ev.wall_time = now_seconds();
  ev.step = step;
  ev.tag = tag;
  ev.blobs = {std::to_string(width), std::to_string(height)};
  for (int64_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < pixels; ++p) {
      double v = values[size_t(i) * pixels + p];
      STRATA_CHECK(!std::isnan(v), "SummaryWriter::image: '", tag, "': image ", i, " has a NaN value");
      // tf.image.convert_image_dtype(saturate=True): floats scaled by 255.5 and truncated.
      if (floating) v = std::floor(v * 255.5);
      bytes[p] = uint8_t(std::clamp(v, 0.0, 255.0));
    }
    ev.blobs.push_back(encode_png(bytes.data(), height, width, int(channels)));
  }
  impl_->add_event(ev, "image");
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->raise_pending_locked();
  STRATA_CHECK(!impl_->closed, "SummaryWriter::flush: the writer for ", impl_->path,
               " is closed");
  impl_->flush_locked();
}

void SummaryWriter::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closed) return;
    impl_->closed = true;
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->flusher.joinable()) impl_->flusher.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::optional<std::string> problem = std::move(impl_->error);
  impl_->error.reset();
  try {
    impl_->flush_locked();
  } catch (const Error& e) {
    if (!problem) problem = e.what();
  }
  if (::fsync(impl_->fd) != 0 && !problem && errno != EINVAL)
    problem = strata::detail::concat("SummaryWriter: fsync of ", impl_->path, " failed: ",
                             std::strerror(errno));
  if (::close(impl_->fd) != 0 && !problem)
    problem = strata::detail::concat("SummaryWriter: closing ", impl_->path, " failed: ",
                             std::strerror(errno));
  impl_->fd = -1;
  if (problem) throw Error(*problem);
}

bool SummaryWriter::closed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->closed;
}

const fs::path& SummaryWriter::file_path() const { return impl_->path; }

}  // namespace strata::train
