// Copy sharing between a prefetch producer and its waiting consumer (Note [copy sharing]
// in data/copy_sharing.h).
#include <thread>

#include <strata/data/copy_sharing.h>

namespace strata::data::detail {

namespace {
thread_local CopySharing* t_current = nullptr;
}  // namespace

bool CopySharing::run_chunks(Job& job) {
  bool ran = false;
  for (;;) {
    const size_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.chunks) return ran;
    job.fn(job.ctx, i);
    ran = true;
  }
}

// The hand-over of `job` is a store-then-load on each side (the producer withdraws the job
// and then looks for helpers; a helper registers and then looks for the job), so both use
// sequentially consistent operations: either the producer sees the helper and waits for
// it, or the helper sees no job (or a later one). The chunks' writes reach the producer
// through the helper's release decrement of helpers_ and the producer's acquire load.
void CopySharing::run_erased(size_t chunks, void (*fn)(void*, size_t), void* ctx) {
  Job job{fn, ctx, chunks};
  if (chunks > 1) job_.store(&job, std::memory_order_seq_cst);
  run_chunks(job);
  if (chunks <= 1) return;
  job_.store(nullptr, std::memory_order_seq_cst);
  // A helper holds at most one chunk (a few microseconds of copying) once every chunk is
  // claimed; yielding keeps a preempted helper from being starved by this wait.
  while (helpers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

bool CopySharing::help() {
  if (job_.load(std::memory_order_relaxed) == nullptr) return false;  // cheap early out
  helpers_.fetch_add(1, std::memory_order_seq_cst);
  Job* job = job_.load(std::memory_order_seq_cst);
  const bool ran = job != nullptr && run_chunks(*job);
  helpers_.fetch_sub(1, std::memory_order_release);
  return ran;
}

CopySharing* current_copy_sharing() { return t_current; }

ScopedCopySharing::ScopedCopySharing(CopySharing* sharing) : previous_(t_current) { t_current = sharing; }
ScopedCopySharing::~ScopedCopySharing() { t_current = previous_; }

}  // namespace strata::data::detail
