// Fuzz target: restoring a dataset iterator's saved position (data::IteratorState), as a
// checkpoint's input state is restored: the text form's parser (IteratorState::from_string),
// then Iterator::restore into each pipeline of fuzz/iterator_state_pipelines.h, then a few
// elements read from the restored iterator. An input starting with the text form's magic
// ("sdata1") is parsed as text; any other is read as the state's words directly (8 bytes
// each, little-endian), which reaches the stages' records without the parser in the way. A
// strata::Error is the expected outcome; anything else is a finding.
#include <cstring>

#include <strata/core/error.h>
#include <strata/data/iterator_state.h>
#include "fuzz/fuzz_util.h"
#include "fuzz/iterator_state_pipelines.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<strata::data::Dataset> pipelines = strata::fuzz::iterator_state_pipelines();
  const std::string_view input = strata::fuzz::as_view(data, size);
  strata::data::IteratorState state;
  if (input.substr(0, 6) == "sdata1") {
    try {
      state = strata::data::IteratorState::from_string(std::string(input));
    } catch (const strata::Error&) {
      return 0;
    }
  } else {
    state.words.resize(size / sizeof(int64_t));
    if (!state.words.empty()) std::memcpy(state.words.data(), data, state.words.size() * sizeof(int64_t));
  }
  for (const auto& pipeline : pipelines) {
    try {
      strata::data::Iterator it = pipeline.make_iterator(0);
      it.restore(state);
      for (int i = 0; i < 8 && it.next(); ++i) {
      }
    } catch (const strata::Error&) {
    }
  }
  return 0;
}
