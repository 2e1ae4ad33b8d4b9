// Front-ends of the fused optimizer updates and of all_finite (family "Optimizer").
//
// The updates write their targets in place: the kernel receives param and the slots as its
// outputs (it reads and writes them) and the gradient as its only input. They are not
// recorded: an update is not a differentiable function of the variables it overwrites.
#include <sstream>
#include <string>

#include <strata/core/op_common.h>

namespace strata {

namespace {

std::string describe(const Tensor& t) {
  std::ostringstream os;
  os << t.dtype() << shape_str(t.shape()) << " on " << t.device();
  return os.str();
}

// Checks the arguments of an update. `grad` comes back on the targets' device (a host
// scalar gradient of a rank-0 parameter on a GPU is moved) and safe to read while the
// targets are written (contiguous, and a copy when it shares storage with one).
void check_update(const char* op, const Tensor& param, Tensor& grad,
                  std::initializer_list<std::pair<const char*, const Tensor*>> slots) {
  STRATA_CHECK(param.defined(), op, ": the parameter is an undefined tensor");
  STRATA_CHECK(grad.defined(), op, ": the gradient is an undefined tensor (parameter ",
               describe(param), ")");
  STRATA_CHECK(is_floating(param.dtype()), op, ": expected a float32, float64, float16 or "
               "bfloat16 parameter, got ", describe(param));
  STRATA_CHECK(grad.dtype() == param.dtype() && grad.shape() == param.shape(), op,
               ": the gradient ", describe(grad), " does not match the parameter ",
               describe(param), " (expected the same shape and dtype; cast the gradient first)");
  std::vector<const Tensor*> targets{&param};
  std::vector<const char*> names{"parameter"};
  for (const auto& [name, slot] : slots) {
    STRATA_CHECK(slot->defined(), op, ": the ", name, " slot is an undefined tensor");
    STRATA_CHECK(slot->dtype() == param.dtype() && slot->shape() == param.shape(), op, ": the ",
                 name, " slot ", describe(*slot), " does not match the parameter ",
                 describe(param), " (expected the same shape and dtype)");
    targets.push_back(slot);
    names.push_back(name);
  }
  std::vector<const Tensor*> all = targets;
  all.push_back(&grad);
  const Device device = detail::op_device(op, all.data(), all.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const Tensor& t = *targets[i];
    // Updated in place, so each target must live in the op's memory (a host scalar may not).
    if (!same_memory(t.device(), device)) detail::device_mismatch(op, device, t.device());
    STRATA_CHECK(t.is_contiguous(), op, ": the ", names[i], " ", describe(t),
                 " is not contiguous (it is updated in place; pass the variable's own tensor)");
    for (size_t j = 0; j < i; ++j) {
      STRATA_CHECK(!t.shares_storage(*targets[j]), op, ": the ", names[i], " ", describe(t),
                   " shares storage with the ", names[j], " ", describe(*targets[j]),
                   " (each is updated in place and must have its own memory)");
    }
  }
  if (!same_memory(grad.device(), device)) grad = grad.to(device);
  bool aliases = false;
  for (const Tensor* t : targets) aliases = aliases || grad.shares_storage(*t);
  grad = aliases ? grad.clone() : grad.contiguous();
}

// The targets are written in place: a tape that saved one of them must know (Storage::version).
void bump_versions(std::span<const Tensor> targets) {
  for (const Tensor& t : targets)
    if (t.storage()) t.storage()->bump_version();
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum,
                const SgdAttrs& attrs) {
  const char* op = op_name(OpId::SgdUpdate);
  STRATA_CHECK(momentum.defined() || (attrs.momentum == 0.0 && !attrs.nesterov), op,
               ": momentum ", attrs.momentum, attrs.nesterov ? " (Nesterov)" : "",
               " needs a momentum buffer, got an undefined tensor");
  Tensor g = grad;
  if (momentum.defined()) {
    check_update(op, param, g, {{"momentum", &momentum}});
  } else {
    check_update(op, param, g, {});
  }
  if (param.numel() == 0) return;
  const Tensor in[1] = {g};
  const Tensor out[2] = {param, momentum};  // the buffer only when there is one
  bump_versions(std::span<const Tensor>(out, momentum.defined() ? 2 : 1));
  run_kernel(OpId::SgdUpdate, OpAttrs(attrs), in,
             std::span<const Tensor>(out, momentum.defined() ? 2 : 1));
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamAttrs& attrs) {
  const char* op = op_name(OpId::AdamUpdate);
  STRATA_CHECK(attrs.step >= 1, op, ": step must be >= 1 (it is 1-based), got ", attrs.step);
  Tensor g = grad;
  check_update(op, param, g, {{"m", &m}, {"v", &v}});
  if (param.numel() == 0) return;
  const Tensor in[1] = {g};
  const Tensor out[3] = {param, m, v};
  bump_versions(out);
  run_kernel(OpId::AdamUpdate, OpAttrs(attrs), in, out);
}

Tensor all_finite(const std::vector<Tensor>& tensors) {
  const char* op = op_name(OpId::AllFinite);
  std::vector<Tensor> defined;
  for (const Tensor& t : tensors)
    if (t.defined()) defined.push_back(t);
  const Device device = defined.empty() ? current_device() : detail::op_device(op, defined);
  // Only floating tensors can hold a non-finite value; host scalars join the op's device
  // so that every backend's kernel reads its inputs from one memory.
  std::vector<Tensor> in;
  for (const Tensor& t : defined) {
    if (!is_floating(t.dtype()) || t.numel() == 0) continue;
    in.push_back(same_memory(t.device(), device) ? t : t.to(device));
  }
  const Tensor out[1] = {Tensor::empty({}, kBool, device)};
  detail::compute(OpId::AllFinite, OpAttrs{}, in, out);
  return out[0];
}

}  // namespace strata
