// Where a worker of a multi-worker job writes checkpoints and summaries (TensorFlow's
// distributed_file_utils): the chief writes to the real directory; every other worker
// writes to a temporary directory of its own inside it ("<dir>/workertemp_<rank>") and
// deletes it when done, so that only the chief's files remain. Non-chief workers still
// write (rather than skip the save) because saving may take part in collectives.
#pragma once

#include <filesystem>

namespace strata::distribute {

class Strategy;

// True when this process writes the real files: single-process strategies, and worker 0
// (the chief) of a multi-worker strategy.
bool is_chief(const Strategy& strategy);

// `dirpath` for the chief, "<dirpath>/workertemp_<worker index>" for the others.
std::filesystem::path write_dirpath(const std::filesystem::path& dirpath, const Strategy& strategy);

// Deletes a non-chief worker's temporary directory (write_dirpath(dirpath, strategy));
// does nothing on the chief. Errors are ignored (another attempt cannot do better).
void remove_temp_dirpath(const std::filesystem::path& dirpath, const Strategy& strategy);

// RAII: the write directory of this worker. A temporary one is emptied when the object is
// created (left over from a failed run) and removed when it is destroyed.
class WriteDir {
 public:
  WriteDir(std::filesystem::path dirpath, const Strategy& strategy);
  ~WriteDir();
  WriteDir(const WriteDir&) = delete;
  WriteDir& operator=(const WriteDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  bool temporary() const { return temporary_; }

 private:
  std::filesystem::path path_;
  bool temporary_;
};

}  // namespace strata::distribute
