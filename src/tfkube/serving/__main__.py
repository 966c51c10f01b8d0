"""`python -m tfkube.serving`: a model server that speaks TensorFlow Serving's REST API.

Its flags are TensorFlow Serving's (`tensorflow_model_server --rest_api_port=8501
--model_name=... --model_base_path=...`) plus `--rest_api_host` (loopback by default) and
`--model_version` (serve one version instead of the latest)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tfkube.serving", description=__doc__)
    p.add_argument("--model_name", required=True, help="The name in /v1/models/<name>.")
    p.add_argument(
        "--model_base_path", required=True, type=Path, help="Folder of numbered SavedModels."
    )
    p.add_argument("--rest_api_port", type=int, default=8501)
    p.add_argument("--rest_api_host", default="127.0.0.1")
    p.add_argument(
        "--model_version", type=int, default=None, help="Serve this version only (default: latest)."
    )
    p.add_argument(
        "--file_system_poll_wait_seconds",
        type=float,
        default=1.0,
        help="How often to look for a newer version.",
    )
    p.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0)
    p.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import uvicorn

    from tfkube import contract
    from tfkube.serving._app import create_app
    from tfkube.serving._store import ModelStore
    from tfkube.serving._versions import VersionPolicy

    if args.tensorflow_intra_op_parallelism:
        tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
    if args.tensorflow_inter_op_parallelism:
        tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)
    store = ModelStore(args.model_name, args.model_base_path, VersionPolicy(args.model_version))
    store.start(args.file_system_poll_wait_seconds)
    token = os.environ.pop(contract.SERVING_TOKEN, None) or None
    print(
        f"tfkube model server: {args.model_name} from {args.model_base_path} "
        f"(version {VersionPolicy(args.model_version).describe()}) at "
        f"http://{args.rest_api_host}:{args.rest_api_port}/v1/models/{args.model_name}",
        file=sys.stderr,
        flush=True,
    )
    try:
        uvicorn.run(
            create_app(store, token),
            host=args.rest_api_host,
            port=args.rest_api_port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
        )
    finally:
        store.close()


if __name__ == "__main__":
    main()
