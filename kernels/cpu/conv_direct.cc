// The direct convolution's filter packing and CPU check (kernels/cpu/conv_direct.h); the
// kernel is in conv_direct_avx2.cc.
#include <strata/kernels/cpu/conv_direct.h>

namespace strata::cpu_kernels {

int64_t direct_conv_packed_floats(int64_t kh, int64_t kw, int64_t c, int64_t o) {
  const int64_t panels = (o + kDirectConvPanelWidth - 1) / kDirectConvPanelWidth;
  return panels * kh * kw * c * kDirectConvPanelWidth;
}

void pack_direct_conv_filter(const float* filter, int64_t kh, int64_t kw, int64_t c, int64_t o,
                             bool for_input_gradient, float* packed) {
  // The packed convolution's taps and channels: the input gradient's reads o channels and
  // writes c.
  const int64_t in_c = for_input_gradient ? o : c, out_c = for_input_gradient ? c : o;
  const int64_t taps = kh * kw, rows = taps * in_c;
  const int64_t panels = (out_c + kDirectConvPanelWidth - 1) / kDirectConvPanelWidth;
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = packed + p * rows * kDirectConvPanelWidth;
    for (int64_t tap = 0; tap < taps; ++tap) {
      // The tap of the original filter this packed tap reads: flipped for the gradient.
      const int64_t src_tap = for_input_gradient ? taps - 1 - tap : tap;
      for (int64_t i = 0; i < in_c; ++i) {
        float* row = panel + (tap * in_c + i) * kDirectConvPanelWidth;
        for (int64_t l = 0; l < kDirectConvPanelWidth; ++l) {
          const int64_t j = p * kDirectConvPanelWidth + l;
          if (j >= out_c) {
            row[l] = 0.0f;
          } else if (for_input_gradient) {
            row[l] = filter[(src_tap * c + j) * o + i];  // w[tap'][j as input][i as output]
          } else {
            row[l] = filter[(src_tap * c + i) * o + j];
          }
        }
      }
    }
  }
}

int64_t direct_conv_filter_grad_tiles(int64_t kh, int64_t kw, int64_t c, int64_t o) {
  const int64_t rows = kh * kw * c;
  return (rows + kDirectConvGradRows - 1) / kDirectConvGradRows *
         ((o + kDirectConvPanelWidth - 1) / kDirectConvPanelWidth);
}

namespace {

bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool usable = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return usable;
#else
  return false;
#endif
}

}  // namespace

DirectConvFn direct_conv_kernel() { return cpu_has_avx2_fma() ? detail::direct_conv_avx2() : nullptr; }

DirectConvFilterGradFn direct_conv_filter_grad_kernel() {
  return cpu_has_avx2_fma() ? detail::direct_conv_filter_grad_avx2() : nullptr;
}

}  // namespace strata::cpu_kernels
