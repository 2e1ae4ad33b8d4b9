// DirectoryLock: keeps a second job out of a model directory.
//
// Two trainers writing checkpoints and summaries into one directory interleave their
// checkpoints, delete each other's (max_to_keep) and resume from whichever wrote last. The
// lock is a file <directory>/.strata.lock created exclusively (O_CREAT | O_EXCL, atomic
// on local file systems and NFSv3+), holding JSON that names the holder: pid, host and
// start time. A second locker is refused with an error naming that holder. A lock left by
// a process that died without releasing it (SIGKILL, power loss) is stale: when its host is
// this host and its pid no longer exists, it is taken over; on another host liveness
// cannot be checked, so the error says which file to remove.
//
//   train::DirectoryLock lock(model_dir, "strata-train");   // throws when held
//   ... train ...
//   // released by the destructor
#pragma once

#include <filesystem>
#include <string>

namespace strata::train {

class DirectoryLock {
 public:
  // Creates `directory` when missing and takes its lock; `owner` names the program in the
  // lock file and in messages. Throws strata::Error when the directory cannot be written
  // or another live process holds the lock.
  DirectoryLock(const std::filesystem::path& directory, const std::string& owner);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // True when a stale lock (a dead process on this host) was replaced.
  bool took_over_stale() const { return took_over_stale_; }

  static std::filesystem::path lock_path(const std::filesystem::path& directory) {
    return directory / ".strata.lock";
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool took_over_stale_ = false;
};

}  // namespace strata::train
