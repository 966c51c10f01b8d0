"""`python -m tfkube.serving`: a model server that speaks TensorFlow Serving's REST and gRPC
APIs.

Its flags are TensorFlow Serving's (`tensorflow_model_server --port=8500
--rest_api_port=8501 --model_name=... --model_base_path=... --enable_batching
--batching_parameters_file=...`) plus tfkube's: `--rest_api_host` (loopback by default;
gRPC listens there too), `--model_version` (serve one version instead of the latest),
`--model_version_policy`, `--version_labels` and `--label_traffic` (what TensorFlow
Serving keeps in its model config file). `--port=0` (the default) opens no gRPC port.

`GET /tfkube/ready` on the REST port (no secret needed) is its readiness: a version is
available and the gRPC door answers its own health check through the network."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _flag_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: expected true or false")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive whole number")
    return value


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    from tfkube.serving._rest import DEFAULT_MAX_ELEMENTS, DEFAULT_MAX_REQUEST_BYTES
    from tfkube.serving._versions import parse_pairs, parse_policy

    p = argparse.ArgumentParser(prog="python -m tfkube.serving", description=__doc__)
    p.add_argument("--model_name", required=True, help="The name in /v1/models/<name>.")
    p.add_argument(
        "--model_base_path", required=True, type=Path, help="Folder of numbered SavedModels."
    )
    p.add_argument("--rest_api_port", type=int, default=8501)
    p.add_argument("--rest_api_host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: none).")
    p.add_argument("--grpc_max_threads", type=int, default=32)
    p.add_argument(
        "--max_request_bytes",
        type=_positive,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help="The largest gRPC message or REST body read (default 64 MiB); larger ones are "
        "refused, RESOURCE_EXHAUSTED (REST: 413).",
    )
    p.add_argument(
        "--max_request_elements",
        type=_positive,
        default=DEFAULT_MAX_ELEMENTS,
        help="The most numbers or strings one request may bring over all its inputs "
        f"(default {DEFAULT_MAX_ELEMENTS}); with batching, an input whose rows have a known "
        "shape takes at most max_batch_size rows. More: INVALID_ARGUMENT, before any array "
        "is made.",
    )
    p.add_argument(
        "--model_version", type=int, default=None, help="Serve this version only (default: latest)."
    )
    p.add_argument(
        "--model_version_policy",
        type=parse_policy,
        default=None,
        help="latest, latest:N, all or specific:V[,V...] (default: latest).",
    )
    p.add_argument(
        "--version_labels",
        type=lambda t: parse_pairs(t, "a label"),
        default={},
        help="label=version[,label=version]: e.g. stable=1,canary=2.",
    )
    p.add_argument(
        "--label_traffic",
        type=lambda t: parse_pairs(t, "a weight"),
        default={},
        help="label=weight[,...]: how requests naming no version or label are shared.",
    )
    p.add_argument(
        "--file_system_poll_wait_seconds",
        type=float,
        default=1.0,
        help="How often to look for a newer version.",
    )
    p.add_argument("--enable_batching", type=_flag_bool, nargs="?", const=True, default=False)
    p.add_argument("--batching_parameters_file", type=Path, default=None)
    p.add_argument("--enable_model_warmup", type=_flag_bool, nargs="?", const=True, default=True)
    p.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0)
    p.add_argument(
        "--tensorflow_inter_op_parallelism",
        type=int,
        default=-1,
        help="Threads that run a model call's ops in parallel: -1 (the default) the "
        "calling thread, 0 TensorFlow's choice, N a pool of N.",
    )
    args = p.parse_args(argv)
    if args.model_version is not None and args.model_version_policy is not None:
        p.error("give --model_version or --model_version_policy, not both")
    unknown = sorted(set(args.label_traffic) - set(args.version_labels))
    if unknown:
        p.error(f"--label_traffic names labels --version_labels does not: {', '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import uvicorn

    from tfkube import contract
    from tfkube.serving._app import create_app
    from tfkube.serving._batching import Batcher, BatchingParameters, parse_parameters
    from tfkube.serving._calls import Calls
    from tfkube.serving._store import ModelStore, load_saved_model, warm_up
    from tfkube.serving._versions import VersionPolicy

    if args.tensorflow_intra_op_parallelism:
        tf.config.threading.set_intra_op_parallelism_threads(args.tensorflow_intra_op_parallelism)
    if args.tensorflow_inter_op_parallelism > 0:
        tf.config.threading.set_inter_op_parallelism_threads(args.tensorflow_inter_op_parallelism)
    batcher = None
    if args.enable_batching:
        params = BatchingParameters()
        if args.batching_parameters_file is not None:
            try:
                params = parse_parameters(args.batching_parameters_file.read_text())
            except (OSError, ValueError) as exc:
                sys.exit(f"--batching_parameters_file: {exc}")
        batcher = Batcher(params)
    policy = args.model_version_policy or VersionPolicy.one(args.model_version)
    store = ModelStore(
        args.model_name,
        args.model_base_path,
        policy,
        functools.partial(load_saved_model, inter_op_threads=args.tensorflow_inter_op_parallelism),
        labels=args.version_labels,
        traffic=args.label_traffic,
        warmer=warm_up if args.enable_model_warmup else None,
    )
    calls = Calls(
        store,
        batcher,
        ThreadPoolExecutor(max_workers=8, thread_name_prefix="tfkube-run"),
        max_elements=args.max_request_elements,
        max_request_bytes=args.max_request_bytes,
    )
    store.start(args.file_system_poll_wait_seconds)
    token = os.environ.pop(contract.SERVING_TOKEN, None) or None
    grpc_server = probe = None
    if args.port:
        from tfkube.serving._grpc import HealthProbe, start_server

        grpc_server = start_server(
            calls, args.rest_api_host, args.port, token, threads=args.grpc_max_threads
        )
        probe = HealthProbe(args.rest_api_host, args.port)
    print(
        f"tfkube model server: {args.model_name} from {args.model_base_path} "
        f"(versions: {policy.describe()}"
        + (f"; labels {args.version_labels}" if args.version_labels else "")
        + (f"; batching {batcher.params}" if batcher else "")
        + f") at http://{args.rest_api_host}:{args.rest_api_port}/v1/models/{args.model_name}"
        + (f" and gRPC {args.rest_api_host}:{args.port}" if args.port else ""),
        file=sys.stderr,
        flush=True,
    )
    options = {}
    try:
        import uvloop  # noqa: F401

        options["loop"] = "uvloop"
    except ImportError:  # pragma: no cover - the serving extra installs it
        pass
    try:
        import httptools  # noqa: F401

        options["http"] = "httptools"
    except ImportError:  # pragma: no cover
        pass
    try:
        uvicorn.run(
            create_app(calls, token, probe),
            host=args.rest_api_host,
            port=args.rest_api_port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            **options,  # type: ignore[arg-type]
        )
    finally:
        if probe is not None:
            probe.close()
        if grpc_server is not None:
            grpc_server.stop(grace=5).wait(6)
        calls.close()
        store.close()


if __name__ == "__main__":
    main()
