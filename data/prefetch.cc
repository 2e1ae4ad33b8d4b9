// prefetch: runs the input on a background thread, up to buffer_size elements ahead.
//
// Note [prefetch hand-off]: waking a sleeping thread costs the waker 10-20 us here (the
// futex wake and its inter-processor interrupt, PLATFORM.md), as much as a fifth of
// producing an MNIST batch, and the profile of shuffle -> batch -> prefetch showed the
// producer spending as long in pthread_cond_signal as in copying rows. So each side
// signals only when the other is actually asleep (a flag set under the mutex before it
// waits, so no wake-up is lost), and the consumer, whose next batch is normally being
// produced right now, polls for it a bounded while (kConsumerPoll, yielding the core on
// every turn, as the thread pool's caller does) before it sleeps. The producer never
// polls: when the queue is full it waits for a consumer that may be busy for
// milliseconds (a training step), and polling would only take a core from it. (Polling
// with sched_yield measured better here than spinning on PAUSE or sleeping 10 us per
// turn: paired ratios against the plain copy of about 0.97, 0.89 and 0.88 in six
// alternating rounds.)
//
// The producer runs as a task on a parked thread (data/parked_threads.h), which survives
// the iterator: an epoch's iterator starts without creating a thread, and its destructor
// waits for the task's `done` flag instead of joining one.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <strata/core/error.h>
#include <strata/core/thread_pool.h>
#include <strata/data/copy_sharing.h>
#include <strata/data/dataset_node.h>
#include <strata/data/parked_threads.h>

namespace strata::data {

using detail::ConsumerPosition;
using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;
using detail::str_of;
using detail::UnaryNode;

namespace {

// How long the consumer polls for the next element before sleeping (Note [prefetch
// hand-off]): longer than producing a typical batch, short enough not to matter when the
// producer is far behind.
constexpr auto kConsumerPoll = std::chrono::microseconds(100);

class PrefetchNode final : public UnaryNode {
 public:
  PrefetchNode(NodePtr input, int64_t depth) : UnaryNode(std::move(input)), depth_(depth) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override { return str_of("prefetch(", depth_, ")"); }
  std::string signature() const override { return "prefetch"; }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<PrefetchNode>(std::move(input), depth_);
  }
  bool is_prefetch() const override { return true; }

  int64_t depth_;
};

// One produced element on its way to the consumer.
struct Item {
  std::optional<Element> element;  // nullopt with no error: the end
  std::exception_ptr error;
  std::optional<std::vector<int64_t>> anchor;  // input state after this element
};

// What the consumer and the producer task share. The task holds it until it returns, so
// the iterator may be destroyed as soon as `done` is set.
struct Channel {
  std::mutex mu;
  std::condition_variable not_empty;
  std::condition_variable not_full;
  std::condition_variable finished;  // signals `done`
  std::deque<Item> queue;
  std::atomic<size_t> queued{0};  // queue.size(), written under mu, polled without it
  bool consumer_asleep = false;   // waiting on not_empty
  bool producer_asleep = false;   // waiting on not_full
  bool stop = false;              // the consumer is going away
  bool done = false;              // the task no longer touches the input
  detail::CopySharing sharing;    // the producer's copies, for the waiting consumer
};

// The producer task: runs `input` into the channel, at most `depth` elements ahead, until
// it ends, fails or the consumer stops it.
void produce(const std::shared_ptr<Channel>& ch, IteratorBase& input, size_t depth) {
  set_thread_parallelism_limit(1);
  const detail::ScopedCopySharing share_copies(&ch->sharing);  // Note [copy sharing]
  detail::AnchorClock clock;
  size_t anchor_words = 0;  // the last anchor's size, to reserve the next one's
  for (;;) {
    {
      std::unique_lock lk(ch->mu);
      if (!ch->stop && ch->queue.size() >= depth) {
        ch->producer_asleep = true;
        ch->not_full.wait(lk, [&] { return ch->stop || ch->queue.size() < depth; });
        ch->producer_asleep = false;
      }
      if (ch->stop) {
        ch->done = true;
        ch->finished.notify_all();
        return;
      }
    }
    Item item;
    try {
      const auto t0 = detail::AnchorClock::Clock::now();
      item.element = input.next();
      if (item.element && clock.produced(detail::elapsed_ns(t0))) {
        const auto t1 = detail::AnchorClock::Clock::now();
        item.anchor = detail::save_words(input, anchor_words);
        anchor_words = item.anchor->size();
        clock.captured(detail::elapsed_ns(t1));
      }
    } catch (...) {
      item.element.reset();
      item.error = std::current_exception();
    }
    const bool last = !item.element;
    bool wake_consumer = false;
    {
      std::lock_guard lk(ch->mu);
      ch->queue.push_back(std::move(item));
      ch->queued.store(ch->queue.size(), std::memory_order_release);
      wake_consumer = ch->consumer_asleep;
      if (last) {
        ch->done = true;  // in the same critical section: the consumer may go right away
        ch->finished.notify_all();
      }
    }
    if (wake_consumer) ch->not_empty.notify_one();
    if (last) return;
  }
}

class PrefetchIterator final : public IteratorBase {
 public:
  PrefetchIterator(const PrefetchNode& node, uint64_t key)
      : depth_(size_t(node.depth_)), input_(node.input()->make_iterator(key)) {}
  ~PrefetchIterator() override { stop(); }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    if (!ch_) start();
    Item item = take();
    if (item.error) {
      finished_ = true;
      std::rethrow_exception(item.error);
    }
    if (!item.element) {
      finished_ = true;
      return std::nullopt;
    }
    position_.took(item.anchor);
    return std::move(item.element);
  }

