#!/usr/bin/env python3
"""strata-bench's gpu suite in PyTorch, on the same GPU in the same call.

Times the workloads of bench/suite_gpu.cc under the same names, so that
scripts/gpu_check_report.py can put each strata figure next to PyTorch's:
  - matmul f32 (TF32 off), tf32 (float32 with TF32 on) and bf16, 4096^3 and 8192^3
    (TFLOP/s; --quick: 1024^3);
  - add of 256M float32 (GB/s, 12 bytes per element) and a device-to-device copy of the
    same size (GB/s, 8 bytes per element; --quick: 16M);
  - host <-> GPU copies (pinned and pageable uploads, pinned downloads), and steps/s of
    ~5 ms of products with the next batch of a DataLoader (pin_memory, non_blocking);
  - training steps/s of the MLP 784-512-512-10 (batch 128) and the MNIST CNN (batch 64)
    with SGD(lr=0.01) on random data, as bench/compare/torch_workloads.py does on the CPU
    (the CNN in PyTorch's NCHW layout; strata's is NHWC).
Timing: CUDA events around several calls after a warm-up, median of the repetitions.
Inputs are random normal. Writes one JSON object (to --json, else stdout); a workload that
fails carries "error" instead of a value.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args()

    out = {"device": a.device, "results": []}
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - report, don't crash
        out["error"] = "cannot import torch: %s" % e
        emit(out, a.json)
        return 1
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        out["error"] = "torch.cuda.is_available() is False"
        emit(out, a.json)
        return 1
    dev = torch.device(a.device)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    out["gpu"] = props.name
    out["multiprocessors"] = props.multi_processor_count
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        out["cudnn"] = None
    try:
        out["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # noqa: BLE001
        out["nccl"] = None
    torch.manual_seed(0)
    reps = 2 if a.quick else 7

    def timed(fn, inner, reps=reps):
        """Per-call seconds: median over reps of `inner` calls between two CUDA events."""
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        return statistics.median(samples), (max(samples) - min(samples)) / statistics.median(samples)

    def record(name, unit, fn, note=""):
        t0 = time.perf_counter()
        try:
            value, spread = fn()
            row = {"name": name, "value": value, "unit": unit, "spread": spread}
        except Exception as e:  # noqa: BLE001
            row = {"name": name, "value": 0.0, "unit": unit, "error": "%s: %s" % (type(e).__name__, e)}
        if note:
            row["note"] = note
        row["seconds"] = round(time.perf_counter() - t0, 2)
        out["results"].append(row)
        print("%-58s %12.4g %s%s" % (name, row["value"], unit, ("  ERROR " + row["error"]) if "error" in row else ""),
              file=sys.stderr, flush=True)

    for n in ([1024] if a.quick else [4096, 8192]):
        inner = 5 if n >= 8192 else 20
        flops = 2.0 * n ** 3

        def mm(dtype, tf32, n=n, inner=inner, flops=flops):
            def run():
                set_tf32(torch, tf32)
                try:
                    x = torch.randn(n, n, device=dev).to(dtype)
                    y = torch.randn(n, n, device=dev).to(dtype)
                    t, spread = timed(lambda: torch.mm(x, y), inner)
                finally:
                    set_tf32(torch, False)
                return flops / t / 1e12, spread
            return run

        record("matmul f32 %d^3" % n, "TFLOP/s", mm(torch.float32, False), "TF32 off")
        record("matmul tf32 %d^3" % n, "TFLOP/s", mm(torch.float32, True), "float32 with TF32 on")
        record("matmul bf16 %d^3" % n, "TFLOP/s", mm(torch.bfloat16, False))

    n = (1 << 24) if a.quick else (256 << 20)
    size = "%dM" % (n >> 20)

    def add():
        x = torch.randn(n, device=dev)
        y = torch.randn(n, device=dev)
        t, spread = timed(lambda: x + y, 20)
        return 12.0 * n / t / 1e9, spread

    def copy():
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        t, spread = timed(lambda: y.copy_(x), 20)
        return 8.0 * n / t / 1e9, spread

    record("add f32 " + size, "GB/s", add)
    record("copy d2d f32 " + size, "GB/s", copy, "Tensor.copy_, read + write bytes")

    # Host <-> GPU copies, as strata-bench gpu's add_host_copies: non-blocking to() from a
    # pinned and from a pageable tensor, and into the host (PyTorch pins that output).
    hn = (1 << 22) if a.quick else (64 << 20)
    hsize = "%dM" % (hn >> 20)

    def host_copy(make_src, target):
        def run():
            src = make_src()
            t, spread = timed(lambda: src.to(target, non_blocking=True), 5)
            return 4.0 * hn / t / 1e9, spread
        return run

    record("upload f32 %s pinned" % hsize, "GB/s", host_copy(lambda: torch.rand(hn).pin_memory(), dev))
    record("upload f32 %s pageable" % hsize, "GB/s", host_copy(lambda: torch.rand(hn), dev))
    record("download f32 %s pinned" % hsize, "GB/s", host_copy(lambda: torch.rand(hn, device=dev), "cpu"))

    def input_fetch():
        # strata-bench gpu's add_input_fetch: ~5 ms of products per step and the next batch
        # of 64 images 3x128x128, through PyTorch's fast idiom (a DataLoader worker,
        # pin_memory, non_blocking upload).
        images = torch.randn(64 * 4, 3, 128, 128)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images), batch_size=64,
                                             num_workers=1, pin_memory=True, persistent_workers=True)

        def batches():
            while True:
                for (b,) in loader:
                    yield b

        it = batches()
        w = torch.randn(2048, 2048, device=dev)

        def step():
            for _ in range(16):
                torch.mm(w, w)
            next(it).to(dev, non_blocking=True).sum()

        t, spread = timed(step, 3 if a.quick else 40, 1 if a.quick else 5)
        return 1.0 / t, spread

    record("input fetch b64 3x128x128 behind ~5 ms of products, one_device(%s)" % a.device, "steps/s", input_fetch,
           "DataLoader(num_workers=1, pin_memory=True), non_blocking")

    def train(cnn):
        def run():
            torch.manual_seed(0)
            if cnn:
                model = torch.nn.Sequential(
                    torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),
                    torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(12 * 12 * 64, 128), torch.nn.ReLU(),
                    torch.nn.Linear(128, 10)).to(dev)
                x = torch.randn(64, 1, 28, 28, device=dev)
                y = torch.randint(0, 10, (64,), device=dev)
            else:
                model = torch.nn.Sequential(
                    torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                    torch.nn.Linear(512, 10)).to(dev)
                x = torch.randn(128, 784, device=dev)
                y = torch.randint(0, 10, (128,), device=dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            loss_fn = torch.nn.CrossEntropyLoss()
            steps = 2 if a.quick else (50 if cnn else 100)

            def step():
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()

            t, spread = timed(step, steps, 1 if a.quick else 5)
            return 1.0 / t, spread
        return run

    record("train MLP 784-512-512-10 b128 one_device(%s)" % a.device, "steps/s", train(False))
    record("train CNN b64 one_device(%s)" % a.device, "steps/s", train(True), "NCHW, cuDNN defaults")
    emit(out, a.json)
    return 1 if any("error" in r for r in out["results"]) else 0


def set_tf32(torch, on):
    """TF32 for float32 matmuls: the fp32_precision switch of recent PyTorch, else allow_tf32."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        m.fp32_precision = "tf32" if on else "ieee"
    else:
        m.allow_tf32 = on


def emit(out, path):
    if "error" in out:
        print("torch_gpu.py: " + out["error"], file=sys.stderr)
    text = json.dumps(out, indent=2)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
