// The byte encoding of an RpcMessage (distribute/ps/rpc.h), apart from the ZeroMQ
// transport so that it can be checked on plain bytes (fuzz/ps_rpc_fuzz.cc) and built
// without ZeroMQ.
//
// A message travels as a header frame — JSON {"h": user header, "t": [[dtype, shape], ...]}
// — followed by one frame per tensor holding its raw bytes (host byte order, row-major).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <strata/distribute/ps/rpc.h>

namespace strata::distribute::ps {

// The header frame of `m` (throws strata::Error for an undefined tensor).
std::string encode_rpc_header(const RpcMessage& m);

// Decodes a header frame and its tensor frames into fresh contiguous cpu:0 tensors. Every
// malformed input — bad JSON, a header of the wrong shape, an unknown dtype, a shape that
// does not match its frame's size — throws strata::Error; nothing is allocated beyond
// what the frames themselves hold.
RpcMessage decode_rpc_message(std::string_view header, std::span<const std::string_view> tensor_frames);

}  // namespace strata::distribute::ps