  // Elements still in the queue were produced but not consumed: the state points at the
  // last anchor at or before the consumer's position, plus the elements delivered since.
  void save(StateWriter& w) const override {
    w.stage(StageTag::Prefetch);
    if (!ch_) {
      ConsumerPosition::save_unread(w, *input_);  // the producer has not started: the input is ours to read
    } else {
      position_.save(w);
    }
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Prefetch);
    ConsumerPosition::restore(r, *input_, "prefetch");
  }

 private:
  // The oldest queued item, waiting for one (Note [prefetch hand-off]). While it polls,
  // the consumer copies rows of the element being produced when the producer offers them
  // (Note [copy sharing]); a poll that helped starts over, since the producer is then
  // about to finish the element.
  Item take() {
    Channel& ch = *ch_;
    if (ch.queued.load(std::memory_order_acquire) == 0) {
      auto until = std::chrono::steady_clock::now() + kConsumerPoll;
      while (ch.queued.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
        if (ch.sharing.help()) {
          until = std::chrono::steady_clock::now() + kConsumerPoll;
        } else {
          std::this_thread::yield();
        }
      }
    }
    Item item;
    bool wake_producer = false;
    {
      std::unique_lock lk(ch.mu);
      if (ch.queue.empty()) {
        ch.consumer_asleep = true;
        ch.not_empty.wait(lk, [&] { return !ch.queue.empty(); });
        ch.consumer_asleep = false;
      }
      item = std::move(ch.queue.front());
      ch.queue.pop_front();
      ch.queued.store(ch.queue.size(), std::memory_order_release);
      wake_producer = ch.producer_asleep;
    }
    if (wake_producer) ch.not_full.notify_one();
    return item;
  }

  // Hands the input to a producer task on a parked thread (data/parked_threads.h).
  void start() {
    position_.start(*input_);
    auto ch = std::make_shared<Channel>();
    detail::run_on_parked_thread([ch, input = input_.get(), depth = depth_] { produce(ch, *input, depth); });
    ch_ = std::move(ch);  // only once a task will fill the queue
  }

  // Stops the producer and waits until it no longer touches the input (after the element
  // it is working on, if any).
  void stop() {
    if (!ch_) return;
    std::unique_lock lk(ch_->mu);
    ch_->stop = true;
    ch_->not_full.notify_all();
    ch_->finished.wait(lk, [&] { return ch_->done; });
  }

  const size_t depth_;
  std::unique_ptr<IteratorBase> input_;  // the producer's while ch_ is set and not done
  std::shared_ptr<Channel> ch_;          // set once the producer task started

  // Consumer side.
  bool finished_ = false;
  ConsumerPosition position_;
};

std::unique_ptr<IteratorBase> PrefetchNode::make_iterator(uint64_t key) const {
  return std::make_unique<PrefetchIterator>(*this, key);
}

}  // namespace

Dataset Dataset::prefetch(int64_t buffer_size) const {
  STRATA_CHECK(buffer_size >= 0 || buffer_size == kAutotune, "Dataset::prefetch: buffer_size ",
               "must be >= 0 or kAutotune, got ", buffer_size);
  if (buffer_size == 0) return *this;
  if (buffer_size == kAutotune) buffer_size = 2;
  return Dataset(std::make_shared<PrefetchNode>(node_, buffer_size));
}

}  // namespace strata::data
