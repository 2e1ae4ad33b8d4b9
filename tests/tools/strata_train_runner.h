// Runs build/bin/strata-train with arguments and captures its exit status and output
// (stdout and stderr), for the program-level tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "tests/test_util.h"

namespace strata::testing {

struct ProgramRun {
  int status = -1;
  std::string output;
};

inline ProgramRun run_strata_train(const std::string& args) {
  const std::string cmd = std::string(STRATA_BIN_DIR) + "/strata-train " + args + " 2>&1";
  ProgramRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace strata::testing
