// DirectoryLock (train/directory_lock.h).
//
// The exclusion itself is flock(2) on the lock file, held for the lock's lifetime: the
// kernel drops it when the process dies however it dies, so a lock file left behind by a
// killed job is simply not locked, and the next job takes it over (that is how stale locks
// of dead pids are handled without guessing from pids; Linux maps flock onto NFS byte-range
// locks, so it holds across hosts too). The file's JSON content only names the holder for
// the error message.
#include <strata/train/directory_lock.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include <strata/core/error.h>

namespace strata::train {

namespace fs = std::filesystem;

namespace {

std::string lock_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string lock_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string read_fd(int fd) {
  std::string out;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  return out;
}

// "strata-train (pid 123 on host h, since 2026-...)" from the lock file's content.
std::string describe_holder(const std::string& content) {
  try {
    const auto j = nlohmann::json::parse(content);
    return j.value("owner", std::string("a process")) + " (pid " + std::to_string(j.value("pid", int64_t(-1))) +
           " on host " + j.value("host", std::string("?")) + ", since " + j.value("since", std::string("?")) + ")";
  } catch (const nlohmann::json::exception&) {
    return "a process that has not written its name yet";
  }
}

}  // namespace

DirectoryLock::DirectoryLock(const fs::path& directory, const std::string& owner)
    : path_(lock_path(directory)) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  STRATA_CHECK(!ec, owner, ": cannot create the directory ", directory, ": ", ec.message());
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      fail(owner, ": cannot write in ", directory, " (creating its lock file ", path_, ": ", std::strerror(errno),
           ")");
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = describe_holder(read_fd(fd));
      ::close(fd);
      if (err != EWOULDBLOCK) fail(owner, ": cannot lock ", path_, ": ", std::strerror(err));
      fail(owner, ": ", directory, " is in use by ", holder, "; its lock file is ", path_,
           ". Two jobs in one directory would overwrite each other's checkpoints: wait for that one to finish, "
           "or use another directory");
    }
    // The holder before us may have removed the file between our open and our flock: then
    // we locked an unlinked inode, and must lock the file that is there now.
    struct stat by_fd{}, by_path{};
    if (::fstat(fd, &by_fd) != 0 || ::stat(path_.c_str(), &by_path) != 0 || by_fd.st_ino != by_path.st_ino ||
        by_fd.st_dev != by_path.st_dev) {
      ::close(fd);
      STRATA_CHECK(attempt < 100, owner, ": could not take the lock ", path_, " (it keeps being replaced)");
      continue;
    }
    // Content left by a holder that died without releasing: a stale lock, taken over.
    took_over_stale_ = !read_fd(fd).empty();
    const nlohmann::json me = {{"owner", owner}, {"pid", int64_t(::getpid())}, {"host", lock_host_name()},
                               {"since", lock_time_now()}};
    const std::string text = me.dump() + "\n";
    const bool written = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size());
    if (!written) {
      const int err = errno;
      ::unlink(path_.c_str());
      ::close(fd);
      fail(owner, ": cannot write in ", directory, " (writing its lock file ", path_, ": ", std::strerror(err), ")");
    }
    fd_ = fd;
    return;
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  // Unlink while still holding the lock, so that nobody locks the old inode in between
  // (a waiter that opened it re-checks the inode, see the constructor).
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace strata::train
