// The two TensorBoard event encoders (train/event_encoder.h) write the same bytes: in builds
// with protobuf, strata's own encoder is compared byte for byte with protobuf-lite's over
// every kind of event SummaryWriter writes, including default values (omitted by proto3),
// negative steps, -0.0, NaN and empty strings. test_summary_writer.cc reads the files back
// with two independent decoders in either build.
#include <cmath>
#include <limits>

#include <strata/core/error.h>
#include "tests/test_util.h"
#include <strata/train/event_encoder.h>

using namespace strata;
using strata::train::events::EventData;
using strata::train::events::HistogramData;

namespace {

std::vector<EventData> sample_events() {
  std::vector<EventData> out;
  for (double wall : {0.0, -0.0, 1732400000.25}) {
    EventData fv;
    fv.kind = EventData::Kind::FileVersion;
    fv.wall_time = wall;
    fv.text = "brain.Event:2";
    out.push_back(fv);
  }
  EventData empty_version;
  empty_version.kind = EventData::Kind::FileVersion;
  out.push_back(empty_version);
  for (int64_t step : {int64_t(0), int64_t(1), int64_t(300), int64_t(-1), int64_t(1) << 40}) {
    for (float v : {0.0f, -0.0f, 1.5f, std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::infinity()}) {
      EventData s;
      s.kind = EventData::Kind::Scalar;
      s.wall_time = 1732400000.5;
      s.step = step;
      s.tag = step == 0 ? "" : "loss/train";
      s.scalar = v;
      out.push_back(s);
    }
  }
  EventData h;
  h.kind = EventData::Kind::Histogram;
  h.wall_time = 12.0;
  h.step = 7;
  h.tag = "weights";
  out.push_back(h);  // an empty histogram: every field at its default
  h.histogram = HistogramData{-1.0, 2.5, 4.0, 3.0, 9.25, {-1e-12, 0.0, 1.1, 2.75, 1.7976931348623157e308},
                              {1.0, 0.0, 2.0, 1.0, 0.0}};
  out.push_back(h);
  h.histogram.min = -0.0;
  out.push_back(h);
  for (const std::string& text : {std::string(), std::string("**markdown** text"), std::string("a\nb\0c", 5)}) {
    EventData t;
    t.kind = EventData::Kind::Text;
    t.wall_time = 3.0;
    t.step = 2;
    t.tag = "notes";
    t.text = text;
    out.push_back(t);
  }
  for (size_t k : {size_t(0), size_t(1), size_t(3)}) {
    EventData image;
    image.kind = EventData::Kind::Image;
    image.wall_time = 4.0;
    image.step = 9;
    image.tag = "inputs";
    image.blobs = {"28", "28"};
    for (size_t i = 0; i < k; ++i) image.blobs.push_back(std::string("\x89PNG\r\n\x1a\n\0\0", 10) + std::string(i * 300, 'p'));
    out.push_back(image);
  }
  EventData long_text;
  long_text.kind = EventData::Kind::Text;
  long_text.step = 1;
  long_text.tag = std::string(200, 't');
  long_text.text = std::string(70000, 'x');  // lengths of three varint bytes
  out.push_back(long_text);
  return out;
}

}  // namespace

TEST_CASE("event encoder: strata's own encoder writes protobuf-lite's bytes", "[train][summary]") {
  const auto events = sample_events();
  if (!train::events::have_protobuf_encoder()) {
    // Built without protobuf: the own encoder is the one in use, and asking for protobuf's
    // says why it is missing.
    REQUIRE_THROWS_AS(train::events::encode_event_protobuf(events[0]), Error);
    for (const auto& e : events) CHECK(train::events::encode_event(e) == train::events::encode_event_wire(e));
    return;
  }
  for (size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i << " (kind " << int(events[i].kind) << ", step " << events[i].step << ")");
    const std::string want = train::events::encode_event_protobuf(events[i]);
    CHECK(train::events::encode_event_wire(events[i]) == want);
    CHECK(train::events::encode_event(events[i]) == want);
  }
}

TEST_CASE("event encoder: a scalar event's bytes, spelled out", "[train][summary]") {
  EventData s;
  s.kind = EventData::Kind::Scalar;
  s.wall_time = 1.0;
  s.step = 3;
  s.tag = "x";
  s.scalar = 2.0f;
  using namespace std::string_literals;
  const std::string want = "\x09\x00\x00\x00\x00\x00\x00\xf0\x3f"s  // wall_time 1.0 (fixed64)
                           "\x10\x03"s                              // step 3
                           "\x2a\x19"s                              // summary, 25 bytes
                           "\x0a\x17"s                              // value, 23 bytes
                           "\x0a\x01x"s                             // tag "x"
                           "\x15\x00\x00\x00\x40"s                  // simple_value 2.0f (fixed32)
                           "\x4a\x0d"s                              // metadata, 13 bytes
                           "\x0a\x09\x0a\x07scalars"s                // plugin_data { plugin_name }
                           "\x20\x01"s;                             // data_class SCALAR
  CHECK(train::events::encode_event_wire(s) == want);
}
