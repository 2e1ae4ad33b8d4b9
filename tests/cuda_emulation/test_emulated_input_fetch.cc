// Input fetched to GPU replicas (distribute/device_fetch.h) on the emulated GPUs: each
// part of a distributed batch is uploaded non-blocking on its device's input stream, the
// default stream (where the replicas compute) is made to wait for that copy before anything
// else is enqueued on it, and the copy's memory is marked as used there. The emulated
// streams are immediate, so what is checked is the order of the requests made to them and
// the allocator's bookkeeping; tests/cuda/test_cuda_device.cc checks the overlap on a GPU.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/storage.h>
#include <strata/distribute/device_fetch.h>
#include <strata/distribute/strategy.h>
#include "tests/cuda_emulation/emulated_runtime.h"

using namespace strata;
using namespace strata::distribute;
using cuda_emulation::StreamRequest;

namespace {

// Rows 0..7 of [i, 10 i] and labels i, in batches of 4.
data::Dataset numbered_batches() {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < 8; ++i) {
    x.push_back(float(i));
    x.push_back(float(10 * i));
    y.push_back(i);
  }
  return data::Dataset::from_tensor_slices({Tensor::from_vector(x, {8, 2}, kFloat32, Device()),
                                            Tensor::from_vector(y, {8}, kInt64, Device())})
      .batch(4);
}

// Every upload to `device` among `requests` is non-blocking on its input stream and is
// followed, before any other upload to that device, by the default stream waiting for it.
int count_ordered_uploads(const std::vector<StreamRequest>& requests, Device device) {
  const Stream input = input_stream(device);
  int uploads = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const StreamRequest& r = requests[i];
    if (r.kind != StreamRequest::Kind::Upload || !(r.stream.device() == device)) continue;
    INFO("upload " << uploads << " to " << device);
    CHECK(r.stream == input);
    CHECK_FALSE(r.stream.is_default());
    CHECK(r.non_blocking);
    REQUIRE(i + 1 < requests.size());
    const StreamRequest& w = requests[i + 1];
    CHECK(w.kind == StreamRequest::Kind::Wait);
    CHECK(w.stream == Stream::default_for(device));
    CHECK(w.producer == input);
    ++uploads;
  }
  return uploads;
}

}  // namespace

TEST_CASE("emulated GPUs: distributed input is uploaded on each device's input stream, ordered before its default stream",
          "[fetch]") {
  MirroredStrategy strategy({cuda(0), cuda(1)});
  for (int64_t buffer : {0, 2}) {  // read on this thread, and on a prefetch thread
    INFO("experimental_per_replica_buffer_size " << buffer);
    InputOptions options;
    options.experimental_per_replica_buffer_size = buffer;
    DistributedDataset dist = strategy.experimental_distribute_dataset(numbered_batches(), options);
    cuda_emulation::clear_stream_requests();
    DistributedIterator it = dist.make_iterator();
    std::vector<std::vector<int64_t>> labels(2);
    int steps = 0;
    while (std::optional<PerReplica<data::Batch>> element = it.next()) {
      for (size_t r = 0; r < 2; ++r) {
        const data::Batch& part = (*element)[r];
        REQUIRE(part.size() == 2);
        for (const Tensor& t : part) {
          CHECK(t.device() == cuda(int(r)));
          // Allocated for the copy's stream; freed, it waits for the default stream too.
          CHECK(t.storage()->stream() == input_stream(cuda(int(r))));
        }
        const std::vector<int64_t> y = part[1].to(Device()).to_vector<int64_t>();
        const std::vector<float> x = part[0].to(Device()).to_vector<float>();
        for (size_t k = 0; k < y.size(); ++k) {
          CHECK(x[2 * k] == float(y[k]));
          CHECK(x[2 * k + 1] == float(10 * y[k]));
        }
        labels[r].insert(labels[r].end(), y.begin(), y.end());
      }
      ++steps;
    }
    CHECK(steps == 2);
    CHECK(labels[0] == std::vector<int64_t>{0, 1, 4, 5});
    CHECK(labels[1] == std::vector<int64_t>{2, 3, 6, 7});
    const std::vector<StreamRequest> requests = cuda_emulation::stream_requests();
    CHECK(count_ordered_uploads(requests, cuda(0)) == 4);  // 2 steps x (x, y)
    CHECK(count_ordered_uploads(requests, cuda(1)) == 4);
  }
}

TEST_CASE("emulated GPUs: an uploaded input's memory waits for the default stream before reuse", "[fetch]") {
  cuda_emulation::allocator().empty_cache();
  const Tensor host = arange(0, 64, 1, kFloat32);
  {
    const Tensor on_gpu = place_on(host, cuda(0), /*fetch=*/true);
    CHECK(on_gpu.to(Device()).to_vector<float>() == host.to_vector<float>());
  }
  // Freed on the input stream while used on the default stream: held for an event of the
  // default stream (immediate here) until the allocator next looks.
  CHECK(cuda_emulation::allocator().device_stats(0).pending_blocks == 1);
  // fetch off, or the tensor already there: no copy.
  cuda_emulation::clear_stream_requests();
  CHECK(place_on(host, cuda(0), /*fetch=*/false).device() == Device());
  const Tensor there = zeros({3}, kFloat32, cuda(0));
  CHECK(place_on(there, cuda(0), true).storage() == there.storage());
  CHECK(cuda_emulation::stream_requests().empty());
  // Between GPUs: Tensor::to's copy, no input stream.
  CHECK(place_on(there, cuda(1), true).device() == cuda(1));
  CHECK(cuda_emulation::stream_requests().empty());
}

TEST_CASE("emulated GPUs: experimental_distribute_values_from_function uploads on the input streams too", "[fetch]") {
  MirroredStrategy strategy({cuda(0), cuda(1)});
  cuda_emulation::clear_stream_requests();
  const PerReplica<Tensor> values = strategy.experimental_distribute_values_from_function(
      [](const ValueContext& ctx) { return full({3}, double(ctx.replica_id_in_sync_group), kFloat32, Device()); });
  for (int r = 0; r < 2; ++r) {
    CHECK(values[size_t(r)].device() == cuda(r));
    CHECK(values[size_t(r)].to(Device()).to_vector<float>() == std::vector<float>(3, float(r)));
  }
  const std::vector<StreamRequest> requests = cuda_emulation::stream_requests();
  CHECK(count_ordered_uploads(requests, cuda(0)) == 1);
  CHECK(count_ordered_uploads(requests, cuda(1)) == 1);
}
