// JobSecret: the shared secret that every process of one multi-process job holds, and
// that every connection to the job's TCP store and parameter servers proves it holds
// before anything is served (docs/SECURITY.md).
//
// Where it comes from, in order:
//   STRATA_JOB_SECRET        the secret itself (at least 16 bytes; strata-launch sets 64
//                            random hex digits per job, in the workers' environment only)
//   STRATA_JOB_SECRET_FILE   a file holding it (trailing whitespace ignored): for mpirun,
//                            Slurm or hand-started jobs, e.g. `openssl rand -hex 32 > f;
//                            chmod 600 f` on a shared file system
// A job of one process needs none: JobSecret::current() then makes a random one that
// only this process knows, so its own store and servers work and no other process can
// connect to them. Multi-process entry points use JobSecret::require(), which fails with
// a message saying how to provide one.
//
// The cryptography is libsodium's: HMAC-SHA256, a constant-time comparison and the
// operating system's CSPRNG (getrandom).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::distribute {

inline constexpr const char* kJobSecretEnv = "STRATA_JOB_SECRET";
inline constexpr const char* kJobSecretFileEnv = "STRATA_JOB_SECRET_FILE";

using Digest = std::array<uint8_t, 32>;

class JobSecret {
 public:
  static constexpr size_t kMinBytes = 16;

  // Throws strata::Error when `bytes` is shorter than kMinBytes.
  explicit JobSecret(std::string bytes);

  // 32 bytes from the CSPRNG, as 64 hex digits (printable, so it fits an environment
  // variable and a file).
  static JobSecret generate();
  // The secret named by the environment (above), nullopt when neither variable is set.
  // Throws when a variable is set but unusable (too short, unreadable file).
  static std::optional<JobSecret> from_environment();
  // The environment's secret, else throws strata::Error naming `who` and how to provide one.
  static JobSecret require(const std::string& who);
  // The environment's secret, else a random one made once for this process.
  static JobSecret current();

  // HMAC-SHA256(secret, message).
  Digest mac(std::string_view message) const;
  // True when `tag` is mac(message); compares in constant time.
  bool verify(std::string_view message, std::string_view tag) const;

  // The secret's bytes, e.g. to hand it to a child process's environment.
  const std::string& text() const { return bytes_; }

 private:
  std::string bytes_;
};

// `n` bytes from the CSPRNG.
std::string random_bytes(size_t n);
// Constant-time equality of two byte strings of the same length (false when the lengths differ).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace strata::distribute
