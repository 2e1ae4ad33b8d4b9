// collectives suite: all-reduce across replica threads in one process (the in-process
// backend MirroredStrategy uses), with nccl-tests' definitions: algbw = bytes / time,
// busbw = algbw x 2(n-1)/n. Baseline: memcpy of the same bytes.
#include <cstring>

#include "bench/bench.h"
#include "core/ops.h"
#include "distribute/strategy.h"

namespace strata::bench {

std::vector<Result> collectives_suite(const Options& o) {
  std::vector<Result> out;
  const int n = 2;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(n));
  std::vector<int64_t> sizes = o.quick ? std::vector<int64_t>{1 << 10, 1 << 20}
                                       : std::vector<int64_t>{1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26};
  for (int64_t bytes : sizes) {
    const int64_t elems = bytes / 4;
    std::vector<Tensor> buffers;
    for (int r = 0; r < n; ++r) buffers.push_back(ones({elems}));
    const int inner = bytes <= (1 << 20) ? 20 : 2;
    Timing t = time_it([&] {
      strategy.run([&]() {
        auto* ctx = distribute::get_replica_context();
        auto& comm = strategy.replica_context(ctx->replica_id_in_sync_group()).communicator();
        comm.all_reduce(buffers[size_t(ctx->replica_id_in_sync_group())], distribute::ReduceOp::Sum);
      });
    }, o.quick ? 2 : 5, inner);
    std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
    Timing copy = time_it([&] { std::memcpy(dst.data(), src.data(), src.size()); }, o.quick ? 2 : 5, inner);
    const double algbw = double(bytes) / t.median_s / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    std::string label = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
    out.push_back({"collectives", "in-process all_reduce x" + std::to_string(n) + " " + label + " busbw", busbw, "GB/s",
                   t.spread(), "memcpy of the same bytes", double(bytes) / copy.median_s / 1e9});
  }
  return out;
}

}  // namespace strata::bench
