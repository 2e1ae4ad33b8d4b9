// Device: where a tensor's memory lives. `cpu:N` are logical CPU devices sharing host
// memory (so N replicas can run without GPUs, as TensorFlow's logical devices do);
// `cuda:N` are GPUs, implemented by the CUDA backend when it is built.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace strata {

enum class DeviceType : uint8_t { CPU, CUDA };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  // Parses "cpu", "cpu:1", "cuda:0", "gpu:0" (alias); throws strata::Error otherwise.
  static Device parse(const std::string& spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device& a, const Device& b) = default;
};

inline Device cpu(int index = 0) { return Device(DeviceType::CPU, index); }
inline Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }

std::ostream& operator<<(std::ostream& os, const Device& d);

// True when both devices address the same memory (all cpu:N share host memory).
inline bool same_memory(const Device& a, const Device& b) {
  return a.type == b.type && (a.type == DeviceType::CPU || a.index == b.index);
}

}  // namespace strata

template <>
struct std::hash<strata::Device> {
  size_t operator()(const strata::Device& d) const { return size_t(d.type) * 1024 + size_t(d.index); }
};
