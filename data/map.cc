// map: sequential, or on worker threads with results delivered in input order.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <strata/core/error.h>
#include <strata/core/thread_pool.h>
#include <strata/data/dataset_node.h>

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

class MapNode final : public UnaryNode {
 public:
  MapNode(NodePtr input, MapFn fn, int64_t threads)
      : UnaryNode(std::move(input)), fn_(std::move(fn)), threads_(threads) {}
  std::unique_ptr<IteratorBase> make_iterator(uint64_t key) const override;
  int64_t cardinality() const override { return input_->cardinality(); }
  std::string name() const override {
    return threads_ > 1 ? str_of("map(num_parallel_calls=", threads_, ")") : std::string("map");
  }
  // Parallelism does not change the elements: states move freely between the two forms.
  std::string signature() const override { return "map"; }
  NodePtr clone_with(NodePtr input) const override {
    return std::make_shared<MapNode>(std::move(input), fn_, threads_);
  }

  MapFn fn_;
  int64_t threads_;
};

// Both forms save the same record: (elements delivered since the anchor, the input's state
// at the anchor). The sequential form's anchor is always "now".
class SequentialMapIterator final : public IteratorBase {
 public:
  SequentialMapIterator(const MapNode& node, uint64_t key)
      : node_(node), input_(node.input()->make_iterator(key)) {}
  std::optional<Element> next() override {
    auto e = input_->next();
    if (!e) return std::nullopt;
    return node_.fn_(*e);
  }
  void save(StateWriter& w) const override {
    w.stage(StageTag::Map);
    ConsumerPosition::save_unread(w, *input_);
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Map);
    ConsumerPosition::restore(r, *input_, "map");
  }

 private:
  const MapNode& node_;
  std::unique_ptr<IteratorBase> input_;
};

class ParallelMapIterator final : public IteratorBase {
 public:
  ParallelMapIterator(const MapNode& node, uint64_t key)
      : node_(node),
        input_(node.input()->make_iterator(key)),
        capacity_(2 * node.threads_) {}
  ~ParallelMapIterator() override { stop(); }

  std::optional<Element> next() override {
    if (broken_) std::rethrow_exception(broken_);
    if (finished_) return std::nullopt;
    if (!started_) start();
    Result res;
    {
      std::unique_lock lk(mu_);
      result_ready_.wait(lk, [&] {
        return results_.count(out_seq_) > 0 || (input_ended_ && out_seq_ >= end_seq_);
      });
      auto it = results_.find(out_seq_);
      if (it == results_.end()) {
        finished_ = true;
        return std::nullopt;
      }
      res = std::move(it->second);
      results_.erase(it);
      ++out_seq_;
      --reserved_;
    }
    slot_free_.notify_one();
    if (res.error) {
      finished_ = true;
      std::rethrow_exception(res.error);
    }
    position_.took(res.anchor);
    return std::move(res.element);
  }

  void save(StateWriter& w) const override {
    w.stage(StageTag::Map);
    if (!started_) {
      ConsumerPosition::save_unread(w, *input_);  // no worker runs yet: the input is ours to read
    } else {
      position_.save(w);
    }
  }
  void restore(StateReader& r) override {
    r.stage(StageTag::Map);
    ConsumerPosition::restore(r, *input_, "map");
  }

 private:
  struct Result {
    std::optional<Element> element;
    std::exception_ptr error;
    std::optional<std::vector<int64_t>> anchor;  // input state after this element
  };

