// prefetch: runs the input on a background thread, up to buffer_size elements ahead.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <strata/core/error.h>
#include <strata/core/thread_pool.h>
#include <strata/data/dataset_node.h>

namespace strata::data {

using detail::IteratorBase;
using detail::NodePtr;
using detail::StageTag;
using detail::StateReader;
using detail::StateWriter;
using detail::str_of;
using detail::UnaryNode;

namespace {

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

class PrefetchIterator final : public IteratorBase {
 public:
  PrefetchIterator(const PrefetchNode& node, uint64_t key)
      : depth_(size_t(node.depth_)), input_(node.input()->make_iterator(key)) {}
  ~PrefetchIterator() override { stop(); }

  std::optional<Element> next() override {
    if (finished_) return std::nullopt;
    if (!started_) start();
    Item item;
    {
      std::unique_lock lk(mu_);
      not_empty_.wait(lk, [&] { return !queue_.empty(); });
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    not_full_.notify_one();
    if (item.error) {
      finished_ = true;
      std::rethrow_exception(item.error);
    }
    if (!item.element) {
      finished_ = true;
      return std::nullopt;
    }
    if (item.anchor) {
      anchor_ = std::move(*item.anchor);
      since_anchor_ = 0;
    } else {
      ++since_anchor_;
    }
    return std::move(item.element);
  }

  // Elements still in the queue were produced but not consumed: the state points at the
  // last anchor at or before the consumer's position, plus the elements delivered since.
  void save(StateWriter& w) const override {
    w.stage(StageTag::Prefetch);
    if (!started_) {
      w.put(0);
      input_->save(w);  // the thread has not started: the input is ours to read
    } else {
      w.put(since_anchor_);
      w.append(anchor_);
    }
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Prefetch);
    const int64_t since = r.get_in("prefetch elements since anchor", 0, INT64_MAX);
    input_->restore(r);
    detail::skip_elements(*input_, since, "prefetch");
  }

 private:
  struct Item {
    std::optional<Element> element;  // nullopt with no error: the end
    std::exception_ptr error;
    std::optional<std::vector<int64_t>> anchor;  // input state after this element
  };

  void start() {
    anchor_ = detail::save_words(*input_);
    since_anchor_ = 0;
    thread_ = std::thread([this] { produce(); });
    started_ = true;  // only once a thread will fill the queue
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void produce() {
    set_thread_parallelism_limit(1);
    for (;;) {
      {
        std::unique_lock lk(mu_);
        not_full_.wait(lk, [&] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      Item item;
      try {
        const auto t0 = detail::AnchorClock::Clock::now();
        item.element = input_->next();
        if (item.element && clock_.produced(detail::elapsed_ns(t0))) {
          const auto t1 = detail::AnchorClock::Clock::now();
          item.anchor = detail::save_words(*input_);
          clock_.captured(detail::elapsed_ns(t1));
        }
      } catch (...) {
        item.element.reset();
        item.error = std::current_exception();
      }
      const bool last = !item.element;
      {
        std::lock_guard lk(mu_);
        queue_.push_back(std::move(item));
      }
      not_empty_.notify_one();
      if (last) return;
    }
  }

  const size_t depth_;
  std::unique_ptr<IteratorBase> input_;  // read by the thread once started
  detail::AnchorClock clock_;            // thread only

  std::mutex mu_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread thread_;

  // Consumer side.
  bool started_ = false;
  bool finished_ = false;
  std::vector<int64_t> anchor_;
  int64_t since_anchor_ = 0;
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
