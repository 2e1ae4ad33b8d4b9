#include <strata/distribute/collective/peer_failure.h>

#include <cctype>
#include <sstream>

namespace strata::distribute {

namespace {
constexpr const char* kMarkerPrefix = "strata-peer-failure: ";
}  // namespace

const char* peer_failure_cause_name(PeerFailureCause cause) {
  switch (cause) {
    case PeerFailureCause::Gone: return "gone";
    case PeerFailureCause::Stalled: return "stalled";
    case PeerFailureCause::Behind: return "behind";
  }
  return "?";
}

std::string peer_failure_marker(const PeerFailure& failure) {
  return std::string(kMarkerPrefix) + failure.member() + " " + std::to_string(failure.rank()) + " " +
         peer_failure_cause_name(failure.cause());
}

bool parse_peer_failure_marker(const std::string& line, PeerFailureMarker& out) {
  const std::string prefix = kMarkerPrefix;
  if (line.compare(0, prefix.size(), prefix) != 0) return false;
  std::string rest = line.substr(prefix.size());
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r')) rest.pop_back();
  std::istringstream in(rest);
  PeerFailureMarker m;
  std::string rank_text, extra;
  if (!(in >> m.member >> rank_text >> m.cause) || (in >> extra)) return false;
  if (rank_text.empty() || rank_text.size() > 9) return false;
  for (char c : rank_text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  m.rank = std::stoi(rank_text);
  if (m.cause != "gone" && m.cause != "stalled" && m.cause != "behind") return false;
  out = std::move(m);
  return true;
}

}  // namespace strata::distribute
