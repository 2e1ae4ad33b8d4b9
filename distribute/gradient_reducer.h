// GradientReducer: the one owner of bucketing and cross-replica summation of gradients
// (PyTorch DDP's Reducer, in TensorFlow's distribution-strategy shape).
//
// Installed on a replica thread as the tape's GradientReadyHook, it receives each
// variable's gradient the moment backward has finished it, appends it to the open bucket
// of its dtype and, once the bucket is full, launches the all-reduce of the bucket's
// gradients into one flat buffer — on a communication thread, so that the reduction of the last layers
// runs while backward still computes the first ones. When backward ends, the partly
// filled buckets are launched too. Optimizer::apply_gradients then asks for the summed
// gradients (sum_gradients below): those the reducer holds come from their buckets once
// their collectives complete; any other gradient (one transformed after backward, or
// computed without the hook) is packed and reduced then, synchronously, as before.
//
// Bucket sizes: CommunicationOptions::bytes_per_pack; 0 (the default) means DDP's: a
// first bucket of 256 KiB, so that communication starts early, then 25 MiB.
//
// Every replica must produce the same gradients in the same order (they run the same
// program), as DDP requires: a gradient taken on some replicas only (say, for logging)
// puts their buckets out of step with the others' and the step fails naming both
// buckets. Turn CommunicationOptions::overlap_gradient_reduction off for such programs. A bucket is named by its dtype, size and variables, and the in-process
// transport compares the names across replicas: replicas disagreeing about which
// variables got gradients fail with an error naming both buckets. Variables without a
// gradient on every replica are simply left out (DDP's find_unused_parameters).
//
// GPU buckets over NCCL (a StreamTransport) take no communication thread: each bucket's
// all-reduce is launched from the replica thread onto the GPU's communication stream,
// ordered after the compute stream that produced it (Communicator::all_reduce_async), and
// backward goes on enqueueing on the compute stream meanwhile. take() and wait_all() then
// make the replica's current stream wait for the buckets' events instead of blocking the
// host (CommWork::order_consumer), so the optimizer's kernels run after the sums;
// end_step() blocks, bounded by the communicator's watchdog, until the step's buckets
// finished on the GPU (CommWork::synchronize), so that a dead peer fails the step naming
// it and nothing of a step is left running into the next.
//
// Aggregating in backward (Options::aggregate, CommunicationOptions::
// aggregate_gradients_in_backward): GradientTape::gradient itself returns the replicas'
// sums, as PyTorch DDP leaves the reduced gradients in param.grad after backward — it
// waits for the buckets at the end of backward (final_gradient), and apply_gradients
// takes whatever gradients it is given as summed already. Per-replica gradients are then
// never needed, so with a ProductTransport the reducer takes product gradients from the
// tape (autograd/gradient_hook.h): a matmul's weight gradient arrives as its factors, and
// the transport computes the replicas' sum of the products in one pass
// (InProcessCommunicator::sum_products_shared) instead of each replica's product and a
// fold of them.
//
// Summation is elementwise over replicas in rank order whatever the bucket layout (see
// fold_reduce), so results are bitwise equal to the unbucketed reduction in-process; a
// ring across workers sums bitwise equal for two workers.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <strata/autograd/gradient_hook.h>
#include <strata/core/tensor.h>
#include <strata/distribute/collective/comm_thread.h>

namespace strata::distribute {

class GradientReducer final : public autograd::GradientReadyHook {
 public:
  // Leaves in `bucket` (flat, contiguous, of the gradients' dtype and total size; its
  // contents on entry are undefined) the sum over every replica (of every worker) of the
  // concatenation of this replica's flattened `gradients`. A transport that reduces a
  // buffer in place packs first (pack_into); the in-process one folds straight from the
  // gradients (InProcessCommunicator::all_reduce_parts). A transport may instead point
  // `bucket` at a tensor holding the sums that other replicas share (replicas of one
  // process on logical CPU devices: all_reduce_parts_shared); take() then hands out
  // views of it, which nobody writes. `what` names the bucket:
  // "gradient bucket 0 (float32[1024]: dense/kernel, dense/bias)".
  using Transport = std::function<void(const std::vector<Tensor>& gradients, Tensor& bucket, const std::string& what)>;

  // Starts summing `bucket` (this replica's gradients, packed by the reducer on the
  // calling thread's current stream) in place over every replica and returns its work at
  // once, without a communication thread: NCCL's all_reduce_async on the GPU's
  // communication stream. Called on the replica thread, in launch order (the same on
  // every replica).
  struct StreamTransport {
    std::function<std::shared_ptr<CommWork>(const Tensor& bucket, const std::string& what)> launch;
  };

  // Leaves in `sums` (flat, m n elements, of a's dtype; contents on entry undefined) the sum
  // over every replica of transpose(a) @ b (a [k, m], b [k, n]: a variable's weight
  // gradient as factors). Like Transport, it may point `sums` at a tensor replicas share.
  using ProductTransport = std::function<void(const Tensor& a, const Tensor& b, Tensor& sums, const std::string& what)>;

