#include <strata/distribute/job_secret.h>

#include <sodium.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <strata/core/error.h>

namespace strata::distribute {

namespace {

void init_sodium_once() {
  static const int rc = ::sodium_init();  // thread-safe, idempotent; < 0 only without a usable CSPRNG
  STRATA_CHECK(rc >= 0, "job secret: libsodium could not be initialised (no usable random source)");
}

std::string trim_secret_text(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

}  // namespace

JobSecret::JobSecret(std::string bytes) : bytes_(std::move(bytes)) {
  STRATA_CHECK(bytes_.size() >= kMinBytes, "job secret: ", bytes_.size(), " bytes is too short, expected at least ",
               kMinBytes, " (strata-launch makes 64 random hex digits; by hand: openssl rand -hex 32)");
}

std::string random_bytes(size_t n) {
  init_sodium_once();
  std::string out(n, '\0');
  ::randombytes_buf(out.data(), n);
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  init_sodium_once();
  return a.empty() || ::sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

JobSecret JobSecret::generate() {
  const std::string raw = random_bytes(32);
  std::string hex(2 * raw.size() + 1, '\0');
  ::sodium_bin2hex(hex.data(), hex.size(), reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  hex.pop_back();  // the terminating NUL
  return JobSecret(std::move(hex));
}

std::optional<JobSecret> JobSecret::from_environment() {
  if (const char* text = std::getenv(kJobSecretEnv); text && *text) {
    STRATA_CHECK(std::string_view(text).size() >= kMinBytes, kJobSecretEnv, " holds ", std::string_view(text).size(),
                 " bytes, expected at least ", kMinBytes, " (e.g. the output of: openssl rand -hex 32)");
    return JobSecret(text);
  }
  if (const char* path = std::getenv(kJobSecretFileEnv); path && *path) {
    std::ifstream in(path, std::ios::binary);
    STRATA_CHECK(in.good(), kJobSecretFileEnv, "=", path, ": cannot open the file");
    std::ostringstream all;
    all << in.rdbuf();
    std::string text = trim_secret_text(all.str());
    STRATA_CHECK(text.size() >= kMinBytes, kJobSecretFileEnv, "=", path, ": the file holds ", text.size(),
                 " bytes, expected a secret of at least ", kMinBytes, " (e.g. openssl rand -hex 32 > ", path, ")");
    return JobSecret(std::move(text));
  }
  return std::nullopt;
}

JobSecret JobSecret::require(const std::string& who) {
  if (auto s = from_environment()) return *s;
  fail(who, ": a job of several processes needs a shared job secret, and none is set: strata-launch provides one; "
            "for mpirun, Slurm or processes started by hand, give every process the same secret of at least ",
       kMinBytes, " bytes in ", kJobSecretEnv, " or in a file named by ", kJobSecretFileEnv,
       " (e.g. openssl rand -hex 32 > secret; chmod 600 secret)");
}

JobSecret JobSecret::current() {
  if (auto s = from_environment()) return *s;
  // One per process: its own store and servers accept its own clients, nobody else's.
  static const JobSecret local = generate();
  return local;
}

Digest JobSecret::mac(std::string_view message) const {
  init_sodium_once();
  crypto_auth_hmacsha256_state state;
  ::crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(bytes_.data()), bytes_.size());
  ::crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(message.data()), message.size());
  Digest out{};
  ::crypto_auth_hmacsha256_final(&state, out.data());
  ::sodium_memzero(&state, sizeof(state));
  return out;
}

bool JobSecret::verify(std::string_view message, std::string_view tag) const {
  const Digest expected = mac(message);
  return constant_time_equal(std::string_view(reinterpret_cast<const char*>(expected.data()), expected.size()), tag);
}

}  // namespace strata::distribute
