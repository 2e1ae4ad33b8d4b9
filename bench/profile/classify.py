#!/usr/bin/env python3
# Groups the samples of a `perf record` profile of strata-step-profile into op classes
# (bench/README.md "Training-step profile"): bench/profile/classify.py perf.data
# Symbols are matched by name, first rule first; what matches none is "other".
import re, subprocess, sys
rules = [
  ("GEMM: kernel", r"sgemm_kernel|dgemm_kernel"),
  ("GEMM: packing", r"gemm_[io][nt]copy"),
  ("GEMM: zeroing C (beta=0)", r"gemm_beta"),
  ("conv: im2col", r"im2col"),
  ("conv: col2im / input-grad glue", r"conv_backprop_input"),
  ("conv: filter-grad glue", r"conv_backprop_filter"),
  ("max_pool2d_grad", r"max_pool_grad"),
  ("max_pool2d", r"max_pool<"),
  ("relu grad: where", r"where_kernel"),
  ("relu grad: greater (mask)", r"binary_loop<float, bool"),
  ("relu", r"numeric_unary<float>.*#4|Rounding\)0, strata::cpu_kernels::\(anonymous namespace\)::numeric_unary"),
  ("bias add / other binary", r"scalar_sum_op|binary_loop<float, float"),
  ("bias grad: column sums", r"reduce_typed"),
  ("SGD update", r"sgd_typed"),
  ("softmax / xent", r"xent_kernel|softmax"),
  ("memset", r"memset"),
  ("memcpy", r"memcpy|memmove"),
  ("malloc/free", r"malloc|_int_free|cfree|free@|aligned_alloc|_mid_memalign|sysmalloc|systrim"),
  ("random init (setup)", r"random_kernel"),
  ("kernel (page faults, scheduling)", r"^\[k\]"),
]
out = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--sort", "sym", "--stdio"],
                     capture_output=True, text=True).stdout
acc = {}
for line in out.splitlines():
    m = re.match(r"\s+([\d.]+)%\s+(\[.\].*)$", line)
    if not m: continue
    pct, sym = float(m.group(1)), m.group(2)
    name = "other"
    for n, r in rules:
        if re.search(r, sym if r.startswith("^") else sym[4:]):
            name = n; break
    acc[name] = acc.get(name, 0) + pct
for n, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"{v:6.1f}%  {n}")
