#include <strata/train/atomic_file.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <system_error>

#include <strata/core/error.h>

namespace strata::train {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;
constexpr std::string_view kTempTag = ".tmp-";

std::string errno_text(int err) { return std::string(std::strerror(err)); }

// Temporaries open in this process: never removed as "stale" while their writer lives.
std::mutex g_live_mutex;
std::set<std::string>& live_temps() {
  static std::set<std::string> s;
  return s;
}

std::string temp_prefix(const fs::path& target) {
  std::string prefix(1, '.');  // built by appends: GCC 12 misreports "." + s (-Wrestrict)
  prefix += target.filename().string();
  prefix += kTempTag;
  return prefix;
}

// The writer's pid from ".<name>.tmp-<pid>-<n>", or -1.
long temp_pid(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  const std::string rest = name.substr(prefix.size());
  const size_t dash = rest.find('-');
  if (dash == std::string::npos || dash == 0) return -1;
  try {
    return std::stol(rest.substr(0, dash));
  } catch (...) {
    return -1;
  }
}

void write_all(int fd, const char* p, size_t n, const fs::path& file) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("AtomicFile: writing ", file, " failed: ", errno_text(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

void fsync_dir(const fs::path& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("AtomicFile: opening directory ", dir, " to fsync failed: ", errno_text(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL); the rename is still done.
  if (rc != 0 && err != EINVAL)
    fail("AtomicFile: fsync of directory ", dir, " failed: ", errno_text(err));
}

}  // namespace

AtomicFile::AtomicFile(fs::path target, AtomicWriteHooks hooks)
    : target_(std::move(target)), hooks_(std::move(hooks)) {
  STRATA_CHECK(!target_.empty() && target_.has_filename(), "AtomicFile: invalid target path ",
               target_);
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  STRATA_CHECK(fs::is_directory(dir, ec), "AtomicFile: directory ", dir, " of ", target_,
               " does not exist");
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = dir / (temp_prefix(target_) + std::to_string(::getpid()) + "-" +
                   std::to_string(counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) fail("AtomicFile: cannot create temporary file ", temp_, " for ", target_, ": ",
                    errno_text(errno));
  std::lock_guard<std::mutex> lock(g_live_mutex);
  live_temps().insert(temp_.string());
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_.empty()) {
    if (!committed_ && !keep_temp_) ::unlink(temp_.c_str());
    std::lock_guard<std::mutex> lock(g_live_mutex);
    live_temps().erase(temp_.string());
  }
}

void AtomicFile::flush_buffer() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), temp_);
  buffer_.clear();
}

void AtomicFile::write(const void* data, size_t n) {
  STRATA_CHECK(fd_ >= 0 && !committed_, "AtomicFile::write: ", target_,
               " is already committed or failed");
  const char* p = static_cast<const char*>(data);
  if (buffer_.size() + n > kBufferBytes) {
    flush_buffer();
    if (n >= kBufferBytes) {  // large blocks bypass the buffer
      write_all(fd_, p, n, temp_);
      written_ += n;
      return;
    }
  }
  buffer_.append(p, n);
  written_ += n;
}

void AtomicFile::commit() {
  STRATA_CHECK(fd_ >= 0 && !committed_, "AtomicFile::commit: ", target_,
               " is already committed or failed");
  try {
    flush_buffer();
    if (::fsync(fd_) != 0) fail("AtomicFile: fsync of ", temp_, " failed: ", errno_text(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail("AtomicFile: closing ", temp_, " failed: ", errno_text(errno));
    if (hooks_.before_rename) hooks_.before_rename(target_, temp_);
  } catch (...) {
    keep_temp_ = hooks_.keep_temp_on_failure;
    discard();
    throw;
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    discard();
    fail("AtomicFile: renaming ", temp_, " over ", target_, " failed: ", errno_text(err));
  }
  committed_ = true;
  discard();  // unregisters the (now renamed) temp
  fs::path dir = target_.parent_path();
  fsync_dir(dir.empty() ? fs::path(".") : dir);
  remove_stale_atomic_temps(target_);
}

void write_file_atomic(const fs::path& path, std::string_view bytes, const AtomicWriteHooks& hooks) {
  AtomicFile file(path, hooks);
  file.write(bytes);
  file.commit();
}

bool is_atomic_temp_name(std::string_view name) {
  if (name.empty() || name[0] != '.') return false;
  const size_t tag = name.rfind(kTempTag);
  if (tag == std::string_view::npos || tag < 2) return false;
  // ".<name>.tmp-<pid>-<n>": digits, one dash, digits.
  std::string_view rest = name.substr(tag + kTempTag.size());
  const size_t dash = rest.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 >= rest.size()) return false;
  for (size_t i = 0; i < rest.size(); ++i)
    if (i != dash && (rest[i] < '0' || rest[i] > '9')) return false;
  return true;
}

size_t remove_stale_atomic_temps(const fs::path& target, const fs::path& keep) {
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const std::string prefix = temp_prefix(target);
  const long self = long(::getpid());
  size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return 0;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    const long pid = temp_pid(name, prefix);
    if (pid < 0 || !is_atomic_temp_name(name) || it->path() == keep) continue;
    {
      std::lock_guard<std::mutex> lock(g_live_mutex);
      if (live_temps().count(it->path().string())) continue;  // a live writer here
    }
    // Another process's temporary: leave it while that process lives (it may still be
    // writing); a dead writer's temporary is garbage.
    if (pid != self && pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code rm_ec;
    if (fs::remove(it->path(), rm_ec)) ++removed;
  }
  return removed;
}

}  // namespace strata::train
