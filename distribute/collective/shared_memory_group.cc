#include <strata/distribute/collective/shared_memory_group.h>

#include <strata/core/error.h>
#include <strata/distribute/collective/tcp_store.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::distribute {

namespace {

// The segment's layout version: a peer built with another layout (RankState gained
// `reduced` in version 2) finds a different magic, and the whole group keeps using TCP.
constexpr uint64_t kMagic = 0x7374726174613032ull;  // "strata02"
constexpr size_t kLine = 64;
// From this many ranks and bytes in a round, all_reduce folds one piece per rank and the
// ranks copy each other's (below) instead of every rank folding the whole round: each rank
// then reads about 2 rounds' bytes instead of one per rank (8 ranks: 2 instead of 8), for
// one more wait. Two ranks read 2 either way.
constexpr int kPieceFoldMinRanks = 3;
constexpr size_t kPieceFoldMinBytes = size_t(64) << 10;
// How long a waiter polls before it sleeps on the futex: long enough to catch a peer
// that arrives within a few microseconds (the usual case in a synchronous step), short
// enough not to take a core from work that shares it for long.
constexpr auto kPoll = std::chrono::microseconds(50);
// The longest single futex sleep: how often a sleeping waiter checks its peers' processes,
// the abort flag and the deadline.
constexpr auto kSleepSlice = std::chrono::milliseconds(10);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

uint64_t load(const uint64_t& v) { return std::atomic_ref<const uint64_t>(v).load(std::memory_order_acquire); }
uint32_t load32(const uint32_t& v) { return std::atomic_ref<const uint32_t>(v).load(std::memory_order_seq_cst); }

// The start time of a process (field 22 of /proc/<pid>/stat, in clock ticks since boot),
// or 0 when it has exited (gone, or a zombie waiting for its parent).
uint64_t process_start_time(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 1));
  std::string state;
  fields >> state;  // field 3
  if (state == "Z" || state == "X" || state == "x") return 0;
  std::string skip;
  for (int field = 4; field < 22; ++field) fields >> skip;
  uint64_t start = 0;
  fields >> start;
  return fields ? start : 0;
}

std::string random_hex(size_t bytes) {
  std::random_device device;
  std::string out;
  static const char* digits = "0123456789abcdef";
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = device() & 0xff;
    out += digits[v >> 4];
    out += digits[v & 15];
  }
  return out;
}

