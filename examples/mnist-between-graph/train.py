"""Between-graph asynchronous training of a digit classifier with TF1-style APIs.

The PS holds the variables (`replica_device_setter`); each worker trains on its own shard
of scikit-learn's bundled 8x8 digits; worker 0 is the chief: it initializes or restores
the model from the shared log dir, writes checkpoints and TensorBoard summaries there,
and at the end evaluates on the held-out digits, writes `result.json` and exports the
model for serving: a SavedModel in `$TFKUBE_EXPORT_DIR/<global step>` whose
`serving_default` signature takes `x` (the 64 pixel values, scaled to [0, 1]) and answers
`probabilities` and `classes`.
The PS serves until the platform ends it (`server.join()` never returns).

Workers may be added or removed while it trains (`tfkube scale JOB --workers N`): a worker
gives the PS only the cluster its session needs (the PS and itself), so the PS serves a
worker it did not know at start. A worker started after a resize reads shard i of the
new size (`TFKUBE_SHARD_INDEX`/`TFKUBE_NUM_SHARDS`); the running ones keep theirs, so
shards may overlap for a while, which asynchronous SGD does not mind. A worker stopped
(SIGTERM: removed by a resize, or its job stopped) finishes the step it is in and leaves
between steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path

# SIGTERM is taken by a thread of its own (`on_stop`): blocked here, before TensorFlow
# starts any thread, so that every thread TensorFlow starts has it blocked too.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf1 = tf.compat.v1
STOPPING = threading.Event()
"""Set on SIGTERM: tfkube stops this replica (a worker removed by `tfkube scale`, a job
stopped or preempted)."""
STUCK_SECONDS = 2.0
"""How long a worker stopping gets to finish its step before it exits anyway (a step
waiting on a PS that is gone would never end)."""


def on_stop(at_once: bool) -> None:
    """On SIGTERM a worker finishes the step it is in and leaves between steps (the main
    loop sees `STOPPING`), exiting 143 as if the signal had ended it, after
    STUCK_SECONDS at the latest; a PS exits at once."""

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        STOPPING.set()
        if not at_once:
            time.sleep(STUCK_SECONDS)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=wait, name="on-sigterm", daemon=True).start()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--ps_hosts", required=True)
    p.add_argument("--worker_hosts", required=True)
    p.add_argument("--job_name", required=True, choices=["ps", "worker"])
    p.add_argument("--task_index", type=int, required=True)
    p.add_argument("--train_steps", type=int, default=1000)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--step_sleep", type=float, default=0.0, help="seconds between steps")
    p.add_argument("--checkpoint_steps", type=int, default=100)
    return p.parse_args()


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def write_progress(log_dir: str, step: int, total: int) -> None:
    """`$TFKUBE_LOG_DIR/progress.json`: how far training is, for the dashboard's progress
    bar and ETA (the platform's convention; written atomically)."""
    path = Path(log_dir, "progress.json")
    tmp = path.with_name(f".progress.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"step": step, "total": total}))
    tmp.replace(path)


def load_shard(data_dir: Path, shard: int, num_shards: int) -> tuple[np.ndarray, ...]:
    """This worker's shard of the training digits and the common test split.

    Shards are written into the shared data dir once (each worker writes only its own);
    the split is seeded so every replica agrees on it."""
    shard_file = data_dir / f"digits-train-{shard}-of-{num_shards}.npz"
    test_file = data_dir / "digits-test.npz"
    if not shard_file.exists() or not test_file.exists():
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        order = np.random.default_rng(0).permutation(len(x))
        x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int64)
        n_test = len(x) // 5
        data_dir.mkdir(parents=True, exist_ok=True)
        write_npz(test_file, x=x[:n_test], y=y[:n_test])
        train_x, train_y = x[n_test:], y[n_test:]
        write_npz(shard_file, x=train_x[shard::num_shards], y=train_y[shard::num_shards])
    train, test = np.load(shard_file), np.load(test_file)
    return train["x"], train["y"], test["x"], test["y"]


def dense(inputs: tf.Tensor, units: int, name: str) -> tf.Tensor:
    """A fully connected layer from plain variables (tf.compat.v1.layers needs Keras 2)."""
    fan_in = int(inputs.shape[-1])
    with tf1.variable_scope(name):
        w = tf1.get_variable(
            "kernel", [fan_in, units], initializer=tf1.glorot_uniform_initializer()
        )
        b = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
    return tf1.matmul(inputs, w) + b


def export_model(export_dir: Path, version: int, weights: dict[str, np.ndarray]) -> Path:
    """Write the trained weights as a TF1 SavedModel (tags `serve`, signature
    `serving_default`) to `export_dir/<version>`: built in a fresh graph of its own (the
    training graph's variables live on the PS), in a hidden folder first and renamed
    when complete, so a model server never sees half a model."""
    target = export_dir / str(version)
    if target.exists():  # a restarted chief exporting the same step again
        return target
    export_dir.mkdir(parents=True, exist_ok=True)
    partial = export_dir / f".partial-{version}-{os.getpid()}"
    graph = tf1.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        x = tf1.placeholder(tf.float32, [None, 64], name="x")
        params = {name: tf1.Variable(value, name=name) for name, value in weights.items()}
        hidden = tf.nn.relu(tf1.matmul(x, params["hidden/kernel"]) + params["hidden/bias"])
        logits = tf1.matmul(hidden, params["logits/kernel"]) + params["logits/bias"]
        sess.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(str(partial))
        builder.add_meta_graph_and_variables(
            sess,
            [tf1.saved_model.tag_constants.SERVING],
            signature_def_map={
                "serving_default": tf1.saved_model.predict_signature_def(
                    inputs={"x": x},
                    outputs={
                        "probabilities": tf.nn.softmax(logits),
                        "classes": tf1.argmax(logits, 1),
                    },
                )
            },
        )
        builder.save()
    partial.rename(target)
    return target


class WorkerSessionCreator(tf1.train.SessionCreator):
    """A non-chief session that polls for the chief's model every second.

    TF's own WorkerSessionCreator polls every 30 s, so on a short job a worker that
    starts a moment before the chief has initialized the model would sit idle."""

    def __init__(self, master: str, config: tf1.ConfigProto) -> None:
        self.master, self.config = master, config
        self.scaffold = tf1.train.Scaffold()

    def create_session(self) -> tf1.Session:
        self.scaffold.finalize()
        manager = tf1.train.SessionManager(
            local_init_op=self.scaffold.local_init_op,
            local_init_feed_dict=self.scaffold.local_init_feed_dict,
            ready_op=self.scaffold.ready_op,
            ready_for_local_init_op=self.scaffold.ready_for_local_init_op,
            graph=tf1.get_default_graph(),
            recovery_wait_secs=1,
        )
        return manager.wait_for_session(self.master, config=self.config, max_wait_secs=600)


def main() -> None:
    args = parse_args()
    on_stop(at_once=args.job_name == "ps")
    tf1.disable_eager_execution()
    cluster = tf1.train.ClusterSpec(
        {"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")}
    )
    if args.job_name == "ps":
        server = tf1.train.Server(cluster, job_name="ps", task_index=args.task_index)
        print(f"ps {args.task_index} serving at {server.target}", flush=True)
        server.join()  # never returns: tfkube ends the PS when the job ends
        return

    # A worker may join a running job (`tfkube scale`): the PS started knowing fewer
    # workers, and a PS does dial its workers (it pulls their gradients). So each worker
    # hands the PS the cluster it needs with its session (ClusterSpec propagation: the
    # PS and this worker only, the PS's variables shared between the workers' sessions),
    # and its own server boots under a job name of its own, as propagation requires.
    me = cluster.task_address("worker", args.task_index)
    server = tf1.train.Server(tf1.train.ClusterSpec({"boot": [me]}), job_name="boot")
    is_chief = args.task_index == 0
    log_dir = os.environ["TFKUBE_LOG_DIR"]
    shard = int(os.environ.get("TFKUBE_SHARD_INDEX", args.task_index))
    num_shards = int(os.environ.get("TFKUBE_NUM_SHARDS", len(cluster.job_tasks("worker"))))
    train_x, train_y, test_x, test_y = load_shard(
        Path(os.environ["TFKUBE_DATA_DIR"]), shard, num_shards
    )
    print(
        f"worker {args.task_index}: shard {shard}/{num_shards}, {len(train_x)} examples", flush=True
    )

    device = tf1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster
    )
    with tf1.device(device):
        global_step = tf1.train.get_or_create_global_step()
        x = tf1.placeholder(tf.float32, [None, 64], name="x")
        y = tf1.placeholder(tf.int64, [None], name="y")
        hidden = tf.nn.relu(dense(x, 64, "hidden"))
        logits = dense(hidden, 10, "logits")
        loss = tf1.losses.sparse_softmax_cross_entropy(labels=y, logits=logits)
        accuracy = tf1.reduce_mean(tf1.cast(tf1.equal(tf1.argmax(logits, 1), y), tf.float32))
        train_op = tf1.train.GradientDescentOptimizer(args.learning_rate).minimize(
            loss, global_step=global_step
        )
        tf1.summary.scalar("loss", loss)
        tf1.summary.scalar("accuracy", accuracy)

    config = tf1.ConfigProto(
        device_filters=["/job:ps", f"/job:worker/task:{args.task_index}"],
        cluster_def=tf1.train.ClusterSpec(
            {"ps": cluster.job_tasks("ps"), "worker": {args.task_index: me}}
        ).as_cluster_def(),
        inter_op_parallelism_threads=1,
        intra_op_parallelism_threads=1,
    )
    config.experimental.share_session_state_in_clusterspec_propagation = True
    rng = np.random.default_rng(1000 + args.task_index)
    hooks = [tf1.train.StopAtStepHook(last_step=args.train_steps)]
    started = time.time()
    steps_here = 0
    said_steps_at = started
    if is_chief:
        restoring = tf1.train.latest_checkpoint(log_dir)
        if restoring:  # MonitoredTrainingSession restores the latest checkpoint
            print(f"tfkube-example: restoring {Path(restoring).name}", flush=True)
        session = tf1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=True,
            checkpoint_dir=log_dir,
            save_checkpoint_steps=args.checkpoint_steps,
            save_summaries_steps=50,
            log_step_count_steps=None,
            hooks=hooks,
            config=config,
        )
    else:
        session = tf1.train.MonitoredSession(
            session_creator=WorkerSessionCreator(server.target, config), hooks=hooks
        )
    with session as sess:
        # Read the step without running hooks (the summary hook would want a batch).
        step = sess.run_step_fn(lambda step_context: step_context.session.run(global_step))
        first_step = step
        print(f"tfkube-example: session ready at global_step={step}", flush=True)
        while not sess.should_stop() and not STOPPING.is_set():
            idx = rng.integers(0, len(train_x), args.batch_size)
            _, step, loss_value = sess.run(
                [train_op, global_step, loss], {x: train_x[idx], y: train_y[idx]}
            )
            steps_here += 1
            if time.time() - said_steps_at >= 1.0:
                # This replica's own steps, once a second: tfkube's step rate per replica
                # (stragglers, tfkube.contract.STEP_LINE).
                said_steps_at = time.time()
                print(f"tfkube-steps: {steps_here}", flush=True)
            if steps_here % 100 == 0:
                print(f"global_step={step} loss={loss_value:.4f}", flush=True)
            if is_chief and steps_here % 50 == 0:
                write_progress(log_dir, int(step), args.train_steps)
            if args.step_sleep:
                time.sleep(args.step_sleep)
    elapsed = time.time() - started
    if STOPPING.is_set():
        print(
            f"worker {args.task_index}: stopped between steps after {steps_here} steps "
            f"in {elapsed:.1f}s",
            flush=True,
        )
        os._exit(128 + signal.SIGTERM)
    print(f"worker {args.task_index}: {steps_here} steps in {elapsed:.1f}s", flush=True)
    if is_chief:
        write_progress(log_dir, int(step), args.train_steps)

    if is_chief:
        # The variables still live on the PS: evaluate them there.
        with tf1.Session(server.target, config=config) as sess:
            acc, step = sess.run([accuracy, global_step], {x: test_x, y: test_y})
            trained = tf1.trainable_variables()
            weights = dict(zip([v.op.name for v in trained], sess.run(trained), strict=True))
        export_dir = Path(os.environ.get("TFKUBE_EXPORT_DIR") or Path(log_dir, "export"))
        exported = export_model(export_dir, int(step), weights)
        print(f"tfkube-example: exported the model to {exported}", flush=True)
        result = {
            "global_step": int(step),
            "test_accuracy": round(float(acc), 4),
            "steps_per_second": round(steps_here / elapsed, 1),
            # All workers together, over the chief's training time.
            "global_steps_per_second": round((int(step) - first_step) / elapsed, 1),
            "workers": len(cluster.job_tasks("worker")),
        }
        # The job's result for tfkube (status, list, the job page): written whole, then
        # renamed, so that nobody reads half of it (tfkube.contract.RESULT_FILE).
        Path(log_dir, "result.json.tmp").write_text(json.dumps(result))
        os.replace(Path(log_dir, "result.json.tmp"), Path(log_dir, "result.json"))
        print(f"tfkube-example: result {json.dumps(result)}", flush=True)


if __name__ == "__main__":
    main()
