// WorkerProcesses: the worker processes of a cross-process benchmark, started by
// strata-bench itself (it re-executes its own binary with a hidden worker flag).
//
// Each worker's stdout and stderr go to a temporary file, shown in the error when it
// fails. wait() is bounded: when any worker fails, or the deadline passes, every other
// worker is killed and a strata::Error names the worker and what happened. Workers also
// die with the parent (PR_SET_PDEATHSIG), so an interrupted strata-bench leaves none.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace strata::bench {

class WorkerProcesses {
 public:
  // Starts one process per argv (argv[0] is the program's path).
  explicit WorkerProcesses(const std::vector<std::vector<std::string>>& argvs);
  ~WorkerProcesses();  // kills and reaps workers still running, removes the output files
  WorkerProcesses(const WorkerProcesses&) = delete;
  WorkerProcesses& operator=(const WorkerProcesses&) = delete;

  // Waits until every worker exited with status 0. Throws strata::Error (after killing
  // the others) when one exits otherwise or `timeout_seconds` pass first.
  void wait(double timeout_seconds);

  // The program this process runs (/proc/self/exe), for re-executing it as a worker.
  static std::string self_executable();

 private:
  struct Worker {
    pid_t pid = -1;
    bool running = false;
    std::string log_path;
  };
  void kill_all();
  std::string output_tail(const Worker& w) const;

  std::vector<Worker> workers_;
};

}  // namespace strata::bench
