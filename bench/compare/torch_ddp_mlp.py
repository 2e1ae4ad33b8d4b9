#!/usr/bin/env python3
"""PyTorch across processes on this machine, for strata's multi-worker figures.

Starts --workers processes (default 2) on 127.0.0.1 with torch.distributed's gloo backend,
one intra-op thread each and OMP_WAIT_POLICY=PASSIVE (PyTorch's best setting on these
machines, see ../shared/PLATFORM.md), and prints one JSON object:
  - ddp_mlp_samples_per_s: DistributedDataParallel training of the MLP 784-512-512-10
    with SGD, batch 64 per worker (samples/s over all workers; median of repetitions);
  - allreduce_busbw_gbps: torch.distributed.all_reduce of float32 at 1 MB and 64 MB,
    busbw = algbw x 2(n-1)/n as nccl-tests defines it (GB/s = 1e9 B/s), each repetition
    timed as the slowest rank's mean per call, median of repetitions.
Every wait is bounded: the workers' process group times out, and the parent kills them
all when one fails or the whole run exceeds --timeout.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(a):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.workers,
                            timeout=datetime.timedelta(seconds=60))
    n = a.workers
    reps = 3 if a.quick else 7

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    out = {"workers": n, "threads_per_worker": torch.get_num_threads(), "torch": torch.__version__}

    # DDP training: the same model and batch as strata's MLP multi-worker run.
    batch = 64
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(784, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU(),
        torch.nn.Linear(a.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

    def steps(k):
        for _ in range(k):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

    steps(5)  # warm-up: DDP builds its buckets on the first steps
    k = 5 if a.quick else 50
    samples = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        steps(k)
        samples.append(n * batch * k / slowest(time.perf_counter() - t0))
    out["ddp_mlp_samples_per_s"] = statistics.median(samples)
    out["ddp_mlp_samples_per_s_min"] = min(samples)
    out["ddp_mlp_samples_per_s_max"] = max(samples)

    busbw = {}
    for nbytes in (1 << 20, 64 << 20):
        buf = torch.zeros(nbytes // 4)  # zeros stay zeros under sum
        dist.all_reduce(buf)
        dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        once = slowest(time.perf_counter() - t0)
        inner = torch.tensor([max(1, min(10000, int((0.02 if a.quick else 0.1) / max(once, 1e-7))))])
        dist.broadcast(inner, 0)
        inner = int(inner.item())
        times = []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(inner):
                dist.all_reduce(buf)
            times.append(slowest((time.perf_counter() - t0) / inner))
        t = statistics.median(times)
        busbw[str(nbytes)] = nbytes / t / 1e9 * 2 * (n - 1) / n
    out["allreduce_busbw_gbps"] = busbw
    dist.barrier()
    if a.rank == 0:
        print(json.dumps(out), flush=True)
    # Leave without tearing the process group down: PyTorch 1.13's gloo teardown sometimes
    # spins forever in a peer whose partner exited first (seen here: a loop thread busy on
    # the closed socket, the main thread blocked), and there is nothing left to flush.
    sys.stderr.flush()
    os._exit(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--hidden", type=int, default=512, help="hidden width (strata-train's --model mlp uses 256)")
    p.add_argument("--timeout", type=float, default=300, help="seconds before every worker is killed")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # set in the workers
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank >= 0:
        worker(a)
        return
    port = free_port()
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1")
    args = [sys.executable, os.path.abspath(__file__), "--workers", str(a.workers), "--port", str(port),
            "--hidden", str(a.hidden)]
    if a.quick:
        args.append("--quick")
    with tempfile.TemporaryFile() as out:
        # Rank 0 prints the result; the others' output passes through. Every worker is
        # polled, so one that fails stops the rest at once instead of leaving them to wait
        # for their peer until the process group's timeout.
        procs = [subprocess.Popen(args + ["--rank", str(r)], env=env, stdout=out if r == 0 else None)
                 for r in range(a.workers)]
        deadline = time.monotonic() + a.timeout
        try:
            while any(proc.poll() is None for proc in procs):
                for r, proc in enumerate(procs):
                    if proc.poll() not in (None, 0):
                        sys.exit(f"torch_ddp_mlp: worker {r} exited with status {proc.returncode}; stopped the others")
                if time.monotonic() > deadline:
                    sys.exit(f"torch_ddp_mlp: workers still running after {a.timeout} s; killed")
                time.sleep(0.05)
            for r, proc in enumerate(procs):
                if proc.returncode != 0:
                    sys.exit(f"torch_ddp_mlp: worker {r} exited with status {proc.returncode}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        out.seek(0)
        sys.stdout.write(out.read().decode())


if __name__ == "__main__":
    main()
