// Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) with strata itself:
// valid inputs of each parser, small (a few hundred bytes each), from which libFuzzer's
// mutations start. Run from the repository root after changing a format:
//   build/bin/strata_fuzz_make_seeds fuzz/corpus
// Regression inputs (files named crash-*) that fuzzing found are kept beside the seeds and
// are not written here.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/ops.h>
#include <strata/distribute/ps/rpc_codec.h>
#include <strata/train/checkpoint_file.h>
#include <strata/train/summary_writer.h>
#include "fuzz/fuzz_util.h"
#include "fuzz/iterator_state_pipelines.h"

namespace {

namespace fs = std::filesystem;
using strata::Tensor;

fs::path g_root;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  strata::fuzz::write_bytes(dir / name, bytes);
  std::printf("%s/%s (%zu bytes)\n", target.c_str(), name.c_str(), bytes.size());
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string gzip(const std::string& raw) {
  z_stream zs{};
  STRATA_CHECK(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, "gzip");
  std::string out(deflateBound(&zs, uLong(raw.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = uInt(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  STRATA_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END, "gzip: deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// An IDX file: big-endian magic (0, 0, type, ndims), extents, values.
std::string idx(uint8_t type, const std::vector<uint32_t>& dims, size_t value_size) {
  std::string s = {0, 0, char(type), char(dims.size())};
  size_t count = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(char((d >> shift) & 0xff));
    count *= d;
  }
  for (size_t i = 0; i < count * value_size; ++i) s.push_back(char(i * 37 % 251));
  return s;
}

void idx_seeds() {
  seed("idx", "u8-images.idx", idx(0x08, {2, 3, 3}, 1));
  seed("idx", "u8-labels.idx", idx(0x08, {5}, 1));
  seed("idx", "f32-matrix.idx", idx(0x0D, {2, 2}, 4));
  seed("idx", "i16-empty.idx", idx(0x0B, {0, 4}, 2));
  seed("idx", "u8-images.idx.gz", gzip(idx(0x08, {2, 4, 4}, 1)));
  seed("idx", "two-members.idx.gz", gzip(idx(0x08, {3}, 1).substr(0, 5)) + gzip(idx(0x08, {3}, 1).substr(5)));
}

std::map<std::string, Tensor> sample_tensors() {
  return {{"dense/kernel", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
          {"dense/bias", Tensor::from_vector<double>({0.5, -0.5}, {2}, strata::kFloat64)},
          {"step", Tensor::from_vector<int64_t>({7}, {}, strata::kInt64)},
          {"mask", Tensor::from_vector<bool>({true, false, true}, {3}, strata::kBool)},
          {"half", Tensor::from_vector<float>({1.5f, -2}, {2}, strata::kFloat16)},
          {"empty", strata::zeros({0, 4}, strata::kInt32)}};
}

void checkpoint_seeds(const fs::path& tmp) {
  strata::train::write_safetensors(tmp / "a.safetensors", sample_tensors(), {{"format", "pt"}});
  seed("safetensors", "six-tensors.safetensors", read_all(tmp / "a.safetensors"));
  strata::train::write_safetensors(tmp / "b.safetensors",
                                   {{"w", Tensor::from_vector<float>({1, 2}, {1, 2}, strata::kBFloat16)}});
  seed("safetensors", "bf16.safetensors", read_all(tmp / "b.safetensors"));
  strata::train::write_safetensors(tmp / "c.safetensors", {});
  seed("safetensors", "no-tensors.safetensors", read_all(tmp / "c.safetensors"));

  // The checkpoint target's input: manifest, separator, data file (fuzz/checkpoint_fuzz.cc);
  // saved under the prefix name that target uses.
  const fs::path prefix = tmp / "ckpt-7";
  strata::train::save_tensors(prefix, sample_tensors(), {{"step", 7}, {"optimizer", "adam"}});
  seed("checkpoint", "six-tensors",
       read_all(tmp / "ckpt-7.manifest.json") + "\n--strata-fuzz-data--\n" + read_all(tmp / "ckpt-7.safetensors"));
  strata::train::remove_checkpoint(prefix);
  strata::train::save_tensors(prefix, {{"v", Tensor::from_vector<float>({3}, {1})}});
  seed("checkpoint", "one-tensor",
       read_all(tmp / "ckpt-7.manifest.json") + "\n--strata-fuzz-data--\n" + read_all(tmp / "ckpt-7.safetensors"));
  seed("checkpoint", "manifest-only", read_all(tmp / "ckpt-7.manifest.json"));
}

void cluster_seeds() {
  seed("tf_config", "chief-and-workers.json",
       R"({"cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "10.0.0.2:2002"],)"
       R"( "ps": ["[::1]:2003"]}, "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})");
  seed("tf_config", "workers-only.json",
       R"({"cluster": {"worker": ["h0:1", "h0:2", "h1:1"]}, "task": {"type": "worker", "index": "2"}})");
  seed("tf_config", "evaluator.json",
       R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}, "environment": "cloud"})");
  seed("tf_config", "ps.json",
       R"({"cluster": {"chief": ["c:9"], "ps": ["p:1", "p:2"]}, "task": {"type": "ps", "index": 1}})");

  seed("cluster_env", "tf_config.env",
       "TF_CONFIG={\"cluster\": {\"worker\": [\"h:1\", \"h:2\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}\n"
       "STRATA_REPLICAS_PER_WORKER=2\n");
  seed("cluster_env", "openmpi.env",
       "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=4\nOMPI_COMM_WORLD_LOCAL_RANK=1\n"
       "OMPI_COMM_WORLD_LOCAL_SIZE=4\nMASTER_PORT=29400\n");
  seed("cluster_env", "mpich.env", "PMI_RANK=0\nPMI_SIZE=2\nMASTER_ADDR=10.1.1.1\n");
  seed("cluster_env", "slurm.env",
       "SLURM_PROCID=3\nSLURM_NTASKS=5\nSLURM_LOCALID=1\nSLURM_NODEID=1\n"
       "SLURM_JOB_NODELIST=node[01-02],gpu[7,9]\nSLURM_TASKS_PER_NODE=2,1(x3)\n");
  seed("cluster_env", "slurm-step.env",
       "SLURM_PROCID=0\nSLURM_STEP_NUM_TASKS=2\nSLURM_STEP_NODELIST=r[1-2]-n[01]\n");
  seed("cluster_env", "torchrun.env",
       "RANK=2\nWORLD_SIZE=4\nLOCAL_RANK=0\nLOCAL_WORLD_SIZE=2\nMASTER_ADDR=::1\nMASTER_PORT=1234\n");
}

// The TCP store's wire format (distribute/collective/tcp_store.cc): frames of u32le length
// + payload; a request payload is an opcode then u32le-length strings / i64le integers.
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
void put_i64(std::string& s, int64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char((uint64_t(v) >> (8 * i)) & 0xff));
}
void put_str(std::string& s, const std::string& v) {
  put_u32(s, uint32_t(v.size()));
  s += v;
}
std::string frame(const std::string& payload) {
  std::string out;
  put_u32(out, uint32_t(payload.size()));
  return out + payload;
}

