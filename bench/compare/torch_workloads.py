#!/usr/bin/env python3
"""The strata-bench workloads in PyTorch, for a same-machine comparison.

Prints one JSON object: MLP 784-512-512-10 (batch 128) and the MNIST CNN (batch 64)
training steps/s with SGD, torch.mm 1024^3 GFLOP/s and the eager overhead of a 1-element
add, at the thread count given by --threads. With --compile (PyTorch 2.x), also the two
models under torch.compile (mlp_compiled_steps_per_s, cnn_compiled_steps_per_s); where
compilation fails on this machine, compile_error says why and the figures are left out. Run it with OMP_WAIT_POLICY=PASSIVE (PyTorch's
best setting on these machines, see ../shared/PLATFORM.md); bench/compare/run.sh does.
"""
import argparse
import copy
import json
import statistics
import time

import torch


def timed(fn, reps, inner=1):
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def train_steps_per_second(model, x, y, steps, reps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()

    def run():
        for _ in range(steps):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

    return steps / timed(run, reps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--compile", action="store_true", help="also time the models under torch.compile")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    reps = 2 if a.quick else 5
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                              torch.nn.ReLU(), torch.nn.Linear(512, 10))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(12 * 12 * 64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    out = {"threads": a.threads, "torch": torch.__version__}
    out["mlp_steps_per_s"] = train_steps_per_second(
        mlp, torch.randn(128, 784), torch.randint(0, 10, (128,)), 5 if a.quick else 50, reps)
    out["cnn_steps_per_s"] = train_steps_per_second(
        cnn, torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)), 2 if a.quick else 10, reps)
    if a.compile:
        # Fresh models: compiling wraps the module; the eager figures above stay eager.
        try:
            for key, model, shape, batch, steps in (
                    ("mlp", mlp, (128, 784), 128, 5 if a.quick else 50),
                    ("cnn", cnn, (64, 1, 28, 28), 64, 2 if a.quick else 10)):
                compiled = torch.compile(copy.deepcopy(model))
                out[f"{key}_compiled_steps_per_s"] = train_steps_per_second(
                    compiled, torch.randn(*shape), torch.randint(0, 10, (batch,)), steps, reps)
        except Exception as e:  # noqa: BLE001 - any compiler failure: report it, keep the eager figures
            out["compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    n = 1024
    ma, mb = torch.randn(n, n), torch.randn(n, n)
    out["mm_1024_gflops"] = 2 * n ** 3 / timed(lambda: torch.mm(ma, mb), reps) / 1e9
    s1, s2 = torch.ones(1), torch.ones(1)
    out["eager_add_us"] = timed(lambda: s1 + s2, reps, 2000 if a.quick else 100000) * 1e6
    w = torch.ones(1, requires_grad=True)
    out["eager_add_grad_us"] = timed(lambda: w + s2, reps, 2000 if a.quick else 100000) * 1e6
    print(json.dumps(out))


if __name__ == "__main__":
    main()
