// Tensor-level checkpoint files: a named set of tensors plus JSON metadata, stored as a
// safetensors data file and a JSON manifest, written atomically and fully validated on load.
//
// A checkpoint saved under `prefix` (e.g. "run/ckpt-100") is two files:
//   <prefix>.safetensors      the tensors in the safetensors format (little-endian u64 header
//                             length, JSON header {name: {dtype, shape, data_offsets}} with a
//                             string->string "__metadata__", then the byte buffer), readable
//                             by any safetensors reader;
//   <prefix>.manifest.json    format version, step, the data file's name, size and CRC32C of
//                             its header, and every tensor's dtype, shape, offsets and CRC32C,
//                             plus the caller's metadata.
// The manifest is the commit point and is written last. When a checkpoint already exists
// under the same prefix, the new data goes to the name its manifest does NOT use
// (<prefix>.safetensors or <prefix>.alt.safetensors) and the old data file is removed only
// after the new manifest is committed, so a crash at any moment leaves either the old or the
// new checkpoint loadable, never a damaged one. Both files go through AtomicFile.
//
// Tensors may be strided views on any device; they are written contiguously in their own
// dtype and loaded as contiguous CPU tensors, bit for bit. dtypes use the safetensors
// names: F32, F64, F16, BF16, I32, I64, BOOL.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <strata/core/tensor.h>
#include <strata/train/atomic_file.h>

namespace strata::train {

// Bumped when the manifest layout changes incompatibly; newer files are refused.
inline constexpr int kCheckpointFormatVersion = 1;

struct TensorCheckpoint {
  std::map<std::string, Tensor> tensors;  // by name (object path), contiguous CPU tensors
  nlohmann::json metadata;                // exactly as passed to save_tensors
  std::optional<int64_t> step;            // metadata["step"] when it was an integer
};

struct SaveTensorsOptions {
  // Test hooks applied to both atomic writes (data file, then manifest).
  AtomicWriteHooks hooks;
};

// Saves `tensors` under `prefix` (its directory must exist). Names must be non-empty and
// not "__metadata__". An integer metadata["step"] is also recorded as the manifest's step.
// Throws strata::Error on bad input or I/O failure; the previous checkpoint under `prefix`,
// if any, stays intact in every failure.
void save_tensors(const std::filesystem::path& prefix,
                  const std::map<std::string, Tensor>& tensors,
                  const nlohmann::json& metadata = nlohmann::json::object(),
                  const SaveTensorsOptions& options = {});

// Loads and validates a checkpoint: missing or malformed manifest, truncated or oversized
// data file, malformed safetensors header (bad JSON, unknown dtype, offsets out of range,
// overlapping or leaving holes, shape x dtype size mismatch), disagreement between header
// and manifest, and CRC32C mismatches all throw strata::Error naming the file and, where
// one is at fault, the tensor.
TensorCheckpoint load_tensors(const std::filesystem::path& prefix);

// The manifest alone (validated as JSON with the expected format and version), without
// reading the data file: cheap inspection for checkpoint managers.
nlohmann::json read_checkpoint_manifest(const std::filesystem::path& prefix);

std::filesystem::path checkpoint_manifest_path(const std::filesystem::path& prefix);
// True when a manifest has been committed under `prefix` (it may still fail to load).
bool checkpoint_exists(const std::filesystem::path& prefix);
// Removes a checkpoint: the manifest first (so a partial removal never looks committed),
// then both possible data files and stale temporaries. Missing files are fine.
void remove_checkpoint(const std::filesystem::path& prefix);

// Plain safetensors files (no manifest), for interoperability with other tools.
struct SafetensorsContents {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // the "__metadata__" map
};
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const AtomicWriteHooks& hooks = {});
// Same structural validation as load_tensors (there are no checksums to verify).
SafetensorsContents read_safetensors(const std::filesystem::path& path);

// "F32" <-> DType::Float32, ...; unknown or unsupported names throw naming `context`.
const char* safetensors_dtype_name(DType dtype);
DType dtype_from_safetensors_name(const std::string& name, const std::string& context);

}  // namespace strata::train