  struct Options {
    int64_t bytes_per_pack = 0;  // 0: 256 KiB for the first bucket of a step, then 25 MiB
    // GradientTape::gradient returns the sums (see above); apply_gradients takes them as
    // they are.
    bool aggregate = false;
    // Launch on a communication thread (false: inline, at launch). Not used with a
    // StreamTransport, whose collectives are asynchronous by themselves.
    bool asynchronous = true;
    double wait_timeout_seconds = 300.0;  // bound of each wait for one bucket
  };

  static constexpr int64_t kFirstBucketBytes = int64_t(256) << 10;
  static constexpr int64_t kBucketBytes = int64_t(25) << 20;

  GradientReducer(Transport transport, Options options);
  GradientReducer(StreamTransport transport, Options options);
  ~GradientReducer() override;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void gradient_ready(const autograd::Variable& variable, const Tensor& gradient) override;
  void backward_done() override;
  // With Options::aggregate, a communication thread and a product transport: float32 and
  // float64 products on the CPU (what the transport's kernels sum).
  bool accepts_product(DType dtype, const Device& device) const override;
  Tensor product_ready(const autograd::Variable& variable, const Tensor& a, const Tensor& b) override;
  // With Options::aggregate: the sums of a gradient this replica reported (views of its
  // bucket's sums); otherwise `reported` itself.
  Tensor final_gradient(const Tensor& reported) override;
  // Products go through `transport` (only used with Options::aggregate).
  void set_product_transport(ProductTransport transport) { product_transport_ = std::move(transport); }
  bool aggregates() const { return options_.aggregate; }

  // For each gradient the reducer holds (the very tensor backward reported), its sum over
  // the replicas, after waiting for its bucket; undefined for the others. With a
  // StreamTransport the sums are views whose values exist for work on the calling
  // thread's current stream (ordered after the buckets), as every GPU result does.
  std::vector<Tensor> take(const std::vector<Tensor>& gradients);
  // Waits for every launched bucket (before the replica issues any other collective, so
  // that its collectives stay in the same order on every replica) and orders the calling
  // thread's current stream of each bucket's device after it; with a StreamTransport
  // that is all (the host does not wait). Rethrows a failure.
  void wait_all();
  // End of a step: waits for what is in flight (with a StreamTransport, until the GPU
  // finished it) and forgets everything. Rethrows the
  // failure of a bucket whose sums take() handed out; a bucket never taken changed
  // nothing, so its failure is dropped. With `failed` (the step threw; the strategy has aborted the transport) every error
  // is dropped.
  void end_step(bool failed);
  // Buckets launched this step, and those of them summed from factors (for tests).
  size_t buckets_launched() const { return launched_.size(); }
  size_t product_buckets_launched() const {
    size_t n = 0;
    for (const Bucket& b : launched_) n += b.product ? 1 : 0;
    return n;
  }

  // Copies `gradients`, flattened and in order, into the flat buffer `bucket`.
  static void pack_into(const std::vector<Tensor>& gradients, const Tensor& bucket);

  // The synchronous packing every replica-context all_reduce uses: defined tensors of one
  // dtype are packed, in order, into flat buckets of at most bytes_per_pack (0: one
  // bucket per dtype; a larger tensor alone), each reduced in place by `reduce`, and
  // unpacked. Undefined tensors stay undefined.
  static std::vector<Tensor> reduce_packed(const std::vector<Tensor>& values, int64_t bytes_per_pack,
                                           const std::function<void(const Tensor& buffer)>& reduce);

 private:
  struct Bucket {
    DType dtype = kFloat32;
    std::vector<Tensor> gradients;
    std::vector<std::string> names;
    int64_t bytes = 0;
    Tensor buffer;  // this replica's flat buffer for the sums
    // Where the transport left the sums: `buffer`, or a tensor replicas share. Written by
    // the communication thread before the work completes.
    std::shared_ptr<Tensor> sums;
    std::shared_ptr<CommWork> work;
    bool taken = false;  // take() or final_gradient() handed out some of its sums
    bool product = false;  // one variable's gradient, summed from factors (product_ready)
  };
  int64_t capacity() const;
  void launch(DType dtype);
  void wait(Bucket& bucket);

  // Queues the bucket's collective (run by `run` on the communication thread, or inline)
  // and appends it to launched_.
  void submit(Bucket bucket, const std::string& what, std::function<void()> run);

  Transport transport_;
  ProductTransport product_transport_;
  StreamTransport stream_transport_;  // set instead of transport_ for GPU buckets over NCCL
  Options options_;
  std::map<DType, Bucket> open_;
  std::deque<Bucket> launched_;
  size_t waited_ = 0;  // launched_[0, waited_) completed
  // gradient tensor id -> (bucket index in launched_, element offset in its buffer)
  std::unordered_map<uint64_t, std::pair<size_t, int64_t>> slots_;
  std::unique_ptr<CommThread> thread_;
};

}  // namespace strata::distribute
