// How the parameter-server strategy names a task in messages: TensorFlow's device-style
// name plus its address, e.g. "/job:ps/replica:0/task:1 (127.0.0.1:4001)".
#pragma once

#include <string>

#include <strata/distribute/cluster_resolver.h>

namespace strata::distribute::ps {

inline std::string task_label(const std::string& job, int index, const std::string& address = "") {
  std::string s = "/job:" + job + "/replica:0/task:" + std::to_string(index);
  if (!address.empty()) s += " (" + address + ")";
  return s;
}

inline std::string task_label(const ClusterSpec& spec, const std::string& job, int index) {
  return task_label(job, index, spec.task_address(job, index));
}

}  // namespace strata::distribute::ps
