#!/usr/bin/env python3
"""Trajectory cross-check: strata's distributed training step against TensorFlow's.

The same MLP (ReLU between Dense layers, logits out), the same initial weights and the
same batches (generated here with NumPy and exchanged as safetensors files), trained N
steps under MirroredStrategy over 2 logical CPU devices in TensorFlow and in strata
(build/bin/strata-compare-trajectory, bench/compare/trajectory.cc), with SGD and with Adam.
Both run the seeds' custom loop: strategy.run of a step computing the per-example sparse
categorical cross-entropy from logits, compute_average_loss by the global batch,
tape.gradient, apply_gradients (which sums the replicas' gradients), strategy.reduce(SUM)
of the loss. Adam is Keras's (epsilon 1e-7 added to the uncorrected sqrt(v)); strata runs
optim::Adam with keras_epsilon = true.

Compared in float32: every step's loss, |strata - tf| / |tf|, and every final weight
tensor, max|strata - tf| / max|tf| (norm-wise: an element near zero carries no relative
meaning). Both must be within --tolerance (1e-5). Prints a table; exit status 1 when a
figure is out of tolerance.

Run with the comparison environment (scripts/compare-env.sh):
    .venv-compare/bin/python bench/compare/tf_trajectory.py [--steps 30] [--keras 2|3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_problem(steps, global_batch, sizes, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
        limit = np.sqrt(6.0 / (fan_in + fan_out))  # glorot_uniform, Keras's default
        weights[f"layer{i}/kernel"] = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
        weights[f"layer{i}/bias"] = rng.uniform(-0.1, 0.1, (fan_out,)).astype(np.float32)
    x = rng.standard_normal((steps, global_batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], (steps, global_batch)).astype(np.int64)
    return weights, x, y


def train_tf(weights, x, y, optimizer_name, lr, epsilon, replicas, keras_version, use_function):
    import numpy as np
    import tensorflow as tf

    if keras_version == 2:
        import tf_keras as keras
    else:
        import keras
    steps, global_batch, features = x.shape
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    layers = len(weights) // 2
    with strategy.scope():
        model = keras.Sequential([keras.Input((features,))] + [
            keras.layers.Dense(weights[f"layer{i}/kernel"].shape[1], activation="relu" if i < layers - 1 else None)
            for i in range(layers)])
        model.set_weights([weights[f"layer{i}/{kind}"] for i in range(layers) for kind in ("kernel", "bias")])
        if optimizer_name == "sgd":
            optimizer = keras.optimizers.SGD(learning_rate=lr)
        else:
            optimizer = keras.optimizers.Adam(learning_rate=lr, epsilon=epsilon)
        if keras_version == 3:
            # Keras 3 creates slots on the first apply, which fails inside a replicated
            # tf.function: create them here, in the strategy's scope.
            optimizer.build(model.trainable_variables)

    def replica_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(yb, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def train_step(batch):
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    if use_function:
        train_step = tf.function(train_step)
    ds = tf.data.Dataset.from_tensor_slices((x.reshape(-1, features), y.reshape(-1))).batch(global_batch)
    losses = [float(train_step(batch)) for batch in strategy.experimental_distribute_dataset(ds)]
    final = model.get_weights()
    out = {"loss": np.array(losses, dtype=np.float32)}
    for i in range(layers):
        out[f"layer{i}/kernel"], out[f"layer{i}/bias"] = final[2 * i], final[2 * i + 1]
    return out


def compare(strata, tf_out, tolerance):
    import numpy as np

    rows, worst = [], 0.0
    ls, lt = strata["loss"].astype(np.float64), tf_out["loss"].astype(np.float64)
    rel = np.abs(ls - lt) / np.abs(lt)
    worst = max(worst, float(rel.max()))
    rows.append(("loss, every step (max)", float(rel.max()), f"step {int(rel.argmax())}: strata {ls[rel.argmax()]:.9g}"
                 f" tf {lt[rel.argmax()]:.9g}"))
    for name in sorted(k for k in tf_out if k != "loss"):
        a, b = strata[name].astype(np.float64), tf_out[name].astype(np.float64)
        r = float(np.abs(a - b).max() / np.abs(b).max())
        worst = max(worst, r)
        rows.append((name, r, f"max |tf| {np.abs(b).max():.4g}"))
    return rows, worst <= tolerance, worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--global-batch", type=int, default=32)
    p.add_argument("--sizes", default="32,64,64,10", help="layer widths, input first")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--optimizers", default="sgd,adam")
    p.add_argument("--sgd-lr", type=float, default=0.1)
    p.add_argument("--adam-lr", type=float, default=1e-3)
    p.add_argument("--epsilon", type=float, default=1e-7, help="Adam's epsilon (Keras's default)")
    p.add_argument("--keras", type=int, choices=[2, 3], default=2,
                   help="2: tf-keras (Keras 2, tf.distribute's own optimizers); 3: Keras 3")
    p.add_argument("--eager", action="store_true", help="run TensorFlow's step without tf.function")
    p.add_argument("--pytorch-epsilon", action="store_true",
                   help="control: strata's Adam with PyTorch's epsilon placement (expected to disagree)")
    p.add_argument("--tolerance", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strata", type=Path, default=ROOT / os.environ.get("STRATA_BUILD_DIR", "build") / "bin"
                   / "strata-compare-trajectory")
    p.add_argument("--workdir", type=Path, help="keep the exchanged files here (default: a temporary folder)")
    p.add_argument("--json", type=Path, help="also write the results as JSON")
    a = p.parse_args()
    if not a.strata.exists():
        sys.exit(f"tf_trajectory: {a.strata} is missing (build the strata-compare-trajectory target)")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf
    from safetensors.numpy import load_file, save_file

    # 2 logical CPU devices, as strata's MirroredStrategy(replicas=2) has; one thread each.
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * a.replicas)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(a.replicas)

    sizes = [int(s) for s in a.sizes.split(",")]
    weights, x, y = make_problem(a.steps, a.global_batch, sizes, a.seed)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="tf-trajectory-"))
    work.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(work / "init.safetensors"))
    save_file({"x": x, "y": y}, str(work / "batches.safetensors"))

    results, all_ok = {}, True
    print(f"TensorFlow {tf.__version__}, Keras {a.keras}, {'eager' if a.eager else 'tf.function'}; "
          f"MLP {a.sizes}, global batch {a.global_batch} over {a.replicas} replicas, {a.steps} steps, "
          f"tolerance {a.tolerance:g}")
    for opt in a.optimizers.split(","):
        lr = a.sgd_lr if opt == "sgd" else a.adam_lr
        out_file = work / f"strata-{opt}.safetensors"
        cmd = [str(a.strata), "--init", str(work / "init.safetensors"), "--batches", str(work / "batches.safetensors"),
               "--optimizer", opt, "--learning-rate", repr(lr), "--epsilon", repr(a.epsilon),
               "--replicas", str(a.replicas), "--out", str(out_file)] + (["--pytorch-epsilon"] if a.pytorch_epsilon else [])
        env = dict(os.environ, STRATA_NUM_THREADS="1")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        if r.returncode != 0:
            sys.exit(f"tf_trajectory: {' '.join(cmd)} failed:\n{r.stderr}")
        strata = load_file(str(out_file))
        tf_out = train_tf(weights, x, y, opt, lr, a.epsilon, a.replicas, a.keras, not a.eager)
        save_file(tf_out, str(work / f"tf-{opt}.safetensors"))
        rows, ok, worst = compare(strata, tf_out, a.tolerance)
        all_ok &= ok
        print(f"\n{opt} (lr {lr:g}): {'agree' if ok else 'DISAGREE'}, worst relative difference {worst:.3g}")
        for name, r_, note in rows:
            print(f"  {name:28s} {r_:10.3g}  {note}")
        print(f"  losses: strata {strata['loss'][0]:.6f} -> {strata['loss'][-1]:.6f}, "
              f"tf {tf_out['loss'][0]:.6f} -> {tf_out['loss'][-1]:.6f}")
        results[opt] = {"ok": ok, "worst_relative": worst, "rows": [{"name": n, "relative": v} for n, v, _ in rows],
                        "strata_loss": strata["loss"].tolist(), "tf_loss": tf_out["loss"].tolist()}
    if a.json:
        a.json.write_text(json.dumps({"tensorflow": tf.__version__, "keras": a.keras, "eager": a.eager,
                                      "tolerance": a.tolerance, "results": results}, indent=1))
    print(f"\nfiles in {work}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
