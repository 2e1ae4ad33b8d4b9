// AtomicFile: replaces a file so that readers (and a crash at any moment) see either the
// complete old contents or the complete new contents, never a mix.
//
// The new contents go to a hidden temporary file in the target's directory (same file
// system, so the rename is atomic): `.<name>.tmp-<pid>-<n>`. commit() fsyncs it, renames it
// over the target and fsyncs the directory so the rename itself survives a power loss.
// A writer destroyed without commit() (an exception mid-save) removes its temporary file;
// a crash leaves it behind, and the next commit() to the same target removes such stale
// temporaries. Readers open the target by name and never see temporaries.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>

namespace strata::train {

// Test hook: what the next commits do between "temp file written and fsynced" and the
// rename. Production code passes no hooks.
struct AtomicWriteHooks {
  // Called with (target, temp path) just before the rename. Throwing from it aborts the
  // commit: the target is untouched.
  std::function<void(const std::filesystem::path& target, const std::filesystem::path& temp)>
      before_rename;
  // When before_rename throws, leave the temporary file on disk exactly as a crash at that
  // point would, instead of removing it (lets tests prove stale temps are harmless and are
  // cleaned by the next commit).
  bool keep_temp_on_failure = false;
};

class AtomicFile {
 public:
  // Creates the temporary file next to `target` (whose directory must exist).
  explicit AtomicFile(std::filesystem::path target, AtomicWriteHooks hooks = {});
  ~AtomicFile();  // without commit(): closes and removes the temporary file
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes to the temporary file (buffered internally; write errors such as a full
  // disk are reported here or by commit()).
  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Total bytes written so far.
  size_t size() const { return written_; }

  // Flushes, fsyncs, renames over the target, fsyncs the directory, then removes stale
  // temporaries of the same target left by crashed writers. Once only.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  void flush_buffer();
  void discard() noexcept;

  std::filesystem::path target_;
  std::filesystem::path temp_;
  AtomicWriteHooks hooks_;
  int fd_ = -1;
  bool committed_ = false;
  bool keep_temp_ = false;
  size_t written_ = 0;
  std::string buffer_;
};

// Writes `bytes` to `path` atomically (AtomicFile in one call).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes,
                       const AtomicWriteHooks& hooks = {});

// True when `name` is the file name of an AtomicFile temporary (for directory scans that
// must skip them, e.g. a checkpoint manager listing checkpoints).
bool is_atomic_temp_name(std::string_view name);

// Removes temporaries of `target` left behind by crashed writers; returns how many.
// Skips the temporary `keep` (an AtomicFile's own) when given.
size_t remove_stale_atomic_temps(const std::filesystem::path& target,
                                 const std::filesystem::path& keep = {});

}  // namespace strata::train
