// Fuzz target: TensorBoard event files (train/event_file_reader.h): the TFRecord framing
// with its CRC32Cs, through read_event_file, and — since mutations rarely keep a checksum
// valid — the Event decoder directly on the same bytes as one record's payload. A
// strata::Error is the expected outcome of a bad file; anything else is a finding.
#include <strata/core/error.h>
#include <strata/train/event_file_reader.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = strata::fuzz::scratch_dir() / "events.out.tfevents.0.fuzz";
  const std::string_view bytes = strata::fuzz::as_view(data, size);
  strata::fuzz::write_bytes(path, bytes);
  try {
    for (const auto& e : strata::train::read_event_file(path))
      for (const auto& v : e.values) strata::fuzz::touch(v.tag.data(), v.tag.size());
  } catch (const strata::Error&) {
  }
  try {
    const strata::train::SummaryEvent e = strata::train::parse_summary_event(bytes, "fuzz input");
    for (const auto& v : e.values) {
      strata::fuzz::touch(v.tag.data(), v.tag.size());
      if (v.histogram) strata::fuzz::touch(v.histogram->bucket.data(), v.histogram->bucket.size() * sizeof(double));
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
