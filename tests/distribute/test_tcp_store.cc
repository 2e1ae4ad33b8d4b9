#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include <strata/core/error.h>
#include <strata/distribute/collective/tcp_store.h>

using namespace strata;
using namespace strata::distribute;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

TEST_CASE("TcpStore set/get/add/check/remove over loopback", "[store]") {
  TcpStoreServer server(0, "127.0.0.1");
  REQUIRE(server.port() > 0);
  TcpStore a("127.0.0.1", server.port(), 10.0);
  TcpStore b("127.0.0.1", server.port(), 10.0);
  CHECK(a.address() == "127.0.0.1:" + std::to_string(server.port()));

  a.set("greeting", "hello");
  CHECK(b.get("greeting") == "hello");
  // Values are bytes, NULs and all (NCCL ids are binary).
  const std::string binary("\0\x01\xff\0z", 5);
  b.set("blob", binary);
  CHECK(a.get("blob") == binary);
  a.set("greeting", "again");
  CHECK(b.get("greeting") == "again");

  CHECK(a.add("counter", 1) == 1);
  CHECK(b.add("counter", 5) == 6);
  CHECK(a.add("counter", -2) == 4);
  CHECK(b.get("counter") == "4");
  REQUIRE_THROWS_WITH(a.add("greeting", 1), Catch::Contains("key 'greeting' holds a value that is not an integer"));

  CHECK(a.check({"greeting", "counter"}));
  CHECK_FALSE(a.check({"greeting", "nope"}));
  CHECK(a.remove("greeting"));
  CHECK_FALSE(a.remove("greeting"));
  CHECK_FALSE(b.check({"greeting"}));

  const std::string big(3 << 20, 'x');  // larger than a socket buffer
  a.set("big", big);
  CHECK(b.get("big") == big);
}

TEST_CASE("TcpStore wait and get block until another client sets the keys", "[store]") {
  TcpStoreServer server(0, "127.0.0.1");
  TcpStore waiter("127.0.0.1", server.port(), 10.0);
  TcpStore setter("127.0.0.1", server.port(), 10.0);
  const auto t0 = Clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    setter.set("k1", "1");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    setter.set("k2", "2");
  });
  waiter.wait({"k1", "k2"});
  const double waited = since(t0);
  CHECK(waited >= 0.25);
  CHECK(waited < 5.0);
  CHECK(waiter.get("k2") == "2");
  t.join();

  // get() waits for a key that is not there yet.
  std::thread t2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    setter.set("late", "value");
  });
  CHECK(waiter.get("late", 5.0) == "value");
  t2.join();

  // A timeout too large for a millisecond deadline means "practically forever" (clamped),
  // not an overflowed deadline in the past that fails at once.
  std::thread t3([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    setter.set("patient", "yes");
  });
  CHECK(waiter.get("patient", 1e300) == "yes");
  t3.join();
}

TEST_CASE("TcpStore wait times out naming the missing keys", "[store]") {
  TcpStoreServer server(0, "127.0.0.1");
  TcpStore s("127.0.0.1", server.port(), 10.0);
  s.set("present", "1");
  auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(s.wait({"present", "absent"}, 0.5),
                      Catch::Contains("timed out after 0.5 s waiting for key(s) 'present', 'absent'") &&
                          Catch::Contains("still missing: 'absent'") &&
                          Catch::Contains("127.0.0.1:" + std::to_string(server.port())));
  CHECK(since(t0) >= 0.45);
  CHECK(since(t0) < 3.0);
  t0 = Clock::now();
  REQUIRE_THROWS_WITH(s.get("absent", 0.3), Catch::Contains("waiting for key 'absent'"));
  CHECK(since(t0) < 3.0);
  // The connection is still good after a timeout.
  CHECK(s.get("present") == "1");
  REQUIRE_THROWS_WITH(s.wait({"x"}, 0.0), Catch::Contains("timeout must be positive"));
}

TEST_CASE("TcpStore serves many waiting clients at once", "[store]") {
  TcpStoreServer server(0, "127.0.0.1");
  constexpr int kClients = 8;
  std::vector<std::thread> threads;
  std::vector<int> ok(kClients, 0);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      TcpStore s("127.0.0.1", server.port(), 10.0);
      s.set("rank/" + std::to_string(i), std::to_string(i));
      std::vector<std::string> all;
      for (int j = 0; j < kClients; ++j) all.push_back("rank/" + std::to_string(j));
      s.wait(all);
      ok[size_t(i)] = s.get("rank/" + std::to_string((i + 1) % kClients)) == std::to_string((i + 1) % kClients);
      s.add("done", 1);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) CHECK(ok[size_t(i)] == 1);
  TcpStore s("127.0.0.1", server.port(), 10.0);
  CHECK(s.add("done", 0) == kClients);
}

TEST_CASE("TcpStore ephemeral keys vanish when their client disconnects", "[store]") {
  TcpStoreServer server(0, "127.0.0.1");
  TcpStore observer("127.0.0.1", server.port(), 10.0);
  {
    TcpStore owner("127.0.0.1", server.port(), 10.0);
    owner.set_ephemeral("alive/1", "1");
    owner.set("durable", "1");
    CHECK(observer.check({"alive/1", "durable"}));
  }
  const auto t0 = Clock::now();
  while (observer.check({"alive/1"}) && since(t0) < 5.0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(observer.check({"alive/1"}));
  CHECK(observer.check({"durable"}));
}

TEST_CASE("TcpStore client: connect retries until the server starts, and fails in time without one", "[store]") {
  const int port = find_free_port();
  std::unique_ptr<TcpStoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server = std::make_unique<TcpStoreServer>(port, "127.0.0.1");
  });
  TcpStore late("127.0.0.1", port, 10.0);  // the server appears while it retries
  starter.join();
  late.set("k", "v");
  CHECK(late.get("k") == "v");

  const int dead_port = find_free_port();
  const auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(TcpStore("127.0.0.1", dead_port, 0.5),
                      Catch::Contains("could not connect to the store at 127.0.0.1:" + std::to_string(dead_port)));
  CHECK(since(t0) < 3.0);
  REQUIRE_THROWS_WITH(TcpStore("127.0.0.1", 0, 1.0), Catch::Contains("port must be in [1, 65535]"));
}

TEST_CASE("TcpStore client fails promptly when the server goes away mid-wait", "[store]") {
  auto server = std::make_unique<TcpStoreServer>(0, "127.0.0.1");
  TcpStore s("127.0.0.1", server->port(), 30.0);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server->stop();
  });
  const auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(s.wait({"never"}), Catch::Contains("the server closed the connection") &&
                                             Catch::Contains("waiting for 'never'"));
  CHECK(since(t0) < 5.0);
  stopper.join();
  REQUIRE_THROWS_WITH(s.set("k", "v"), Catch::Contains("was lost by an earlier call"));
}

TEST_CASE("TcpStoreServer reports a port it cannot bind", "[store]") {
  TcpStoreServer first(0, "127.0.0.1");
  REQUIRE_THROWS_WITH(TcpStoreServer(first.port(), "127.0.0.1"), Catch::Contains("cannot listen on 127.0.0.1:"));
}
