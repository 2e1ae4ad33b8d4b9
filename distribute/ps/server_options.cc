#include <strata/distribute/ps/server_options.h>

#include <sstream>

#include <strata/core/error.h>

namespace strata::distribute::ps {

void ChiefWatch::touch() {
  std::lock_guard<std::mutex> lock(mu_);
  contacted_ = true;
  last_contact_ = Clock::now();
}

void ChiefWatch::shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

void ChiefWatch::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_.empty()) abort_ = why;
  cv_.notify_all();
}

bool ChiefWatch::stopped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutdown_ || !abort_.empty();
}

void ChiefWatch::join() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (shutdown_) return;
    if (!abort_.empty()) fail(server_, ": ", abort_);
    const auto now = Clock::now();
    if (contacted_) {
      const double silent = std::chrono::duration<double>(now - last_contact_).count();
      if (silent > options_.chief_timeout_seconds) {
        std::ostringstream os;
        os << server_ << ": lost the chief " << chief_ << ": no request for " << silent
           << " s (ServerOptions::chief_timeout_seconds = " << options_.chief_timeout_seconds
           << "); stopping, as the job cannot continue without its coordinator";
        fail(os.str());
      }
    } else if (std::chrono::duration<double>(now - start_).count() > options_.startup_timeout_seconds) {
      fail(server_, ": the chief ", chief_, " never contacted this server within ",
           options_.startup_timeout_seconds, " s (ServerOptions::startup_timeout_seconds)");
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

}  // namespace strata::distribute::ps
