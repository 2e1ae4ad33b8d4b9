// ServerOptions and ChiefWatch: how long the servers of a parameter-server job (parameter
// servers and workers) wait for the chief, which coordinates the job.
//
// A server learns that the chief is alive from its requests (the coordinator sends a
// heartbeat to every task each ClusterCoordinatorOptions::heartbeat_interval_seconds).
// join() returns when the chief asks the cluster to shut down, and throws a strata::Error
// naming the chief when it has been silent for chief_timeout_seconds after its first
// contact (a chief failure stops the job, as in TensorFlow) or never came within
// startup_timeout_seconds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

namespace strata::distribute {

struct ServerOptions {
  double chief_timeout_seconds = 60.0;
  double startup_timeout_seconds = 600.0;
};

namespace ps {

class ChiefWatch {
 public:
  ChiefWatch(ServerOptions options, std::string server_name, std::string chief_name)
      : options_(options), server_(std::move(server_name)), chief_(std::move(chief_name)) {}

  // The chief was heard from.
  void touch();
  // The chief asked us to stop (join returns normally).
  void shutdown();
  // Ends join() with an error (e.g. the server itself failed).
  void abort(const std::string& why);
  // Blocks until shutdown (returns), abort or a chief timeout (throws strata::Error).
  void join();
  bool stopped() const;

 private:
  using Clock = std::chrono::steady_clock;
  ServerOptions options_;
  std::string server_, chief_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_contact_{};
  bool contacted_ = false;
  bool shutdown_ = false;
  std::string abort_;
};

}  // namespace ps
}  // namespace strata::distribute
