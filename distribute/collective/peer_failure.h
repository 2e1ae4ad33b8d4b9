// PeerFailure: the error a collective raises when it failed because of another member of
// the group — one that died, stalled or did not arrive — rather than because of this one.
//
// Why a type of its own: in a job of N processes, one failure makes the other N - 1 fail
// too. Launchers must tell the root cause from its echoes, so a program that catches a
// PeerFailure prints peer_failure_marker(e) on stderr and exits with
// kPeerFailureExitCode; strata-launch reads the marker, blames the named member instead
// of the one that reported it, and kills that member when it is still running (a stalled
// process never exits by itself). strata-train does this.
//
// Causes:
//  - Gone:    the member's process closed its connections (it exited or was killed);
//             detected at once.
//  - Stalled: the member's heartbeat stopped for CommunicationOptions::stall_timeout_seconds
//             while this member waited for it in a collective: its whole process is not
//             running (SIGSTOP, a frozen machine) or is cut off from the store.
//  - Behind:  the member is alive (its heartbeat goes on) but did not reach the collective
//             within CommunicationOptions::timeout_seconds (a very slow step, or a hang in
//             the member's own code).
#pragma once

#include <string>
#include <utility>

#include <strata/core/error.h>

namespace strata::distribute {

enum class PeerFailureCause { Gone, Stalled, Behind };
const char* peer_failure_cause_name(PeerFailureCause cause);  // "gone", "stalled", "behind"

// Exit status for a process that stops because a peer failed (sysexits' EX_TEMPFAIL: the
// job may succeed when relaunched).
inline constexpr int kPeerFailureExitCode = 75;

class PeerFailure : public Error {
 public:
  // `member`: how the group names its members ("worker", "rank"); `rank`: the one at fault.
  PeerFailure(const std::string& message, std::string member, int rank, PeerFailureCause cause)
      : Error(message), member_(std::move(member)), rank_(rank), cause_(cause) {}

  const std::string& member() const { return member_; }
  int rank() const { return rank_; }
  PeerFailureCause cause() const { return cause_; }
  // The same failure with another message (for code that adds context while rethrowing).
  PeerFailure with_message(const std::string& message) const { return PeerFailure(message, member_, rank_, cause_); }

 private:
  std::string member_;
  int rank_;
  PeerFailureCause cause_;
};

// The line a program prints (alone, on stderr) so that its launcher blames the peer:
// "strata-peer-failure: worker 1 stalled".
std::string peer_failure_marker(const PeerFailure& failure);

struct PeerFailureMarker {
  std::string member;  // "worker"
  int rank = -1;
  std::string cause;   // "gone", "stalled", "behind"
};
// Parses a marker line (a trailing '\n' or '\r' is ignored); false for any other line.
bool parse_peer_failure_marker(const std::string& line, PeerFailureMarker& out);

}  // namespace strata::distribute