  void start() {
    position_.start(*input_);
    started_ = true;
    try {
      for (int64_t i = 0; i < node_.threads_; ++i) threads_.emplace_back([this] { work(); });
    } catch (...) {
      // Workers that did start may have read input: this iterator cannot go on.
      stop();
      broken_ = std::current_exception();
      throw;
    }
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    slot_free_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  void work() {
    // The training threads own the intra-op pool; pipeline threads run ops inline.
    set_thread_parallelism_limit(1);
    for (;;) {
      {
        std::unique_lock lk(mu_);
        slot_free_.wait(lk, [&] { return stop_ || input_ended_ || reserved_ < capacity_; });
        if (stop_ || input_ended_) return;
        ++reserved_;
      }
      int64_t seq = 0;
      std::optional<Element> in;
      Result res;
      bool exhausted = false;
      {
        std::lock_guard in_lk(in_mu_);
        exhausted = input_exhausted_;
        if (!exhausted) {
          seq = next_seq_++;
          try {
            const auto t0 = detail::AnchorClock::Clock::now();
            in = input_->next();
            if (in && clock_.produced(detail::elapsed_ns(t0))) {
              const auto t1 = detail::AnchorClock::Clock::now();
              res.anchor = detail::save_words(*input_);
              clock_.captured(detail::elapsed_ns(t1));
            }
          } catch (...) {
            res.error = std::current_exception();
          }
          if (!in) input_exhausted_ = true;  // the end, or an input error
        }
      }
      if (exhausted || (!in && !res.error)) {
        std::lock_guard lk(mu_);
        if (!exhausted) {
          input_ended_ = true;
          end_seq_ = seq;
        }
        --reserved_;
        slot_free_.notify_all();
        result_ready_.notify_all();
        return;
      }
      if (in) {
        try {
          res.element = node_.fn_(*in);
        } catch (...) {
          res.error = std::current_exception();
        }
      }
      const bool input_failed = !in;
      {
        std::lock_guard lk(mu_);
        results_.emplace(seq, std::move(res));
        if (input_failed) {
          input_ended_ = true;
          end_seq_ = seq + 1;
        }
      }
      result_ready_.notify_all();
      if (input_failed) {
        slot_free_.notify_all();
        return;
      }
    }
  }

  const MapNode& node_;
  std::unique_ptr<IteratorBase> input_;
  const int64_t capacity_;  // elements being mapped or waiting to be consumed

  // Input side, guarded by in_mu_: one worker reads the input at a time.
  std::mutex in_mu_;
  int64_t next_seq_ = 0;
  bool input_exhausted_ = false;
  detail::AnchorClock clock_;

  // Shared, guarded by mu_.
  std::mutex mu_;
  std::condition_variable slot_free_;
  std::condition_variable result_ready_;
  std::map<int64_t, Result> results_;
  int64_t reserved_ = 0;
  bool input_ended_ = false;
  int64_t end_seq_ = INT64_MAX;
  bool stop_ = false;
  std::vector<std::thread> threads_;

  // Consumer side.
  bool started_ = false;
  bool finished_ = false;
  std::exception_ptr broken_;  // failed to start its threads
  int64_t out_seq_ = 0;
  ConsumerPosition position_;
};

std::unique_ptr<IteratorBase> MapNode::make_iterator(uint64_t key) const {
  if (threads_ > 1) return std::make_unique<ParallelMapIterator>(*this, key);
  return std::make_unique<SequentialMapIterator>(*this, key);
}

}  // namespace

Dataset Dataset::map(MapFn fn, int64_t num_parallel_calls) const {
  STRATA_CHECK(static_cast<bool>(fn), "Dataset::map: empty function");
  // Each call is a thread of the iterator's own: a bound keeps a typo from asking for
  // millions of them.
  constexpr int64_t kMaxParallelCalls = 1024;
  STRATA_CHECK((num_parallel_calls >= 1 && num_parallel_calls <= kMaxParallelCalls) || num_parallel_calls == kAutotune,
               "Dataset::map: num_parallel_calls must be in [1, ", kMaxParallelCalls, "] or kAutotune, got ",
               num_parallel_calls);
  if (num_parallel_calls == kAutotune) {
    num_parallel_calls = std::max<int64_t>(1, std::thread::hardware_concurrency());
  }
  return Dataset(std::make_shared<MapNode>(node_, std::move(fn), num_parallel_calls));
}

}  // namespace strata::data
