// Fuzz target: the TCP store server's request handling (distribute/collective/tcp_store.h):
// the bytes one connection sends — length-prefixed frames of set / get / add / check /
// wait / remove requests — fed to a fresh server state as its serving thread would. A
// malformed request drops the connection; nothing may crash, hang or throw.
#include <strata/distribute/collective/tcp_store.h>
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string replies =
      strata::distribute::TcpStoreServer::serve_bytes_for_testing(strata::fuzz::as_view(data, size));
  strata::fuzz::touch(replies.data(), replies.size());
  return 0;
}