// out = ((part_of(0) op part_of(1)) op part_of(2)) ...: the rank order every collective here
// folds in (float addition is not associative), so every path gives the same bits.
template <typename PartOf>
void fold_in_rank_order(SharedMemoryGroup::Combine combine, uint8_t* out, int size, PartOf part_of, size_t n) {
  combine(out, part_of(0), part_of(1), n);
  for (int q = 2; q < size; ++q) combine(out, out, part_of(q), n);
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

// The segment: this header, one RankState per rank, then two slots of chunk_bytes per rank.
struct SharedMemoryGroup::Header {
  uint64_t magic;
  char token[32];
  uint32_t size;
  uint32_t pad;
  uint64_t chunk_bytes;
  // Bumped after every publication; waiters sleep on it (a futex word).
  alignas(kLine) uint32_t epoch;
  uint32_t sleepers;    // waiters asleep or about to sleep on `epoch`
  uint32_t aborted_by;  // 0 while healthy, else 1 + the rank that aborted the group
};

struct SharedMemoryGroup::RankState {
  alignas(kLine) uint64_t arrived;  // the last round whose chunk this rank has staged
  alignas(kLine) uint64_t reduced;  // the last round whose own piece this rank has folded
  alignas(kLine) uint64_t done;     // the last round this rank has finished reading
  uint32_t closed;                  // 1 once this rank's group is destroyed: it comes no more
  int64_t pid;
  uint64_t start_time;
};

namespace {
// Where things are in the segment: the header, then one RankState per rank, then the slots.
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kRankStateBytes = 256;
size_t segment_bytes(int size, size_t chunk) {
  return kHeaderBytes + size_t(size) * (kRankStateBytes + 2 * chunk);
}
}  // namespace

SharedMemoryGroup::SharedMemoryGroup(int rank, int size, size_t chunk_bytes, void* base, size_t mapped_bytes)
    : rank_(rank), size_(size), chunk_bytes_(chunk_bytes), base_(base), mapped_bytes_(mapped_bytes) {}

SharedMemoryGroup::~SharedMemoryGroup() {
  // Peers waiting for a round this rank never reaches fail at once instead of at their
  // timeout (as closing a TCP connection wakes them); rounds it finished stay readable.
  std::atomic_ref<uint32_t>(state(rank_).closed).store(1, std::memory_order_seq_cst);
  wake_all();
  ::munmap(base_, mapped_bytes_);
}

void SharedMemoryGroup::wake_all() {
  Header& h = header();
  std::atomic_ref<uint32_t>(h.epoch).fetch_add(1, std::memory_order_seq_cst);
  ::syscall(SYS_futex, &h.epoch, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

SharedMemoryGroup::Header& SharedMemoryGroup::header() const { return *static_cast<Header*>(base_); }

SharedMemoryGroup::RankState* SharedMemoryGroup::state_in(void* base, int rank) {
  static_assert(sizeof(Header) <= kHeaderBytes && sizeof(RankState) <= kRankStateBytes);
  return reinterpret_cast<RankState*>(static_cast<uint8_t*>(base) + kHeaderBytes + size_t(rank) * kRankStateBytes);
}

SharedMemoryGroup::RankState& SharedMemoryGroup::state(int rank) const { return *state_in(base_, rank); }

uint8_t* SharedMemoryGroup::slot(int rank, uint64_t round) const {
  const size_t index = size_t(rank) * 2 + size_t(round & 1);
  return static_cast<uint8_t*>(base_) + kHeaderBytes + size_t(size_) * kRankStateBytes + index * chunk_bytes_;
}

std::unique_ptr<SharedMemoryGroup> SharedMemoryGroup::join(const SharedMemoryGroupOptions& o, std::string* why_not) {
  STRATA_CHECK(o.store != nullptr, "SharedMemoryGroup: no store given");
  STRATA_CHECK(o.size >= 1 && o.rank >= 0 && o.rank < o.size, "SharedMemoryGroup: rank ", o.rank,
               " is out of range for a group of ", o.size);
  STRATA_CHECK(o.chunk_bytes >= 8 && o.chunk_bytes % 8 == 0, "SharedMemoryGroup: chunk_bytes must be a positive "
               "multiple of 8, got ", o.chunk_bytes);
  TcpStore& store = *o.store;
  const auto key = [&](const std::string& k) { return o.prefix + "/shm/" + k; };
  const size_t bytes = segment_bytes(o.size, o.chunk_bytes);
  std::string problem;  // this rank's reason not to share, empty while all is well
  std::string name, token;
  int fd = -1;
  void* base = MAP_FAILED;

  if (o.rank == 0) {
    name = "/strata-" + random_hex(16);
    token = random_hex(16);
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      problem = errno_text(("shm_open " + name).c_str());
    } else if (::ftruncate(fd, off_t(bytes)) != 0) {
      problem = errno_text("ftruncate");
    } else if (const int e = ::posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
      // Reserved now, or a full /dev/shm (Docker's is 64 MB) would only show when a page
      // is first touched, as a SIGBUS in the middle of a collective.
      errno = e;
      problem = errno_text("posix_fallocate (is /dev/shm full?)");
    } else if ((base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
      problem = errno_text("mmap");
    } else {
      // Written before the name is published: the store orders them for the peers.
      auto* h = static_cast<Header*>(base);
      h->magic = kMagic;
      std::memcpy(h->token, token.data(), sizeof(h->token));
      h->size = uint32_t(o.size);
      h->chunk_bytes = o.chunk_bytes;
    }
    store.set(key("segment"), problem.empty() ? name + " " + token : std::string());
  } else {
    store.wait({key("segment")}, o.timeout_seconds);
    const std::string published = store.get(key("segment"), o.timeout_seconds);
    const size_t space = published.find(' ');
    if (space == std::string::npos) {
      problem = "rank 0 could not create a shared-memory segment";
    } else {
      name = published.substr(0, space);
      token = published.substr(space + 1);
      fd = ::shm_open(name.c_str(), O_RDWR, 0);
      struct stat st {};
      if (fd < 0) {
        problem = errno_text(("shm_open " + name + " (another machine or IPC namespace?)").c_str());
      } else if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes) {
        problem = "the segment " + name + " has an unexpected size";
      }
    }
  }
  if (problem.empty() && o.rank != 0) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      problem = errno_text("mmap");
    } else {
      const auto* h = static_cast<const Header*>(base);
      if (h->magic != kMagic || std::memcmp(h->token, token.data(), sizeof(h->token)) != 0 ||
          h->size != uint32_t(o.size) || h->chunk_bytes != o.chunk_bytes)
        problem = "the segment " + name + " is not this group's";
    }
  }
  if (fd >= 0) ::close(fd);
  if (problem.empty()) {
    RankState* me = state_in(base, o.rank);
    me->pid = ::getpid();
    me->start_time = process_start_time(me->pid);
    if (me->start_time == 0) problem = "cannot read /proc/self/stat";
  }
  const auto unmap = [&] {
    if (base != MAP_FAILED) ::munmap(base, bytes);
    base = MAP_FAILED;
  };
  // Agreement: every rank must have succeeded, else every rank falls back.
  const auto agree = [&](const std::string& round) {
    store.set(key(round + "/" + std::to_string(o.rank)), problem.empty() ? "ok" : problem);
    std::vector<std::string> keys;
    for (int r = 0; r < o.size; ++r) keys.push_back(key(round + "/" + std::to_string(r)));
    store.wait(keys, o.timeout_seconds);
    for (int r = 0; r < o.size; ++r) {
      const std::string v = store.get(keys[size_t(r)], o.timeout_seconds);
      if (v != "ok") return "rank " + std::to_string(r) + ": " + v;
    }
    return std::string();
  };
  std::string verdict = agree("joined");
  if (o.rank == 0 && !name.empty()) ::shm_unlink(name.c_str());  // every rank has opened it, or given up
  if (verdict.empty()) {
    // Each rank must see every peer's process (the same PID namespace), or a dead peer
    // could not be told from a live one.
    for (int r = 0; r < o.size && problem.empty(); ++r) {
      const RankState* s = state_in(base, r);
      if (process_start_time(s->pid) != s->start_time)
        problem = "cannot see rank " + std::to_string(r) + "'s process (another PID namespace?)";
    }
    verdict = agree("verified");
  }
  if (!verdict.empty()) {
    unmap();
    if (why_not) *why_not = verdict;
    return nullptr;
  }
  return std::unique_ptr<SharedMemoryGroup>(new SharedMemoryGroup(o.rank, o.size, o.chunk_bytes, base, bytes));
}

