"""TF2 ParameterServerStrategy training of a digit classifier.

Workers and parameter servers only serve (`tf.distribute.Server(...).join()`); the chief
is the coordinator: it places the variables on the PS, schedules steps on the workers
(each reads its own shard of scikit-learn's bundled digits), saves checkpoints to its log
dir, restores from them after a restart, and at the end writes `result.json`
and exports the model for serving: a SavedModel in `$TFKUBE_EXPORT_DIR/<global step>`
whose `serving_default` signature takes `x` (the 64 pixel values, scaled to [0, 1]) and
answers `probabilities` and `classes`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import tensorflow as tf


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    # The classic flags are passed to every replica; TF_CONFIG carries the same facts.
    p.add_argument("--ps_hosts", default="")
    p.add_argument("--worker_hosts", default="")
    p.add_argument("--chief_hosts", default="")
    p.add_argument("--job_name", default="")
    p.add_argument("--task_index", type=int, default=0)
    p.add_argument("--train_steps", type=int, default=600)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--checkpoint_steps", type=int, default=100)
    return p.parse_args()


def write_shards(data_dir: Path, num_shards: int) -> tuple[np.ndarray, np.ndarray]:
    """Write one training shard per worker into the shared data dir; return the test split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
    n_test = len(x) // 5
    data_dir.mkdir(parents=True, exist_ok=True)
    for shard in range(num_shards):
        path = data_dir / f"digits-train-{shard}-of-{num_shards}.npz"
        if not path.exists():
            tmp = data_dir / f".{path.name}.tmp.npz"
            np.savez(tmp, x=x[n_test:][shard::num_shards], y=y[n_test:][shard::num_shards])
            tmp.replace(path)
    return x[:n_test], y[:n_test]


def serve(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> None:
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"{resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    server.join()  # never returns: tfkube ends it when the chief is done


class DigitClassifier(tf.Module):
    """The trained model as it is served: local copies of the weights (the training
    variables live on the PS) and one signature."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        self.params = {name: tf.Variable(value, name=name) for name, value in weights.items()}

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        p = self.params
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, p["w1"]) + p["b1"]), p["w2"]) + p["b2"]
        return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, 1)}


def export_model(export_dir: Path, version: int, weights: dict[str, np.ndarray]) -> Path:
    """`export_dir/<version>`, written in a hidden folder first and renamed when complete,
    so a model server never sees half a model."""
    target = export_dir / str(version)
    if target.exists():  # a restarted chief exporting the same step again
        return target
    export_dir.mkdir(parents=True, exist_ok=True)
    partial = export_dir / f".partial-{version}-{os.getpid()}"
    model = DigitClassifier(weights)
    tf.saved_model.save(model, str(partial), signatures={"serving_default": model.serve})
    partial.rename(target)
    return target


def coordinate(
    args: argparse.Namespace, resolver: tf.distribute.cluster_resolver.ClusterResolver
) -> None:
    data_dir, log_dir = Path(os.environ["TFKUBE_DATA_DIR"]), os.environ["TFKUBE_LOG_DIR"]
    num_workers = int(os.environ["TFKUBE_NUM_WORKERS"])
    test_x, test_y = write_shards(data_dir, num_workers)

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        init = tf.keras.initializers.GlorotUniform(seed=0)
        params = {
            "w1": tf.Variable(init([64, 64]), name="w1"),
            "b1": tf.Variable(tf.zeros([64]), name="b1"),
            "w2": tf.Variable(init([64, 10]), name="w2"),
            "b2": tf.Variable(tf.zeros([10]), name="b2"),
        }
        step = tf.Variable(0, dtype=tf.int64, name="global_step")

    checkpoint = tf.train.Checkpoint(step=step, **params)
    # The coordinator (this process) writes and reads every checkpoint file itself. By
    # default each variable's own device (the PS) writes its shard and the last one merges
    # them, which needs a folder the PS and the chief share; in a cluster a job without a
    # logs claim gives each pod its own.
    here = f"/job:{resolver.task_type}/replica:0/task:{resolver.task_id}/device:CPU:0"
    io = tf.train.CheckpointOptions(experimental_io_device=here)
    manager = tf.train.CheckpointManager(checkpoint, log_dir, max_to_keep=3)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint, options=io)
    print(f"tfkube-example: session ready at global_step={int(step.numpy())}", flush=True)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        shard = context.input_pipeline_id
        data = np.load(data_dir / f"digits-train-{shard}-of-{num_workers}.npz")
        return (
            tf.data.Dataset.from_tensor_slices((data["x"], data["y"]))
            .shuffle(1024, seed=shard)
            .repeat()
            .batch(args.batch_size)
        )

    iterator = iter(
        coordinator.create_per_worker_dataset(
            strategy.distribute_datasets_from_function(dataset_fn)
        )
    )

    def logits_of(x: tf.Tensor) -> tf.Tensor:
        hidden = tf.nn.relu(tf.matmul(x, params["w1"]) + params["b1"])
        return tf.matmul(hidden, params["w2"]) + params["b2"]

    @tf.function
    def train_step(it: tf.distribute.DistributedIterator) -> tf.Tensor:
        def step_fn(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits_of(x))
                )
            grads = tape.gradient(loss, list(params.values()))
            for var, grad in zip(params.values(), grads, strict=True):
                var.assign_sub(args.learning_rate * grad)
            step.assign_add(1)
            return loss

        x, y = next(it)
        return strategy.run(step_fn, args=(x, y))

    summaries = tf.summary.create_file_writer(log_dir)
    started, scheduled = time.time(), 0
    while int(step.numpy()) < args.train_steps:
        for _ in range(min(args.checkpoint_steps, args.train_steps - int(step.numpy()))):
            loss = coordinator.schedule(train_step, args=(iterator,))
            scheduled += 1
        coordinator.join()
        manager.save(checkpoint_number=int(step.numpy()), options=io)
        loss_value = float(loss.fetch())
        with summaries.as_default():
            tf.summary.scalar("loss", loss_value, step=int(step.numpy()))
        print(f"global_step={int(step.numpy())} loss={loss_value:.4f}", flush=True)
    elapsed = time.time() - started

    accuracy = float(
        tf.reduce_mean(tf.cast(tf.argmax(logits_of(test_x), 1) == test_y, tf.float32)).numpy()
    )
    with summaries.as_default():
        tf.summary.scalar("test_accuracy", accuracy, step=int(step.numpy()))
    summaries.flush()
    result = {
        "global_step": int(step.numpy()),
        "test_accuracy": round(accuracy, 4),
        "steps_per_second": round(scheduled / elapsed, 1),
        "workers": num_workers,
    }
    # The job's result for tfkube (status, list, the job page): written whole, then
    # renamed, so that nobody reads half of it (tfkube.contract.RESULT_FILE).
    Path(log_dir, "result.json.tmp").write_text(json.dumps(result))
    os.replace(Path(log_dir, "result.json.tmp"), Path(log_dir, "result.json"))
    print(f"tfkube-example: result {json.dumps(result)}", flush=True)
    export_dir = Path(os.environ.get("TFKUBE_EXPORT_DIR") or Path(log_dir, "export"))
    weights = {name: var.numpy() for name, var in params.items()}
    exported = export_model(export_dir, int(step.numpy()), weights)
    print(f"tfkube-example: exported the model to {exported}", flush=True)


def main() -> None:
    args = parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
    else:
        coordinate(args, resolver)


if __name__ == "__main__":
    main()
