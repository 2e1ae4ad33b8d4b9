// The TCP store server's request handling on raw bytes (TcpStoreServer::
// serve_bytes_for_testing, the fuzz target's entry point): requests a hostile or broken
// client can send are answered with an error or a timeout, never undefined behaviour.
// Inputs found by fuzz/tcp_store_fuzz.cc.
#include <climits>
#include <string>

#include "tests/test_util.h"
#include <strata/distribute/collective/tcp_store.h>

namespace {

// The wire format (distribute/collective/tcp_store.cc): u32le frame length, then an opcode
// and u32le-length strings / i64le integers.
void store_req_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
void store_req_i64(std::string& s, int64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char((uint64_t(v) >> (8 * i)) & 0xff));
}
void store_req_str(std::string& s, const std::string& v) {
  store_req_u32(s, uint32_t(v.size()));
  s += v;
}
std::string store_req_frame(const std::string& payload) {
  std::string out;
  store_req_u32(out, uint32_t(payload.size()));
  return out + payload;
}

}  // namespace

TEST_CASE("TcpStoreServer: an add that overflows is refused, the key keeps its value", "[store]") {
  std::string set(1, char(1)), add(1, char(4)), get(1, char(3));
  store_req_str(set, "n");
  store_req_str(set, std::to_string(INT64_MAX));
  store_req_str(add, "n");
  store_req_i64(add, 1);
  store_req_i64(get, 10);
  store_req_str(get, "n");
  const std::string replies = strata::distribute::TcpStoreServer::serve_bytes_for_testing(
      store_req_frame(set) + store_req_frame(add) + store_req_frame(get));
  CHECK(replies.find("overflows 64-bit integers") != std::string::npos);
  CHECK(replies.find(std::to_string(INT64_MAX)) != std::string::npos);  // get still sees it
}

TEST_CASE("TcpStoreServer: a wait of INT64_MAX milliseconds times out instead of overflowing", "[store]") {
  for (const int64_t timeout_ms : {INT64_MAX, INT64_MIN, int64_t(-1)}) {
    std::string wait(1, char(6));
    store_req_i64(wait, timeout_ms);
    store_req_u32(wait, 1);
    store_req_str(wait, "never");
    const std::string replies = strata::distribute::TcpStoreServer::serve_bytes_for_testing(store_req_frame(wait));
    // One reply frame: status Timeout (1), then the missing keys.
    REQUIRE(replies.size() > 5);
    CHECK(replies[4] == 1);
    CHECK(replies.find("never") != std::string::npos);
  }
}
