#include "bench/collectives_worker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/tensor.h>
#include <strata/core/thread_pool.h>
#include <strata/distribute/collective/gloo_communicator.h>
#include <strata/distribute/collective/tcp_store.h>

#ifdef STRATA_HAS_GLOO
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace strata::bench {

#ifndef STRATA_HAS_GLOO

int collectives_worker_main(const std::string&) {
  std::fprintf(stderr, "strata-bench: collectives worker: strata was built without Gloo\n");
  return 1;
}

#else

namespace {

using Clock = std::chrono::steady_clock;
using distribute::Communicator;
using distribute::ReduceOp;

std::chrono::milliseconds to_millis(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

// gloo::rendezvous::Store over the suite's TcpStore, so that the baseline's Gloo context
// rendezvous through the same store as strata's communicator (under its own prefix).
class TcpGlooStore final : public gloo::rendezvous::Store {
 public:
  TcpGlooStore(distribute::TcpStore& store, std::string prefix, double timeout_seconds)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout_seconds) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get(prefix_ + key, timeout_);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, to_millis(timeout_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, std::max(0.001, double(timeout.count()) / 1000.0));
  }

 private:
  distribute::TcpStore& store_;
  std::string prefix_;
  double timeout_;
};

enum Variant { kStrata, kGlooRing, kGlooBcube, kVariants };
const char* const kVariantNames[kVariants] = {"strata", "gloo_ring", "gloo_bcube"};

struct Worker {
  int rank = 0, size = 1;
  double timeout = 60;
  std::unique_ptr<Communicator> comm;
  std::shared_ptr<gloo::rendezvous::Context> gloo;  // the baseline's own context
  uint32_t tag = 1;

  void all_reduce(Variant v, Tensor& buf) {
    if (v == kStrata) return comm->all_reduce(buf, ReduceOp::Sum);
    gloo::AllreduceOptions opts(gloo);
    opts.setOutput(buf.data<float>(), size_t(buf.numel()));
    opts.setReduceFunction([](void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); });
    opts.setAlgorithm(v == kGlooRing ? gloo::AllreduceOptions::Algorithm::RING
                                     : gloo::AllreduceOptions::Algorithm::BCUBE);
    opts.setTimeout(to_millis(timeout));
    opts.setTag(tag++);
    gloo::allreduce(opts);
  }

  // The slowest rank's seconds, so every rank reports the same figure.
  double slowest(double seconds) {
    Tensor t = Tensor::from_vector(std::vector<double>{seconds});
    comm->all_reduce(t, ReduceOp::Max);
    return t.item<double>();
  }

  // Each rank contributes rank+1: the sum must be size(size+1)/2 everywhere.
  void verify(Variant v, int64_t count) {
    Tensor buf = Tensor::from_vector(std::vector<float>(size_t(count), float(rank + 1)));
    all_reduce(v, buf);
    const float want = float(size * (size + 1) / 2);
    const float* p = buf.data<float>();
    for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 1024))
      STRATA_CHECK(p[i] == want, "collectives worker: ", kVariantNames[v], " all-reduce of ", count,
                   " floats gave ", p[i], " at element ", i, " on rank ", rank, ", expected ", want);
  }
};

}  // namespace

