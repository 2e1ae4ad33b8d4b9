#!/usr/bin/env python3
"""strata-bench's training workloads in TensorFlow 2.21, for a same-machine comparison.

Prints one JSON object of steps/s at the thread count given by --threads (TensorFlow's
intra-op and inter-op pools both sized to it): the MLP 784-512-512-10 (batch 128) and the
MNIST CNN (batch 64, NHWC, as strata's) trained with SGD(0.01) on one fixed batch, as
strata-bench's train suite does, with
  - the seeds' custom loop (strategy.run of a step with compute_average_loss and
    apply_gradients, strategy.reduce of the loss) under the default strategy and under
    MirroredStrategy over 2 logical CPU devices, each with and without tf.function
    (keys <model>_<default|mirrored2>_<function|eager>);
  - Keras fit under MirroredStrategy(2) (<model>_fit_mirrored2), timed over an epoch of
    the same batch repeated, after a warm-up epoch.
Keras: tf-keras (Keras 2) by default, --keras 3 for Keras 3. Run with the comparison
environment (scripts/compare-env.sh); bench/compare/run.sh does.
"""
import argparse
import json
import os
import statistics
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--keras", type=int, choices=[2, 3], default=2)
    p.add_argument("--models", default="mlp,cnn")
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if a.keras == 2:
        import tf_keras as keras
    else:
        import keras
    tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                               [tf.config.LogicalDeviceConfiguration()] * 2)
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    tf.random.set_seed(0)
    reps = 2 if a.quick else 5

    def make_model(cnn):
        if not cnn:
            return keras.Sequential([keras.Input((784,)), keras.layers.Dense(512, activation="relu"),
                                     keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])
        return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
                                 keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.MaxPooling2D(2),
                                 keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"),
                                 keras.layers.Dense(10)])

    def data(cnn, batch):
        x = tf.random.normal((batch, 28, 28, 1) if cnn else (batch, 784))
        y = tf.random.uniform((batch,), 0, 10, dtype=tf.int64)
        return x, y

    def custom_loop(strategy, cnn, batch, steps, use_function):
        with strategy.scope():
            model = make_model(cnn)
            opt = keras.optimizers.SGD(0.01)
            if a.keras == 3:
                opt.build(model.trainable_variables)  # Keras 3: no slot creation inside tf.function
        x, y = data(cnn, batch)
        dist_batch = next(iter(strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))))

        def replica_step(xb, yb):
            with tf.GradientTape() as tape:
                per_example = keras.losses.sparse_categorical_crossentropy(yb, model(xb, training=True),
                                                                           from_logits=True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        def step(b):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=b), axis=None)

        if use_function:
            step = tf.function(step)

        def run(k):
            for _ in range(k):
                loss = step(dist_batch)
            loss.numpy()  # waits for the last step

        run(2)  # warm-up: tracing, variable creation
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            run(steps)
            samples.append(steps / (time.perf_counter() - t0))
        return statistics.median(samples)

    def keras_fit(strategy, cnn, batch, steps):
        with strategy.scope():
            model = make_model(cnn)
            model.compile(optimizer=keras.optimizers.SGD(0.01),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = data(cnn, batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat(steps)
        model.fit(ds, epochs=1, verbose=0)  # warm-up epoch
        samples = []
        for _ in range(reps):
            t0 = time.perf_counter()
            model.fit(ds, epochs=1, verbose=0)
            samples.append(steps / (time.perf_counter() - t0))
        return statistics.median(samples)

    out = {"threads": a.threads, "tensorflow": tf.__version__, "keras": keras.__version__}
    default = tf.distribute.get_strategy()
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    for model in a.models.split(","):
        cnn = model == "cnn"
        batch = 64 if cnn else 128
        steps = 2 if a.quick else (10 if cnn else 50)
        for sname, strategy in (("default", default), ("mirrored2", mirrored)):
            for use_function in (True, False):
                key = f"{model}_{sname}_{'function' if use_function else 'eager'}"
                out[key] = custom_loop(strategy, cnn, batch, steps, use_function)
        out[f"{model}_fit_mirrored2"] = keras_fit(mirrored, cnn, batch, steps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
