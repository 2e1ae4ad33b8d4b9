#include <strata/train/crc32c.h>

#include <array>
#include <cstring>

#include <strata/core/error.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define STRATA_CRC32C_X86 1
#endif

namespace strata::train {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// kTables[k][b]: CRC of byte b followed by k zero bytes — the slice-by-8 tables.
constexpr std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  return t;
}
constexpr auto kTables = make_tables();

#if STRATA_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(uint32_t(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(uint32_t(c), *p++);
    --n;
  }
  return ~uint32_t(c);
}

bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

const bool kHardware =
#if STRATA_CRC32C_X86
    detect_sse42();
#else
    false;
#endif

}  // namespace

namespace crc32c_internal {

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;  // little-endian loads; strata only targets little-endian hosts
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^
        kTables[5][(lo >> 16) & 0xffu] ^ kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^
        kTables[2][(hi >> 8) & 0xffu] ^ kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
    --n;
  }
  return ~c;
}

bool crc32c_hardware_available() { return kHardware; }

uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t n) {
  STRATA_CHECK(kHardware, "crc32c: this CPU has no SSE4.2 crc32 instruction");
#if STRATA_CRC32C_X86
  return extend_sse42(crc, static_cast<const uint8_t*>(data), n);
#else
  return crc;
#endif
}

}  // namespace crc32c_internal

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
#if STRATA_CRC32C_X86
  if (kHardware) return extend_sse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return crc32c_internal::crc32c_extend_portable(crc, data, n);
}

uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

}  // namespace strata::train
