#include <strata/distribute/distributed_file_utils.h>

#include <string>
#include <system_error>

#include <strata/distribute/strategy.h>

namespace strata::distribute {

namespace fs = std::filesystem;

bool is_chief(const Strategy& strategy) { return strategy.worker_index() == 0; }

fs::path write_dirpath(const fs::path& dirpath, const Strategy& strategy) {
  if (is_chief(strategy)) return dirpath;
  return dirpath / ("workertemp_" + std::to_string(strategy.worker_index()));
}

void remove_temp_dirpath(const fs::path& dirpath, const Strategy& strategy) {
  if (is_chief(strategy)) return;
  std::error_code ec;
  fs::remove_all(write_dirpath(dirpath, strategy), ec);
}

WriteDir::WriteDir(fs::path dirpath, const Strategy& strategy)
    : path_(write_dirpath(dirpath, strategy)), temporary_(!is_chief(strategy)) {
  // A worker killed in an earlier run left its directory behind: its checkpoints must not
  // be resumed from (the chief's are the job's).
  if (temporary_) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

WriteDir::~WriteDir() {
  if (!temporary_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace strata::distribute