void store_seeds() {
  enum : char { Set = 1, SetEphemeral, Get, Add, Check, Wait, Remove };
  std::string set(1, Set), eph(1, SetEphemeral), get(1, Get), add(1, Add), add2(1, Add), check(1, Check),
      wait(1, Wait), remove(1, Remove), get_missing(1, Get);
  put_str(set, "rank/0");
  put_str(set, "127.0.0.1:4000");
  put_str(eph, "alive/1");
  put_str(eph, "1");
  put_i64(get, 500);
  put_str(get, "rank/0");
  put_str(add, "counter");
  put_i64(add, 3);
  put_str(add2, "rank/0");  // not an integer: an error reply
  put_i64(add2, 1);
  put_u32(check, 2);
  put_str(check, "rank/0");
  put_str(check, "alive/1");
  put_i64(wait, 1000);
  put_u32(wait, 2);
  put_str(wait, "counter");
  put_str(wait, "nobody");
  put_str(remove, "rank/0");
  put_i64(get_missing, 10);
  put_str(get_missing, "never/set");
  seed("tcp_store", "session", frame(set) + frame(eph) + frame(get) + frame(add) + frame(add2) + frame(check) +
                                   frame(wait) + frame(remove) + frame(get_missing));
  seed("tcp_store", "set-get", frame(set) + frame(get));
  seed("tcp_store", "wait-then-set", frame(wait) + frame(set));
}

