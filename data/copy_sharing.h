// Copy sharing: a prefetch producer's bulk copies (a batch's rows), cut into chunks that
// its consumer, waiting in next() for the very element they build, runs instead of idling.
//
// Note [copy sharing]: shuffle -> batch -> prefetch over MNIST is bound by its producer
// (bench/README.md, "Data pipeline"): the consumer spends most of an epoch polling for
// the next batch while the producer copies that batch's 128 rows. Both sides are the same
// pipeline's threads, so the consumer may copy some of those rows: the producer offers the
// copy of a batch as chunks of rows (CopySharing::run), takes chunks itself, and the
// consumer, while its queue is empty, takes the rest (CopySharing::help). The rows each
// chunk copies and the bytes they land in are fixed before any chunk runs, so the element
// is the same whoever copies which chunk; the iterator's position and saved state are the
// producer's alone (the consumer never calls into the input). Chunks only copy memory and
// cannot fail, so errors still come from the input on the producer thread.
//
// The consumer never holds the producer up for longer than the chunk it is copying (longer
// only when it is preempted mid-chunk): run() returns once every chunk ran and no helper
// holds the job, and a helper claims one chunk at a time. A consumer that went away (or never waits) just leaves all chunks to the
// producer.
#pragma once

#include <atomic>
#include <cstddef>
#include <type_traits>

namespace strata::data::detail {

class CopySharing {
 public:
  // Runs chunk(i) for every i in [0, chunks), on this thread and on any thread in help(),
  // each exactly once, and returns when all have run and no helper touches the job any
  // more. `chunk` must not throw. Called by one thread at a time.
  template <class F>
  void run(size_t chunks, F&& chunk) {
    using Fn = std::remove_reference_t<F>;
    void* ctx = const_cast<void*>(static_cast<const void*>(&chunk));
    run_erased(chunks, [](void* f, size_t i) { (*static_cast<Fn*>(f))(i); }, ctx);
  }

  // Runs chunks of the job on offer, if any, until none is left unclaimed; returns whether
  // it ran at least one.
  bool help();

 private:
  struct Job {
    void (*fn)(void*, size_t);
    void* ctx;
    size_t chunks;
    std::atomic<size_t> next{0};  // the next unclaimed chunk
  };
  void run_erased(size_t chunks, void (*fn)(void*, size_t), void* ctx);
  static bool run_chunks(Job& job);  // whether it ran any

  std::atomic<Job*> job_{nullptr};  // the job on offer (on run()'s stack), or null
  std::atomic<int> helpers_{0};     // threads inside help() that may hold job_
};

// The CopySharing of the prefetch producer running on this thread, or null: copies of
// other threads are not shared.
CopySharing* current_copy_sharing();

// Makes `sharing` this thread's current_copy_sharing() for the scope's lifetime.
class ScopedCopySharing {
 public:
  explicit ScopedCopySharing(CopySharing* sharing);
  ~ScopedCopySharing();
  ScopedCopySharing(const ScopedCopySharing&) = delete;
  ScopedCopySharing& operator=(const ScopedCopySharing&) = delete;

 private:
  CopySharing* previous_;
};

}  // namespace strata::data::detail
