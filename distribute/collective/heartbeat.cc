#include <strata/distribute/collective/heartbeat.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <strata/core/error.h>
#include <strata/distribute/collective/tcp_store.h>

namespace strata::distribute {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string round1(double s) {
  std::ostringstream os;
  os << std::round(s * 10.0) / 10.0;
  return os.str();
}

// "<beat> <collective>" -> collective, or -1.
int64_t collective_of(const std::string& record) {
  std::istringstream in(record);
  int64_t beat = 0, collective = -1;
  if (!(in >> beat >> collective)) return -1;
  return collective;
}

}  // namespace

std::string StallVerdict::describe(const std::string& member, double stall_timeout_seconds) const {
  std::ostringstream os;
  os << member << " " << rank << " made no progress for " << round1(std::max(stall_timeout_seconds, 0.0)) << " s: ";
  if (store_silent) {
    os << "the rendezvous store it hosts has not answered for " << round1(silent_seconds) << " s";
  } else {
    os << "its heartbeat has not changed for " << round1(silent_seconds) << " s (its last record: collective #"
       << peer_collective << "; this " << member << " waits in collective #" << own_collective << ")";
  }
  os << ", so its process is not running: stopped (SIGSTOP), frozen, or cut off from the network";
  return os.str();
}

std::string HeartbeatMonitor::live_key(const std::string& prefix, int rank) {
  return prefix + "/live/" + std::to_string(rank);
}
std::string HeartbeatMonitor::beat_key(const std::string& prefix, int rank) {
  return prefix + "/beat/" + std::to_string(rank);
}
std::string HeartbeatMonitor::stalled_key(const std::string& prefix) { return prefix + "/stalled"; }

HeartbeatMonitor::HeartbeatMonitor(HeartbeatOptions options) : options_(std::move(options)) {
  STRATA_CHECK(options_.store != nullptr, "HeartbeatMonitor: no store client given");
  STRATA_CHECK(options_.stall_timeout_seconds > 0 && std::isfinite(options_.stall_timeout_seconds),
               "HeartbeatMonitor: the stall timeout must be positive, got ", options_.stall_timeout_seconds);
  STRATA_CHECK(options_.rank >= 0 && options_.rank < options_.size, "HeartbeatMonitor: rank ", options_.rank,
               " is out of range for a group of ", options_.size);
  // Six beats per timeout: a live peer is seen beating several times within the bound,
  // and the detection delay stays a small fraction of it.
  interval_ = std::clamp(options_.stall_timeout_seconds / 6.0, 0.05, 1.0);
  tracks_.resize(size_t(options_.size));
  publish(0);  // exists before any peer can look for it
  thread_ = std::thread([this] { loop(); });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatMonitor::enter(int64_t collective) {
  entered_.store(collective, std::memory_order_relaxed);
  waiting_.store(true, std::memory_order_release);
}

void HeartbeatMonitor::leave() { waiting_.store(false, std::memory_order_release); }

std::optional<StallVerdict> HeartbeatMonitor::verdict() const {
  if (!has_verdict_.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return verdict_;
}

void HeartbeatMonitor::publish(int64_t beat) {
  options_.store->set(beat_key(options_.prefix, options_.rank),
                      std::to_string(beat) + " " + std::to_string(entered_.load(std::memory_order_relaxed)));
}

bool HeartbeatMonitor::judge() {
  TcpStore& store = *options_.store;
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) continue;
    const std::string key = beat_key(options_.prefix, r);
    if (!store.check({key})) continue;  // a member without heartbeats: nothing to judge by
    const std::string record = store.get(key, options_.stall_timeout_seconds);
    Track& t = tracks_[size_t(r)];
    const auto now = Clock::now();
    if (record != t.value || t.changed == Clock::time_point{}) {
      t.value = record;
      t.changed = now;
      continue;
    }
    const double silent = std::chrono::duration<double>(now - t.changed).count();
    if (silent < options_.stall_timeout_seconds) continue;
    // Silent, but a member whose store connection closed is gone, not stalled: the
    // collective reports that itself, at once.
    if (!store.check({live_key(options_.prefix, r)})) continue;
    StallVerdict v;
    v.rank = r;
    v.silent_seconds = silent;
    v.peer_collective = collective_of(record);
    v.own_collective = entered_.load(std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      verdict_ = v;
      has_verdict_.store(true, std::memory_order_release);
    }
    std::ostringstream os;
    os << v.rank << " " << v.silent_seconds << " " << v.peer_collective << " " << v.own_collective << " 0";
    store.set(stalled_key(options_.prefix), os.str());
    return true;
  }
  return false;
}

void HeartbeatMonitor::loop() {
  int64_t beat = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const bool judged = verdict_.has_value();
    lock.unlock();
    bool found = false;
    if (!store_broken_) {
      const auto t0 = Clock::now();
      try {
        publish(++beat);
        // Peers are judged only while this member waits for them; their records are
        // remembered across collectives, so a silence that began earlier still counts.
        if (!judged && waiting_.load(std::memory_order_acquire)) found = judge();
      } catch (const std::exception&) {
        // The store failed. Fast (refused, closed): its host is gone, which the
        // collective reports itself. Slow (no answer until the client's deadline): its
        // host does not run — a stall of the store's host, if it is a member.
        store_broken_ = true;
        const double waited = seconds_since(t0);
        if (waited >= options_.stall_timeout_seconds) store_silent_seconds_ = waited;
      }
    }
    const int host = options_.store_host_rank;
    if (!judged && !found && store_silent_seconds_ > 0 && host >= 0 && host != options_.rank &&
        waiting_.load(std::memory_order_acquire)) {
      StallVerdict v;
      v.rank = host;
      v.silent_seconds = store_silent_seconds_;
      v.own_collective = entered_.load(std::memory_order_relaxed);
      v.store_silent = true;
      std::lock_guard<std::mutex> guard(mu_);
      verdict_ = v;
      has_verdict_.store(true, std::memory_order_release);
      found = true;
    }
    if (found && options_.on_stall) options_.on_stall();
    lock.lock();
    cv_.wait_for(lock, std::chrono::duration<double>(interval_), [&] { return stop_; });
  }
}

std::vector<int64_t> HeartbeatMonitor::peer_progress(TcpStore& store, const std::string& prefix, int size) {
  std::vector<int64_t> out(size_t(size), -1);
  for (int r = 0; r < size; ++r) {
    try {
      const std::string key = beat_key(prefix, r);
      if (store.check({key})) out[size_t(r)] = collective_of(store.get(key, 1.0));
    } catch (const Error&) {
      return out;  // the store is unreachable: nothing more to learn from it
    }
  }
  return out;
}

std::optional<StallVerdict> HeartbeatMonitor::published_verdict(TcpStore& store, const std::string& prefix) {
  try {
    const std::string key = stalled_key(prefix);
    if (!store.check({key})) return std::nullopt;
    std::istringstream in(store.get(key, 1.0));
    StallVerdict v;
    int store_silent = 0;
    if (!(in >> v.rank >> v.silent_seconds >> v.peer_collective >> v.own_collective >> store_silent)) return std::nullopt;
    v.store_silent = store_silent != 0;
    return v;
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace strata::distribute
