// CPU kernels of the fused optimizer updates (SGD, Adam/AdamW) and of AllFinite.
//
// Written with tensor ops, an SGD or Adam step makes 3-16 passes over each variable and
// allocates as many temporaries; here the same arithmetic runs as one loop per variable,
// split across the intra-op pool. Each loop evaluates the op-by-op formula of core/ops.h
// in the same order and precision, with every scalar rounded to the compute type as a host
// scalar meeting a tensor is (the build does not contract a*b+c into FMAs), so
// float32/float64 results are bitwise those of the ops — except that std::sqrt is exact
// where Eigen's float32 sqrt packet (the Sqrt op) is rsqrt plus one Newton step.
// float16/bfloat16 compute in float32 and round once per stored value.
//
// Updates: in = {grad} (contiguous), out = the in-place targets {param[, slots...]}
// (contiguous, distinct), all of one dtype and shape — the front-end guarantees it.
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <strata/core/dispatch.h>
#include <strata/kernels/cpu/loops.h>

namespace strata::cpu_kernels {

namespace {

template <typename T>
void sgd_typed(const KernelArgs& k) {
  using C = compute_t<T>;
  const SgdAttrs& a = k.attrs.get<SgdAttrs>(k.op);
  T* p = k.out[0].data<T>();
  T* b = k.out.size() > 1 ? k.out[1].data<T>() : nullptr;
  const T* g = k.in[0].data<T>();
  const C wd = C(a.weight_decay), mom = C(a.momentum), rate = C(a.learning_rate);
  const bool decay = a.weight_decay != 0.0, nesterov = a.nesterov;
  parallel_for(k.out[0].numel(), 1.0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const C pi = convert<C>(p[i]);
      C d = convert<C>(g[i]);
      if (decay) d = d + pi * wd;
      if (b) {
        const C buf = convert<C>(b[i]) * mom + d;
        b[i] = convert<T>(buf);
        d = nesterov ? d + buf * mom : buf;
      }
      p[i] = convert<T>(pi - d * rate);
    }
  });
}

// How Adam applies weight decay: not at all, added to the gradient (Adam's L2), or to the
// parameter before the step (AdamW's decoupled form).
enum class AdamDecay { None, L2, Decoupled };

template <typename T>
void adam_typed(const KernelArgs& k) {
  using C = compute_t<T>;
  const AdamAttrs& a = k.attrs.get<AdamAttrs>(k.op);
  T* p = k.out[0].data<T>();
  T* m = k.out[1].data<T>();
  T* v = k.out[2].data<T>();
  const T* gp = k.in[0].data<T>();
  // The scalars of the formula, computed in double as the op-by-op code computes its host
  // scalars, then rounded to C.
  const double lr = a.learning_rate, t = double(a.step);
  const C decay_factor = C(1.0 - lr * a.weight_decay), wd = C(a.weight_decay);
  const C b1 = C(a.beta1), c1 = C(1.0 - a.beta1), b2 = C(a.beta2), c2 = C(1.0 - a.beta2);
  const C bc2 = C(std::sqrt(1.0 - std::pow(a.beta2, t))), eps = C(a.epsilon);
  const C step = C(lr / (1.0 - std::pow(a.beta1, t)));
  // The weight-decay form is a template argument, so that the loop has no branch and
  // vectorises (with std::sqrt free of errno: core/CMakeLists.txt builds this file with
  // -fno-math-errno). Vector lanes round each element exactly as the scalar code does.
  auto update = [&](auto decay_form) {
    constexpr AdamDecay kDecay = decltype(decay_form)::value;
    parallel_for(k.out[0].numel(), 2.0, [&](int64_t begin, int64_t end) {
      T* __restrict pp = p;
      T* __restrict mp = m;
      T* __restrict vp = v;
      const T* __restrict gg = gp;
      for (int64_t i = begin; i < end; ++i) {
        C pi = convert<C>(pp[i]);
        C g = convert<C>(gg[i]);
        if constexpr (kDecay == AdamDecay::Decoupled) {
          pi = pi * decay_factor;
        } else if constexpr (kDecay == AdamDecay::L2) {
          g = g + pi * wd;
        }
        const C mi = convert<C>(mp[i]) * b1 + g * c1;
        const C vi = convert<C>(vp[i]) * b2 + g * g * c2;
        mp[i] = convert<T>(mi);
        vp[i] = convert<T>(vi);
        const C denom = std::sqrt(vi) / bc2 + eps;
        pp[i] = convert<T>(pi - (mi / denom) * step);
      }
    });
  };
  if (a.weight_decay == 0.0) {
    update(std::integral_constant<AdamDecay, AdamDecay::None>{});
  } else if (a.decoupled) {
    update(std::integral_constant<AdamDecay, AdamDecay::Decoupled>{});
  } else {
    update(std::integral_constant<AdamDecay, AdamDecay::L2>{});
  }
}