int collectives_worker_main(const std::string& spec_json) {
  int rank = -1;
  try {
    const auto spec = nlohmann::json::parse(spec_json);
    rank = spec.at("rank").get<int>();
    set_num_threads(1);  // all-reduce is all this process does: keep the cores for peers
    Worker w;
    w.rank = rank;
    w.size = spec.at("size").get<int>();
    w.timeout = spec.at("timeout").get<double>();
    const std::string prefix = spec.at("prefix").get<std::string>();
    const auto sizes = spec.at("sizes").get<std::vector<int64_t>>();
    const int reps = spec.at("reps").get<int>();
    const double rep_seconds = spec.at("rep_seconds").get<double>();
    const int64_t min_inner = spec.at("min_inner").get<int64_t>();

    auto store = std::make_shared<distribute::TcpStore>("127.0.0.1", spec.at("port").get<int>(), w.timeout);
    distribute::GlooCommunicatorOptions o;
    o.rank = w.rank;
    o.size = w.size;
    o.store = store;
    o.prefix = prefix + "/strata";
    o.hostname = "127.0.0.1";
    o.comm.timeout_seconds = w.timeout;
    o.comm.shared_memory = spec.value("shared_memory", false);
    w.comm = distribute::make_gloo_communicator(o);
    auto* gc = dynamic_cast<distribute::GlooCommunicator*>(w.comm.get());
    STRATA_CHECK(gc != nullptr, "collectives worker: make_gloo_communicator did not return a GlooCommunicator");

    w.gloo = std::make_shared<gloo::rendezvous::Context>(w.rank, w.size);
    w.gloo->setTimeout(to_millis(w.timeout));
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    TcpGlooStore gstore(*store, prefix + "/gloo/", w.timeout);
    w.gloo->connectFullMesh(gstore, device);
    w.comm->barrier();

    nlohmann::json results = nlohmann::json::array();
    for (const int64_t bytes : sizes) {
      const int64_t count = bytes / 4;
      for (int v = 0; v < kVariants; ++v) w.verify(Variant(v), count);
      // Zeros stay zeros under Sum: no overflow or denormals however often it runs.
      Tensor buf = Tensor::from_vector(std::vector<float>(size_t(count), 0.0f));
      // Warm up, then size the repetitions so that one lasts about rep_seconds over all
      // variants (rank 0 decides, so every rank calls the same number of times), but
      // holds at least min_inner calls of each: from 16 MB one call of each variant
      // already takes longer, and a repetition of single calls is as noisy as one call.
      double once_all = 0;
      for (int v = 0; v < kVariants; ++v) {
        w.all_reduce(Variant(v), buf);
        w.all_reduce(Variant(v), buf);
        w.comm->barrier();
        const auto t0 = Clock::now();
        w.all_reduce(Variant(v), buf);
        once_all += w.slowest(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      Tensor inner_t = Tensor::from_vector(
          std::vector<int64_t>{std::clamp<int64_t>(int64_t(rep_seconds / std::max(once_all, 1e-7)), min_inner, 100000)});
      w.comm->broadcast(inner_t, 0);
      const int64_t inner = inner_t.data<int64_t>()[0];
      // The variants alternate call by call, so that load from other processes on the
      // machine, which comes in bursts shorter than a repetition, hits all of them alike.
      // Each variant's time is the sum of its own calls. A call also absorbs what the
      // call before it left behind (a peer that left it later), so the order is one in
      // which every variant follows each other variant equally often.
      static_assert(kVariants == 3, "the call order below is for 3 variants");
      constexpr int kOrder[6] = {kStrata, kGlooRing, kGlooBcube, kStrata, kGlooBcube, kGlooRing};
      std::vector<std::vector<double>> samples(kVariants);
      // The first call after the barrier would also absorb the barrier's uneven exit
      // (a large share when a repetition holds few calls, at large sizes): an untimed
      // call of the variant that precedes the starting one in the order takes it, and
      // the starting point rotates from repetition to repetition.
      for (int r = 0; r < reps; ++r) {
        double spent[kVariants] = {};
        // Starts 0, 1, 3 and 4 only: from 2 or 5, a group of three calls would hold one
        // variant twice and another not at all (an odd `inner` leaves them uneven).
        const int start = r % 4 + (r % 4) / 2;
        w.comm->barrier();
        w.all_reduce(Variant(kOrder[(start + 5) % 6]), buf);
        for (int64_t i = 0; i < inner; ++i) {
          for (int j = 0; j < kVariants; ++j) {
            const int v = kOrder[(start + i * kVariants + j) % 6];
            const auto t0 = Clock::now();
            w.all_reduce(Variant(v), buf);
            spent[v] += std::chrono::duration<double>(Clock::now() - t0).count();
          }
        }
        for (int v = 0; v < kVariants; ++v) samples[size_t(v)].push_back(w.slowest(spent[v] / double(inner)));
      }
      nlohmann::json row = {{"bytes", bytes}, {"strata_algorithm", gc->allreduce_algorithm(bytes)}};
      for (int v = 0; v < kVariants; ++v)  // in measurement order: the suite pairs them
        row[kVariantNames[v]] = {{"seconds", samples[size_t(v)]}, {"inner", inner}};
      results.push_back(row);
    }
    if (w.rank == 0) store->set(prefix + "/results", results.dump());
    // Leave together: a rank that exits while a peer is still inside a collective would
    // break it.
    w.comm->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-bench: collectives worker rank %d: %s\n", rank, e.what());
    return 1;
  }
}

#endif  // STRATA_HAS_GLOO

}  // namespace strata::bench
