// CRC32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78): the checksum of
// TFRecord framing in TensorBoard event files and of strata's checkpoint manifests.
//
// Debian packages no C++ library for it (PLATFORM.md), so this is a small one: SSE4.2's
// crc32 instruction when the CPU has it (checked once at run time), otherwise a
// slice-by-8 table. Both give identical results; the tests compare them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata::train {

// CRC32C of n bytes. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
inline uint32_t crc32c(std::string_view bytes) { return crc32c(bytes.data(), bytes.size()); }

// Continues a CRC: crc32c_extend(crc32c(a), b) == crc32c(a + b). crc32c_extend(0, ...) is
// crc32c(...).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// TFRecord's masked CRC: storing the CRC of data that itself contains CRCs is weak, so
// TensorFlow rotates and offsets it. mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
inline uint32_t crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline uint32_t crc32c_unmask(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

namespace crc32c_internal {
// The two implementations behind crc32c_extend, exposed so tests can compare them.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
// Requires crc32c_hardware_available(); throws strata::Error otherwise.
uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n);
bool crc32c_hardware_available();
}  // namespace crc32c_internal

}  // namespace strata::train