void ps_seeds() {
  using strata::distribute::ps::RpcMessage;
  const std::string sep = "\n--strata-fuzz-frame--\n";
  auto message = [&](const RpcMessage& m) {
    std::string out = strata::distribute::ps::encode_rpc_header(m);
    for (const Tensor& t : m.tensors)
      out += sep + std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
    return out;
  };
  seed("ps_rpc", "update", message({{{"from", "worker"}, {"items", {{{"key", "dense/kernel#0"}, {"op", "add"}}}}},
                                    {Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2})}}));
  seed("ps_rpc", "create-two",
       message({{{"from", "chief"},
                 {"items", {{{"key", "a"}, {"mode", "overwrite"}}, {{"key", "b"}, {"mode", "if_absent"}}}}},
                {Tensor::from_vector<int64_t>({5}, {}, strata::kInt64), strata::zeros({0, 3}, strata::kFloat64)}}));
  seed("ps_rpc", "read", message({{{"from", "worker"}, {"keys", {"a", "b"}}}, {}}));
}

void event_seeds(const fs::path& tmp) {
  const fs::path logdir = tmp / "logs";
  fs::path file;
  {
    strata::train::SummaryWriter writer(logdir, 0.0);
    writer.scalar("loss", 0.25, 1);
    writer.histogram("dense/kernel", Tensor::from_vector<float>({-1, 0, 0.5f, 2, 2}, {5}), 1);
    writer.text("notes", "hello *world*", 2);
    writer.image("inputs", Tensor::from_vector<float>({0, 0.25f, 0.5f, 1}, {1, 2, 2, 1}), 3);
    file = writer.file_path();
  }
  const std::string bytes = read_all(file);
  seed("event_file", "scalar-histogram-text-image.tfevents", bytes);
  // The first record alone (file_version), and the scalar record's payload bare (the
  // target also decodes its whole input as one Event).
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  seed("event_file", "file-version.tfevents", bytes.substr(0, 16 + n));
  uint64_t m = 0;
  std::memcpy(&m, bytes.data() + 16 + n, 8);
  seed("event_file", "scalar-event.pb", bytes.substr(16 + n + 12, m));
}

// States of each iterator_state pipeline after a few elements, one in the text form and
// one as raw words (the target's two input forms).
void iterator_state_seeds() {
  const auto pipelines = strata::fuzz::iterator_state_pipelines();
  for (size_t p = 0; p < pipelines.size(); ++p) {
    for (int taken : {0, 3, 7}) {
      strata::data::Iterator it = pipelines[p].make_iterator(0);
      for (int i = 0; i < taken && it.next(); ++i) {
      }
      const strata::data::IteratorState state = it.save();
      const std::string name = "pipeline" + std::to_string(p) + "-after" + std::to_string(taken);
      if (taken == 3) {
        seed("iterator_state", name + ".txt", state.to_string());
      } else {
        seed("iterator_state", name + ".words",
             std::string(reinterpret_cast<const char*>(state.words.data()), state.words.size() * sizeof(int64_t)));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  const fs::path tmp = fs::temp_directory_path() / ("strata_make_seeds_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  idx_seeds();
  checkpoint_seeds(tmp);
  event_seeds(tmp);
  cluster_seeds();
  store_seeds();
  ps_seeds();
  iterator_state_seeds();
  fs::remove_all(tmp);
  return 0;
}
