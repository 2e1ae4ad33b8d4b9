// Fuzz target: the parameter-server RPC message decoder (distribute/ps/rpc_codec.h), which
// every parameter server and worker runs on each request it receives. The input is the
// header frame, then each tensor frame, separated by the line below. A strata::Error is
// the expected outcome of a malformed message; anything else is a finding.
#include <cstdlib>
#include <vector>

#include <strata/core/error.h>
#include <strata/distribute/ps/rpc_codec.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = strata::fuzz::split_parts(strata::fuzz::as_view(data, size), "\n--strata-fuzz-frame--\n");
  const std::vector<std::string_view> tensor_frames(parts.begin() + 1, parts.end());
  try {
    const strata::distribute::ps::RpcMessage m = strata::distribute::ps::decode_rpc_message(parts[0], tensor_frames);
    if (m.tensors.size() != tensor_frames.size()) std::abort();
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      const strata::Tensor& t = m.tensors[i];
      if (!t.defined() || !t.is_contiguous() || t.nbytes() != tensor_frames[i].size()) std::abort();
      strata::fuzz::touch(t.raw_data(), t.nbytes());
    }
    // A decoded message re-encodes (the server's reply path).
    const std::string header = strata::distribute::ps::encode_rpc_header(m);
    strata::fuzz::touch(header.data(), header.size());
  } catch (const strata::Error&) {
  }
  return 0;
}
