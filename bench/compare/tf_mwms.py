#!/usr/bin/env python3
"""TensorFlow's MultiWorkerMirroredStrategy across processes on this machine.

Starts --workers processes (default 2) with TF_CONFIG naming free ports on 127.0.0.1, one
intra-op thread each, and prints one JSON object with mwms_mlp_samples_per_s: the seeds'
custom loop (strategy.run, compute_average_loss, apply_gradients, strategy.reduce) under
tf.function training the MLP 784-H-H-10 (--hidden, default 256: strata-train's MLP) with
SGD(0.01), --batch examples per worker (default 64), samples/s over all workers, each
repetition timed as the slowest worker's, median of repetitions. Every wait is bounded:
the parent kills the workers when one fails or the run exceeds --timeout.
Run with the comparison environment (scripts/compare-env.sh); bench/compare/run.sh does.
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


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def worker(a):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras as keras

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING, timeout_seconds=120))
    n = strategy.num_replicas_in_sync
    global_batch = a.batch * n
    with strategy.scope():
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(a.hidden, activation="relu"),
                                  keras.layers.Dense(a.hidden, activation="relu"), keras.layers.Dense(10)])
        opt = keras.optimizers.SGD(0.01)
    tf.random.set_seed(a.rank)
    x = tf.random.normal((global_batch, 784))
    y = tf.random.uniform((global_batch,), 0, 10, dtype=tf.int64)
    dist_batch = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch))))

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(yb, model(xb, training=True), from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step(b):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=b), axis=None)

    @tf.function
    def slowest(seconds):
        # tf.distribute.ReduceOp has no MAX: gather every worker's time, then take the largest.
        per_replica = strategy.run(lambda s: tf.reshape(s, [1]), args=(seconds,))
        return tf.reduce_max(strategy.gather(per_replica, axis=0))

    def run(k):
        for _ in range(k):
            loss = step(dist_batch)
        loss.numpy()

    run(5)  # warm-up: tracing and the collectives' first exchange
    k = 5 if a.quick else 50
    samples = []
    for _ in range(3 if a.quick else 7):
        t0 = time.perf_counter()
        run(k)
        samples.append(global_batch * k / float(slowest(tf.constant(time.perf_counter() - t0, tf.float64))))
    if a.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"workers": n, "threads_per_worker": 1, "tensorflow": tf.__version__,
                       "mwms_mlp_samples_per_s": statistics.median(samples),
                       "mwms_mlp_samples_per_s_min": min(samples), "mwms_mlp_samples_per_s_max": max(samples)}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=64, help="examples per worker")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank >= 0:
        worker(a)
        return 0
    ports = free_ports(a.workers)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        procs = []
        for rank in range(a.workers):
            env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}}))
            args = [sys.executable, __file__, "--rank", str(rank), "--out", out, "--hidden", str(a.hidden),
                    "--batch", str(a.batch)] + (["--quick"] if a.quick else [])
            procs.append(subprocess.Popen(args, env=env))
        deadline = time.monotonic() + a.timeout
        failed = None
        while any(q.poll() is None for q in procs) and failed is None:
            failed = next((r for r, q in enumerate(procs) if q.poll() not in (None, 0)), None)
            if time.monotonic() > deadline:
                failed = "timeout"
            time.sleep(0.2)
        failed = failed if failed is not None else next((r for r, q in enumerate(procs) if q.returncode != 0), None)
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
        if failed is not None:
            sys.exit(f"tf_mwms: worker {failed} failed" if failed != "timeout" else "tf_mwms: timed out")
        with open(out) as f:
            print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
