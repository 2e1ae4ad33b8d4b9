#include <strata/core/device.h>

#include <cstdlib>

#include <strata/core/error.h>

namespace strata {

Device Device::parse(const std::string& spec) {
  std::string kind = spec;
  int index = 0;
  auto colon = spec.find(':');
  if (colon != std::string::npos) {
    kind = spec.substr(0, colon);
    const std::string idx = spec.substr(colon + 1);
    char* end = nullptr;
    long v = idx.empty() ? -1 : std::strtol(idx.c_str(), &end, 10);
    STRATA_CHECK(!idx.empty() && end && *end == '\0' && v >= 0 && v < 4096,
                 "device: bad device index in '", spec, "' (expected e.g. cpu:0 or cuda:1)");
    index = int(v);
  }
  if (kind == "cpu" || kind == "CPU") return Device(DeviceType::CPU, index);
  if (kind == "cuda" || kind == "gpu" || kind == "GPU") return Device(DeviceType::CUDA, index);
  fail("device: unknown device '", spec, "' (expected cpu[:N] or cuda[:N])");
}

std::string Device::str() const {
  return std::string(type == DeviceType::CPU ? "cpu:" : "cuda:") + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace strata