void SharedMemoryGroup::publish(uint64_t RankState::*field, uint64_t value) {
  std::atomic_ref<uint64_t>(state(rank_).*field).store(value, std::memory_order_release);
  Header& h = header();
  std::atomic_ref<uint32_t>(h.epoch).fetch_add(1, std::memory_order_seq_cst);
  if (load32(h.sleepers) != 0)
    ::syscall(SYS_futex, &h.epoch, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void SharedMemoryGroup::abort() {
  aborted_here_.store(true);
  Header& h = header();
  uint32_t healthy = 0;
  std::atomic_ref<uint32_t>(h.aborted_by).compare_exchange_strong(healthy, uint32_t(rank_) + 1);
  wake_all();
}

void SharedMemoryGroup::fail_wait(const char* what, uint64_t target, const std::string& cause) const {
  std::ostringstream os;
  os << "shared-memory " << op_ << ": rank " << rank_ << " of " << size_ << " waiting for every rank to have " << what
     << " round " << target << ": " << cause;
  throw std::runtime_error(os.str());
}

void SharedMemoryGroup::wait_for_all(uint64_t RankState::*field, uint64_t target, Clock::time_point deadline) {
  const char* what = field == &RankState::arrived ? "staged" : field == &RankState::reduced ? "reduced" : "read";
  int next = 0;  // the first rank not yet seen at `target`
  const auto ready = [&] {
    for (; next < size_; ++next)
      if (next != rank_ && load(state(next).*field) < target) return false;
    return true;
  };
  Header& h = header();
  const auto check_abort = [&] {
    if (aborted_here_.load()) fail_wait(what, target, "the group was aborted on this rank (a peer stalled)");
    if (const uint32_t by = load32(h.aborted_by); by != 0)
      fail_wait(what, target, "rank " + std::to_string(by - 1) + " aborted the group (a collective failed there)");
  };
  if (ready()) return;
  // Poll: a peer usually arrives within microseconds. Yielding lets a thread that shares
  // this core (the replica's own backward pass) run meanwhile.
  const auto poll_end = Clock::now() + kPoll;
  for (int spins = 0; Clock::now() < poll_end; ++spins) {
    for (int i = 0; i < 16; ++i) cpu_relax();
    if (ready()) return;
    if ((spins & 7) == 7) std::this_thread::yield();
  }
  // Then sleep on the futex, checking between slices what could keep the peer away.
  for (;;) {
    if (ready()) return;
    check_abort();
    const RankState& peer = state(next);
    if (load32(peer.closed) != 0)
      fail_wait(what, target, "rank " + std::to_string(next) + " closed its communicator before reaching it");
    const auto now = Clock::now();
    if (now >= deadline) fail_wait(what, target, "rank " + std::to_string(next) + " did not arrive before the timeout");
    if (process_start_time(peer.pid) != peer.start_time)
      fail_wait(what, target, "rank " + std::to_string(next) + " (pid " + std::to_string(peer.pid) + ") has exited");
    std::atomic_ref<uint32_t>(h.sleepers).fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = load32(h.epoch);
    if (!ready() && load32(h.aborted_by) == 0 && !aborted_here_.load() && load32(peer.closed) == 0) {
      const auto slice = std::min<Clock::duration>(kSleepSlice, deadline - now);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
      ::syscall(SYS_futex, &h.epoch, FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    std::atomic_ref<uint32_t>(h.sleepers).fetch_sub(1, std::memory_order_seq_cst);
  }
}

uint64_t SharedMemoryGroup::begin_round(const char* op, Clock::time_point deadline) {
  op_ = op;
  const uint64_t round = round_ + 1;
  // The slot of this parity was last read in round - 2.
  if (round > 2) wait_for_all(&RankState::done, round - 2, deadline);
  return round;
}

void SharedMemoryGroup::arrive(uint64_t round, Clock::time_point deadline) {
  publish(&RankState::arrived, round);
  wait_for_all(&RankState::arrived, round, deadline);
}

void SharedMemoryGroup::finish(uint64_t round) {
  publish(&RankState::done, round);
  round_ = round;
}

void SharedMemoryGroup::all_reduce(void* data, size_t bytes, size_t element_size, Combine combine,
                                   Clock::time_point deadline) {
  STRATA_CHECK(element_size > 0 && chunk_bytes_ % element_size == 0 && bytes % element_size == 0,
               "SharedMemoryGroup::all_reduce: ", bytes, " bytes are not whole elements of ", element_size,
               " bytes fitting chunks of ", chunk_bytes_);
  auto* out = static_cast<uint8_t*>(data);
  for (size_t offset = 0; offset < bytes; offset += chunk_bytes_) {
    const size_t length = std::min(chunk_bytes_, bytes - offset);
    const uint64_t round = begin_round("all_reduce", deadline);
    std::memcpy(slot(rank_, round), out + offset, length);
    arrive(round, deadline);
    const size_t n = length / element_size;
    uint8_t* o = out + offset;
    if (size_ >= kPieceFoldMinRanks && length >= kPieceFoldMinBytes) {
      // Each rank folds its piece of the round (whole elements; the last rank's may be
      // short or empty) from every slot, in rank order, into its output, and publishes it
      // in the same piece of its own slot (which no peer reads before `reduced`: each
      // folds its own piece); then it copies the peers' folded pieces out. The same
      // combines in the same order as below: the same bits.
      const size_t per = (n + size_t(size_) - 1) / size_t(size_);
      const auto piece = [&](int q) {  // {byte offset, elements}
        const size_t begin = std::min(n, per * size_t(q)), end = std::min(n, per * size_t(q + 1));
        return std::pair<size_t, size_t>{begin * element_size, end - begin};
      };
      const auto [mine, count] = piece(rank_);
      if (count > 0) {
        uint8_t* folded = o + mine;
        fold_in_rank_order(combine, folded, size_, [&](int q) { return slot(q, round) + mine; }, count);
        std::memcpy(slot(rank_, round) + mine, folded, count * element_size);
      }
      publish(&RankState::reduced, round);
      wait_for_all(&RankState::reduced, round, deadline);
      for (int q = 0; q < size_; ++q) {
        const auto [begin, elements] = piece(q);
        if (q != rank_ && elements > 0) std::memcpy(o + begin, slot(q, round) + begin, elements * element_size);
      }
    } else {
      fold_in_rank_order(combine, o, size_, [&](int q) { return slot(q, round); }, n);
    }
    finish(round);
  }
}

void SharedMemoryGroup::reduce_scatter(const void* input, void* output, size_t part_bytes, size_t element_size,
                                       Combine combine, Clock::time_point deadline) {
  // A piece of every rank's part fits one slot: size() pieces of whole elements.
  const size_t piece = element_size == 0 ? 0 : chunk_bytes_ / size_t(size_) / element_size * element_size;
  STRATA_CHECK(piece > 0 && part_bytes % element_size == 0, "SharedMemoryGroup::reduce_scatter: parts of ",
               part_bytes, " bytes are not whole elements of ", element_size, " bytes, or ", size_,
               " pieces do not fit chunks of ", chunk_bytes_);
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  for (size_t offset = 0; offset < part_bytes; offset += piece) {
    const size_t length = std::min(piece, part_bytes - offset);
    const uint64_t round = begin_round("reduce_scatter", deadline);
    uint8_t* staged = slot(rank_, round);
    for (int p = 0; p < size_; ++p) std::memcpy(staged + size_t(p) * length, in + size_t(p) * part_bytes + offset, length);
    arrive(round, deadline);
    // Every rank's piece of this rank's part.
    const auto piece_of = [&](int q) { return slot(q, round) + size_t(rank_) * length; };
    fold_in_rank_order(combine, out + offset, size_, piece_of, length / element_size);
    finish(round);
  }
}

void SharedMemoryGroup::all_gather(void* output, size_t part_bytes, Clock::time_point deadline) {
  auto* out = static_cast<uint8_t*>(output);
  const uint8_t* own = out + size_t(rank_) * part_bytes;
  for (size_t offset = 0; offset < part_bytes; offset += chunk_bytes_) {
    const size_t length = std::min(chunk_bytes_, part_bytes - offset);
    const uint64_t round = begin_round("all_gather", deadline);
    std::memcpy(slot(rank_, round), own + offset, length);
    arrive(round, deadline);
    for (int q = 0; q < size_; ++q)
      if (q != rank_) std::memcpy(out + size_t(q) * part_bytes + offset, slot(q, round), length);
    finish(round);
  }
}

}  // namespace strata::distribute
