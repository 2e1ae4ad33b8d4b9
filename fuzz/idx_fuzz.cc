// Fuzz target: the IDX reader (data/idx.h), raw or gzip-compressed, through the file path
// a user's --data mnist:DIR takes. A strata::Error is the expected outcome of a bad file;
// anything else (a crash, a sanitizer report, another exception, a result that breaks the
// reader's promise) is a finding.
#include <cstdlib>

#include <strata/core/error.h>
#include <strata/data/idx.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = strata::fuzz::scratch_dir() / "input-idx-ubyte";
  strata::fuzz::write_bytes(path, strata::fuzz::as_view(data, size));
  try {
    const strata::data::IdxArray a = strata::data::read_idx(path.string());
    // The promise: the values fill the (decompressed) bytes exactly as the dims say.
    uint64_t count = 1;
    for (int64_t d : a.dims) count *= uint64_t(d);
    const uint64_t expected = count * strata::data::idx_type_size(a.type_code);
    if (a.data_offset > a.bytes.size() || a.bytes.size() - a.data_offset != expected) std::abort();
    strata::fuzz::touch(a.data(), size_t(expected));
  } catch (const strata::Error&) {
  }
  return 0;
}
