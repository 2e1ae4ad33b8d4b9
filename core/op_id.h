// OpId: the one id under which an op's front-end, CPU kernel, CUDA kernel and gradient are
// registered. Ops are grouped by family; each family is one file in core/ops, kernels/cpu,
// kernels/cuda and autograd/.
#pragma once

#include <cstdint>

namespace strata {

// X(Id, "name", family)
#define STRATA_FOR_EACH_OP(X)                        \
  /* unary elementwise */                            \
  X(Neg, "neg", Unary)                               \
  X(Exp, "exp", Unary)                               \
  X(Log, "log", Unary)                               \
  X(Sqrt, "sqrt", Unary)                             \
  X(Rsqrt, "rsqrt", Unary)                           \
  X(Abs, "abs", Unary)                               \
  X(Square, "square", Unary)                         \
  X(Sin, "sin", Unary)                               \
  X(Cos, "cos", Unary)                               \
  X(Tanh, "tanh", Unary)                             \
  X(Sigmoid, "sigmoid", Unary)                       \
  X(Relu, "relu", Unary)                             \
  X(Softplus, "softplus", Unary)                     \
  X(Gelu, "gelu", Unary)                             \
  X(Erf, "erf", Unary)                               \
  X(Sign, "sign", Unary)                             \
  X(Reciprocal, "reciprocal", Unary)                 \
  X(Floor, "floor", Unary)                           \
  X(IsFinite, "is_finite", Unary)                    \
  X(LogicalNot, "logical_not", Unary)                \
  X(Cast, "cast", Unary)                             \
  X(Copy, "copy", Unary)                             \
  X(StopGradient, "stop_gradient", Unary)            \
  /* binary elementwise, broadcasting */             \
  X(Add, "add", Binary)                              \
  X(Sub, "sub", Binary)                              \
  X(Mul, "mul", Binary)                              \
  X(Div, "div", Binary)                              \
  X(Pow, "pow", Binary)                              \
  X(Maximum, "maximum", Binary)                      \
  X(Minimum, "minimum", Binary)                      \
  X(ReluGrad, "relu_grad", Binary)                   \
  X(Equal, "equal", Binary)                          \
  X(NotEqual, "not_equal", Binary)                   \
  X(Less, "less", Binary)                            \
  X(LessEqual, "less_equal", Binary)                 \
  X(Greater, "greater", Binary)                      \
  X(GreaterEqual, "greater_equal", Binary)           \
  X(LogicalAnd, "logical_and", Binary)               \
  X(LogicalOr, "logical_or", Binary)                 \
  X(Where, "where", Binary)                          \
  /* reductions */                                   \
  X(Sum, "sum", Reduce)                              \
  X(Max, "max", Reduce)                              \
  X(Min, "min", Reduce)                              \
  X(Prod, "prod", Reduce)                            \
  X(LogSumExp, "logsumexp", Reduce)                  \
  X(ArgMax, "argmax", Reduce)                        \
  X(ArgMin, "argmin", Reduce)                        \
  X(Cumsum, "cumsum", Reduce)                        \
  /* shape and indexing (views and copies) */        \
  X(Reshape, "reshape", Shape)                       \
  X(Permute, "transpose", Shape)                     \
  X(Slice, "slice", Shape)                           \
  X(BroadcastTo, "broadcast_to", Shape)              \
  X(Concat, "concat", Shape)                         \
  X(Pad, "pad", Shape)                               \
  X(Gather, "gather", Shape)                         \
  X(ScatterAdd, "scatter_add", Shape)                \
  X(OneHot, "one_hot", Shape)                        \
  /* linear algebra */                               \
  X(MatMul, "matmul", Linalg)                        \
  /* neural-network ops */                           \
  X(Softmax, "softmax", NN)                          \
  X(LogSoftmax, "log_softmax", NN)                   \
  X(SparseSoftmaxCrossEntropy, "sparse_softmax_cross_entropy", NN) \
  X(LayerNorm, "layer_norm", NN)                     \
  /* images, NHWC / HWIO */                          \
  X(Conv2D, "conv2d", Conv)                          \
  X(Conv2DBackpropInput, "conv2d_backprop_input", Conv)   \
  X(Conv2DBackpropFilter, "conv2d_backprop_filter", Conv) \
  X(MaxPool2D, "max_pool2d", Conv)                   \
  X(MaxPool2DGrad, "max_pool2d_grad", Conv)          \
  X(AvgPool2D, "avg_pool2d", Conv)                   \
  X(AvgPool2DGrad, "avg_pool2d_grad", Conv)          \
  /* creation: outputs only, scalars as attributes */ \
  X(Fill, "fill", Creation)                          \
  X(Arange, "arange", Creation)                      \
  X(Linspace, "linspace", Creation)                  \
  X(Eye, "eye", Creation)                            \
  /* random numbers (Philox, core/philox.h) */       \
  X(RandomUniform, "random_uniform", Random)         \
  X(RandomNormal, "random_normal", Random)           \
  X(RandomTruncatedNormal, "random_truncated_normal", Random) \
  X(RandomBernoulli, "random_bernoulli", Random)     \
  /* fused optimizer updates, in place on their inputs */ \
  X(SgdUpdate, "sgd_update", Optimizer)              \
  X(AdamUpdate, "adam_update", Optimizer)            \
  X(AllFinite, "all_finite", Optimizer)              \
  /* user-defined gradient (autograd::custom_gradient) */ \
  X(CustomGradient, "custom_gradient", Special)

enum class OpId : uint16_t {
#define STRATA_OP_ENUM(id, name, family) id,
  STRATA_FOR_EACH_OP(STRATA_OP_ENUM)
#undef STRATA_OP_ENUM
};

inline constexpr int kNumOps = 0
#define STRATA_OP_COUNT(id, name, family) +1
    STRATA_FOR_EACH_OP(STRATA_OP_COUNT)
#undef STRATA_OP_COUNT
    ;

const char* op_name(OpId id);
// Looks an op up by its name ("add", "conv2d", ...); returns false when unknown.
bool op_from_name(const char* name, OpId* out);

}  // namespace strata
