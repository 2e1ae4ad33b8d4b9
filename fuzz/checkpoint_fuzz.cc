// Fuzz target: loading a checkpoint (train/checkpoint_file.h load_tensors): the JSON
// manifest, then the safetensors data file it names, checked against each other. The
// input is the manifest, the separator line below, then the data file (no separator: all
// manifest, no data file). A strata::Error is the expected outcome; anything else is a
// finding.
#include <cstdlib>

#include <strata/core/error.h>
#include <strata/train/checkpoint_file.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const auto parts = strata::fuzz::split_parts(strata::fuzz::as_view(data, size), "\n--strata-fuzz-data--\n");
  const fs::path dir = strata::fuzz::scratch_dir();
  const fs::path prefix = dir / "ckpt-7";
  std::error_code ec;
  fs::remove(dir / "ckpt-7.safetensors", ec);
  fs::remove(dir / "ckpt-7.alt.safetensors", ec);
  strata::fuzz::write_bytes(dir / "ckpt-7.manifest.json", parts[0]);
  if (parts.size() > 1) strata::fuzz::write_bytes(dir / "ckpt-7.safetensors", parts[1]);
  try {
    strata::train::read_checkpoint_manifest(prefix);
  } catch (const strata::Error&) {
  }
  try {
    const strata::train::TensorCheckpoint c = strata::train::load_tensors(prefix);
    for (const auto& [name, t] : c.tensors) {
      if (name.empty() || !t.defined() || !t.is_contiguous() || t.nbytes() > size) std::abort();
      strata::fuzz::touch(t.raw_data(), t.nbytes());
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
