// Fuzz target: the safetensors reader (train/checkpoint_file.h read_safetensors), the
// structural validation every checkpoint load also runs. A strata::Error is the expected
// outcome of a bad file; anything else is a finding.
#include <cstdlib>

#include <strata/core/error.h>
#include <strata/train/checkpoint_file.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = strata::fuzz::scratch_dir() / "input.safetensors";
  strata::fuzz::write_bytes(path, strata::fuzz::as_view(data, size));
  try {
    const strata::train::SafetensorsContents c = strata::train::read_safetensors(path);
    for (const auto& [name, t] : c.tensors) {
      if (name.empty() || !t.defined() || !t.is_contiguous()) std::abort();
      if (t.nbytes() > size) std::abort();  // every byte came from the file
      strata::fuzz::touch(t.raw_data(), t.nbytes());
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
