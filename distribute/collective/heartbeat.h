// HeartbeatMonitor: stall detection for a group of processes that run collectives
// (used by the Gloo communicator).
//
// What "stall" means here. A collective blocks until every member arrives, so a member
// that stops makes every other member wait. Two different things can make a member not
// arrive, and they must not be confused:
//  - its process stopped running (SIGSTOP, a frozen machine, cut off from the network):
//    it can neither compute nor talk. This is a *stall*.
//  - its process runs but its step is slow (a long evaluation, a checkpoint write, a
//    slow disk) or it hangs in its own code. This is *slowness*: it must not be reported
//    as a stall, however long it takes, until the collective's hard timeout.
// Each member therefore runs a heartbeat thread that, every interval, publishes on the
// rendezvous store a record "<beat count> <collective number>": the beat count proves
// that the process runs, the collective number (how many collectives it has entered) is
// its progress. While this member waits in a collective, the thread also reads every
// peer's record: a peer whose beat count has not changed for stall_timeout_seconds (as
// measured by this member's clock: no clock agreement needed), and which is still
// connected to the store (else it is gone, which the collective itself reports at once),
// is stalled. The monitor then records a verdict, publishes it on the store (so members
// woken by the consequences report the same cause), and calls on_stall, which aborts the
// collective in progress. A peer whose beats go on is never declared stalled; the
// collective's hard timeout (CommunicationOptions::timeout_seconds) bounds its wait, and
// the collective numbers then say who is behind (peer_progress()).
//
// Detection time: a stalled peer is named between stall_timeout_seconds and that plus
// two heartbeat intervals after this member starts waiting for it (the interval is a
// sixth of the timeout, between 50 ms and 1 s). When the store's own host is stalled,
// the monitor's store calls stop answering and the host is named after the timeout plus
// the store client's 2 s margin.
//
// The thread needs a store client of its own: a TcpStore connection serves one call at a
// time, and a heartbeat must never wait behind another thread's blocking wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace strata::distribute {

class TcpStore;

struct HeartbeatOptions {
  // A store client used by the heartbeat thread alone; its timeout should be
  // stall_timeout_seconds (it bounds how long a silent store is waited for).
  std::shared_ptr<TcpStore> store;
  std::string prefix;  // the group's key prefix
  int rank = 0;
  int size = 1;
  std::string member = "rank";  // how messages name members: "worker 1"
  double stall_timeout_seconds = 60.0;
  // The member whose process hosts the store (-1: not a member): named when the store
  // stops answering.
  int store_host_rank = -1;
  // Called once, on the heartbeat thread, when a stall is found while a collective waits.
  std::function<void()> on_stall;
};

struct StallVerdict {
  int rank = -1;               // the stalled member
  double silent_seconds = 0;   // how long its heartbeat had not changed
  int64_t peer_collective = -1;  // the collective number its last record showed (-1: unknown)
  int64_t own_collective = 0;    // the collective this member waited in
  bool store_silent = false;     // found because the store (hosted by `rank`) stopped answering
  std::string describe(const std::string& member, double stall_timeout_seconds) const;
};

class HeartbeatMonitor {
 public:
  // Publishes the first record (so peers can read it once construction is over) and
  // starts the thread.
  explicit HeartbeatMonitor(HeartbeatOptions options);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // This member entered collective number `collective` (1, 2, ...) and waits in it until
  // leave(). Cheap: two atomic stores.
  void enter(int64_t collective);
  void leave();

  // The stall found, if any. Cheap while there is none (one atomic load, no lock): the
  // communicator asks before every collective.
  std::optional<StallVerdict> verdict() const;
  double interval_seconds() const { return interval_; }

  // Key names, shared with readers of the records. live_key is the member's liveness
  // marker (set_ephemeral by the member's main store client: gone with its process).
  static std::string live_key(const std::string& prefix, int rank);
  static std::string beat_key(const std::string& prefix, int rank);
  static std::string stalled_key(const std::string& prefix);
  // Every member's last published collective number (-1 where unreadable), read now
  // through `store` (any client of the group's store).
  static std::vector<int64_t> peer_progress(TcpStore& store, const std::string& prefix, int size);
  // The verdict another member published, if any.
  static std::optional<StallVerdict> published_verdict(TcpStore& store, const std::string& prefix);

 private:
  void loop();
  void publish(int64_t beat);
  bool judge();  // true when a verdict was reached

  HeartbeatOptions options_;
  double interval_;
  std::atomic<int64_t> entered_{0};       // the last collective entered
  std::atomic<bool> waiting_{false};      // inside a collective now
  struct Track {
    std::string value;
    std::chrono::steady_clock::time_point changed;
  };
  std::vector<Track> tracks_;             // per peer, heartbeat thread only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::optional<StallVerdict> verdict_;
  std::atomic<bool> has_verdict_{false};  // set (release) after verdict_, under mu_
  bool store_broken_ = false;             // heartbeat thread only
  double store_silent_seconds_ = 0;       // > 0: the store stopped answering (heartbeat thread only)
  std::thread thread_;
};

}  // namespace strata::distribute
