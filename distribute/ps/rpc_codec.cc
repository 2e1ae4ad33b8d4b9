#include <strata/distribute/ps/rpc_codec.h>

#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include <strata/core/error.h>

namespace strata::distribute::ps {

std::string encode_rpc_header(const RpcMessage& m) {
  nlohmann::json meta = nlohmann::json::array();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const Tensor& t = m.tensors[i];
    STRATA_CHECK(t.defined(), "rpc: tensor ", i, " of a message is undefined");
    meta.push_back(nlohmann::json::array({dtype_name(t.dtype()), t.shape()}));
  }
  return nlohmann::json{{"h", m.header}, {"t", meta}}.dump();
}

namespace {

// One [dtype, shape] entry of the header's "t" list, checked against its frame's size
// before anything is allocated from it.
Tensor decode_tensor(const nlohmann::json& entry, size_t i, std::string_view frame) {
  STRATA_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_array(),
               "rpc: tensor ", i, " must be described as [dtype, shape], got ", entry.dump());
  const DType dtype = dtype_from_name(entry[0].get<std::string>());
  Shape shape;
  // Non-zero extents multiply to at most int64's range, so that the strides of an empty
  // tensor (a zero extent beside huge ones) cannot overflow either.
  uint64_t bytes = dtype_size(dtype);
  bool empty = false;
  for (const auto& d : entry[1]) {
    STRATA_CHECK(d.is_number_integer() && !d.is_number_float(), "rpc: tensor ", i,
                 ": shape entries must be integers, got ", d.dump());
    STRATA_CHECK(d.is_number_unsigned() || d.get<int64_t>() >= 0, "rpc: tensor ", i,
                 ": negative extent ", d.dump());
    const uint64_t extent = d.get<uint64_t>();
    STRATA_CHECK(extent <= uint64_t(std::numeric_limits<int64_t>::max()), "rpc: tensor ", i,
                 ": extent ", d.dump(), " is too large");
    shape.push_back(int64_t(extent));
    if (extent == 0) {
      empty = true;
      continue;
    }
    STRATA_CHECK(!__builtin_mul_overflow(bytes, extent, &bytes) &&
                     bytes <= uint64_t(std::numeric_limits<int64_t>::max()),
                 "rpc: tensor ", i, " (", dtype_name(dtype), shape_str(shape), "...) overflows 64-bit sizes");
  }
  if (empty) bytes = 0;
  STRATA_CHECK(frame.size() == bytes, "rpc: tensor ", i, " (", dtype_name(dtype), shape_str(shape), ") has ",
               frame.size(), " bytes, expected ", bytes);
  Tensor t = Tensor::empty(shape, dtype, Device());  // host memory: the frame is copied in
  if (t.nbytes() > 0) std::memcpy(t.raw_data(), frame.data(), t.nbytes());
  return t;
}

}  // namespace

RpcMessage decode_rpc_message(std::string_view header, std::span<const std::string_view> tensor_frames) {
  nlohmann::json all;
  try {
    all = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail("rpc: the message header is not valid JSON: ", e.what());
  }
  STRATA_CHECK(all.is_object() && all.contains("h") && all.contains("t"),
               "rpc: the message header must be an object with \"h\" and \"t\"");
  const auto& meta = all["t"];
  STRATA_CHECK(meta.is_array() && meta.size() == tensor_frames.size(), "rpc: header lists ",
               meta.is_array() ? meta.size() : 0, " tensors but the message has ", tensor_frames.size(),
               " tensor frames");
  RpcMessage m;
  m.header = std::move(all["h"]);
  for (size_t i = 0; i < meta.size(); ++i) m.tensors.push_back(decode_tensor(meta[i], i, tensor_frames[i]));
  return m;
}

}  // namespace strata::distribute::ps