// Calls fn(T{}) for a floating parameter dtype T.
template <typename Fn>
void visit_float(const KernelArgs& k, Fn&& fn) {
  visit_dtype(k.out[0].dtype(), [&](auto tag) {
    if constexpr (std::is_floating_point_v<compute_t<decltype(tag)>>) {
      fn(tag);
    } else {
      fail(op_name(k.op), ": expected a floating-point parameter, got ", k.out[0].dtype());
    }
  });
}

void sgd_update_kernel(const KernelArgs& k) {
  visit_float(k, [&](auto tag) { sgd_typed<decltype(tag)>(k); });
}
void adam_update_kernel(const KernelArgs& k) {
  visit_float(k, [&](auto tag) { adam_typed<decltype(tag)>(k); });
}

// An element is not finite when its exponent bits are all ones (inf or NaN): a test on
// the bits, which cannot overflow (unlike a sum) and vectorises as integer work.
template <typename T> struct FloatBits;
template <> struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kExponent = 0x7f800000u;
};
template <> struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kExponent = 0x7ff0000000000000ull;
};
template <> struct FloatBits<Half> {
  using U = uint16_t;
  static constexpr U kExponent = 0x7c00u;
};
template <> struct FloatBits<BFloat16> {
  using U = uint16_t;
  static constexpr U kExponent = 0x7f80u;
};

template <typename T>
bool run_is_finite(const T* p, int64_t n, int64_t stride) {
  using U = typename FloatBits<T>::U;
  constexpr U kExp = FloatBits<T>::kExponent;
  static_assert(sizeof(U) == sizeof(T));
  unsigned bad = 0;
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) {
      U u;
      std::memcpy(&u, p + i, sizeof(U));
      bad |= unsigned((u & kExp) == kExp);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      U u;
      std::memcpy(&u, p + i * stride, sizeof(U));
      bad |= unsigned((u & kExp) == kExp);
    }
  }
  return bad == 0;
}

// in = the floating tensors to test (any strides), out = {0-d bool}.
void all_finite_kernel(const KernelArgs& k) {
  std::atomic<bool> finite{true};
  for (const Tensor& t : k.in) {
    if (!finite.load(std::memory_order_relaxed)) break;
    visit_dtype(t.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<compute_t<T>>) {
        const T* base = t.data<T>();
        const std::array<Strides, 1> strides{t.strides()};
        for_each_strided(t.shape(), strides, 0.25, [&](int64_t n, const std::array<int64_t, 1>& off,
                                                       const std::array<int64_t, 1>& inner) {
          // Blocks, so that a chunk stops soon after any chunk has found a bad value.
          constexpr int64_t kStep = 1 << 14;
          for (int64_t s = 0; s < n && finite.load(std::memory_order_relaxed); s += kStep) {
            const int64_t len = std::min(kStep, n - s);
            if (!run_is_finite(base + off[0] + s * inner[0], len, inner[0])) {
              finite.store(false, std::memory_order_relaxed);
            }
          }
        });
      }
    });
  }
  *k.out[0].data<bool>() = finite.load();
}

}  // namespace

void register_optimizer_kernels() {
  register_kernel(OpId::SgdUpdate, DeviceType::CPU, sgd_update_kernel);
  register_kernel(OpId::AdamUpdate, DeviceType::CPU, adam_update_kernel);
  register_kernel(OpId::AllFinite, DeviceType::CPU, all_finite_kernel);
}

}  // namespace strata::cpu_kernels
