"""Benchmark: staging a data source (issue 19) against a plain parallel read of the same
bytes from the same store, side by side in one run.

A throwaway SeaweedFS on loopback (tools/s3/seaweed.py: started here, stopped by PID) holds
SIZE GiB as 16 MiB objects under one prefix. For each size it times
  limit /dev/null   boto3, N threads (N = the stager's DEFAULT_WORKERS), every object read
                    and thrown away: what the store and the client can give;
  limit files       the same, every object written to a file (what staging must also do);
  cold, W workers   what a job's supervisor runs before any replica starts
                    (`engines/local/_supervisor.py`, `_stage_data`: `open_store`,
                    `placements` with the `byWorker` shard rule when W > 1, `stage`) into an
                    empty cache and a new data folder;
  warm, W workers   the same again with the cache filled (a later job with the same data):
                    the seconds staging adds to that job's start, plus the submit's listing
                    (`list_objects`), which a server's or `tfkube run`'s submit also pays.
It prints the table (MiB/s, ratios to the limits) and the targets of issue 19: cold >= 0.8x
the limit, warm <= 2 s whatever the size.

Each run is repeated --rounds times (order reversed every other round, so drift on a
shared machine hits all alike); the table shows each run's median.

    .venv/bin/python benchmarks/data/run.py [--gib 1 4] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # tests/tooling.py: load a tools/ script by path

from tfkube.engines._data import (  # noqa: E402
    CACHE_LIMIT_ENV,
    CHUNK,
    DEFAULT_WORKERS,
    MiB,
    S3Credentials,
    StoreRef,
    cache_limit,
    list_objects,
    open_store,
    placements,
    stage,
)
from tfkube.spec import S3Source  # noqa: E402
from tooling import load_tool  # noqa: E402

OBJECT = 16 * MiB
PREFIX = "set/"


def upload(client: Any, bucket: str, gib: float) -> int:
    """SIZE GiB of random bytes as 16 MiB objects (each its own bytes): their count."""
    count = max(1, round(gib * 1024 * MiB / OBJECT))
    block = os.urandom(OBJECT)

    def put(i: int) -> None:
        body = i.to_bytes(8, "big") + block[8:]  # distinct content, so distinct ETags
        client.put_object(Bucket=bucket, Key=f"{PREFIX}part-{gib:g}-{i:05d}", Body=body)

    with ThreadPoolExecutor(DEFAULT_WORKERS) as pool:
        list(pool.map(put, range(count)))
    return count


def plain_read(client: Any, bucket: str, keys: list[str], into: Path | None) -> int:
    """The limit: N threads, each object read in CHUNK pieces to /dev/null or a file."""

    def read(key: str) -> int:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        got = 0
        out = open(into / key.replace("/", "_"), "wb") if into else None  # noqa: SIM115
        try:
            while chunk := body.read(CHUNK):
                got += len(chunk)
                if out:
                    out.write(chunk)
        finally:
            if out:
                out.close()
            body.close()
        return got

    with ThreadPoolExecutor(DEFAULT_WORKERS) as pool:
        return sum(pool.map(read, keys))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def supervisor_stage(
    store: StoreRef, creds: S3Credentials, objects: list[Any], cache: Path, dest: Path, w: int
) -> Any:
    """What `_stage_data` runs: the layout (byWorker for several workers), then `stage`
    with the cache's bound as a submit reads it (TFKUBE_DATA_CACHE_LIMIT, default 20% of
    the disk: the eviction scan after staging is timed too)."""
    rule = "byWorker" if w > 1 else None
    layout = placements(objects, store, rule, [("worker", i) for i in range(w)], w)
    cache.mkdir(parents=True, exist_ok=True)
    limit = cache_limit(os.environ.get(CACHE_LIMIT_ENV), shutil.disk_usage(cache).total)
    return stage(open_store(store, creds), store, objects, cache, dest, layout=layout, limit=limit)


def run_size(server: Any, client: Any, gib: float, work: Path, rounds: int) -> dict[str, Any]:
    bucket = f"bench-{str(gib).replace('.', '-')}-{os.getpid()}"
    client.create_bucket(Bucket=bucket)
    took, count = timed(lambda: upload(client, bucket, gib))
    print(f"{gib:g} GiB: uploaded {count} objects of 16 MiB in {took:.1f}s", flush=True)
    store = StoreRef(S3Source(bucket, PREFIX), server.endpoint)
    creds = S3Credentials(server.access_key, server.secret_key)
    objects = list_objects(open_store(store, creds), store)
    keys = [o.key for o in objects]
    total = sum(o.size for o in objects)
    rows: dict[str, Any] = {"gib": gib, "objects": count, "bytes": total, "runs": {}}
    seen: dict[str, list[dict[str, Any]]] = {}

    def record(name: str, seconds: float, extra: dict[str, Any] | None = None) -> None:
        rate = total / MiB / seconds
        seen.setdefault(name, []).append({"seconds": seconds, "mib_per_s": rate, **(extra or {})})
        print(f"  {name:22s} {seconds:7.2f}s  {rate:8.1f} MiB/s", flush=True)

    def limit(into: Path | None) -> None:
        if into is not None:
            into.mkdir()
        seconds, _ = timed(lambda: plain_read(client, bucket, keys, into))
        record("limit files" if into else "limit /dev/null", seconds)
        if into is not None:
            shutil.rmtree(into)

    def staged(w: int) -> None:
        cache = work / f"cache-{w}"
        for kind in ("cold", "warm"):
            dest = work / f"data-{w}-{kind}"
            seconds, result = timed(
                lambda: supervisor_stage(store, creds, objects, cache, dest, w)  # noqa: B023
            )
            listing, _ = timed(lambda: list_objects(open_store(store, creds), store))
            record(
                f"{kind}, {w} worker{'s' if w > 1 else ''}",
                seconds,
                {"fetched_bytes": result.fetched_bytes, "listing_seconds": listing},
            )
        for kind in ("cold", "warm"):
            writable(work / f"data-{w}-{kind}")
        shutil.rmtree(cache)

    steps: list[Callable[[], None]] = [
        lambda: limit(None),
        lambda: limit(work / "plain"),
        lambda: staged(1),
        lambda: staged(8),
    ]
    for r in range(rounds):
        print(f" round {r + 1}", flush=True)
        for step in steps if r % 2 == 0 else steps[::-1]:  # drift hits every run alike
            step()
    for name, runs in seen.items():
        mid = sorted(runs, key=lambda x: x["seconds"])[len(runs) // 2]
        rows["runs"][name] = {**mid, "all_seconds": [x["seconds"] for x in runs]}
    client_delete_bucket(client, bucket, keys)
    return rows


def writable(folder: Path) -> None:
    from tfkube.engines._data import writable_tree

    writable_tree(folder)
    shutil.rmtree(folder, ignore_errors=True)


def client_delete_bucket(client: Any, bucket: str, keys: list[str]) -> None:
    for i in range(0, len(keys), 1000):
        client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]}
        )
    client.delete_bucket(Bucket=bucket)


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| size | run | median s | MiB/s | x limit (/dev/null) | x limit (files) | bytes fetched |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in results:
        runs = size["runs"]
        null, files = runs["limit /dev/null"]["mib_per_s"], runs["limit files"]["mib_per_s"]
        for name, r in runs.items():
            fetched = r.get("fetched_bytes")
            lines.append(
                f"| {size['gib']:g} GiB | {name} | {r['seconds']:.2f} | {r['mib_per_s']:.0f} | "
                f"{r['mib_per_s'] / null:.2f} | {r['mib_per_s'] / files:.2f} | "
                f"{'' if fetched is None else f'{fetched / MiB:.0f} MiB'} |"
            )
    return lines


def met(to_null: float, to_files: float) -> str:
    if to_null >= 0.8:
        return "met"
    return "met against the files limit only" if to_files >= 0.8 else "NOT met"


def verdict(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for size in results:
        runs = size["runs"]
        null, files = runs["limit /dev/null"]["mib_per_s"], runs["limit files"]["mib_per_s"]
        for w in ("1 worker", "8 workers"):
            cold = runs[f"cold, {w}"]["mib_per_s"]
            warm = runs[f"warm, {w}"]
            start = warm["seconds"] + warm["listing_seconds"]
            out.append(
                f"{size['gib']:g} GiB, {w}: cold {cold / null:.2f}x the /dev/null limit, "
                f"{cold / files:.2f}x the files limit (target ≥ 0.8: "
                f"{met(cold / null, cold / files)}); "
                f"warm adds {warm['seconds']:.2f}s (+ {warm['listing_seconds']:.2f}s listing "
                f"at submit) (target ≤ 2 s: {'met' if start <= 2 else 'NOT met'})"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, nargs="+", default=[1.0], help="sizes, GiB")
    parser.add_argument("--rounds", type=int, default=3, help="each run's median of")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    command = " ".join([".venv/bin/python", "benchmarks/data/run.py", *sys.argv[1:]])
    free = shutil.disk_usage(tempfile.gettempdir()).free
    need = sum(args.gib) * 3 * 1024 * MiB  # in the store, the cache and the plain files
    if need > free * 0.8:
        parser.error(f"--gib {args.gib} needs some {need / 2**30:.0f} GiB free; have less")
    print(f"$ {command}")
    load = os.getloadavg()
    cores = os.cpu_count()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({cores} cores)")
    seaweed = load_tool("tfkube_tools_s3", "s3", "seaweed.py")
    server = seaweed.start_seaweed(build=False)
    results = []
    try:
        import boto3
        from botocore.config import Config

        client = boto3.session.Session(
            aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key
        ).client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            config=Config(max_pool_connections=DEFAULT_WORKERS * 2),
        )
        deadline = time.monotonic() + 60
        while True:  # the gateway answers before its filer is ready
            try:
                client.list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        with tempfile.TemporaryDirectory(prefix="tfkube-databench-") as tmp:
            for gib in args.gib:
                work = Path(tmp, f"{gib:g}")
                work.mkdir()
                results.append(run_size(server, client, gib, work, args.rounds))
    finally:
        server.stop()
    end_load = os.getloadavg()
    print()
    print("\n".join(table(results)))
    print()
    print("\n".join(verdict(results)))
    print(f"load average at end: {end_load[0]:.2f} {end_load[1]:.2f} {end_load[2]:.2f}")
    if args.json:
        args.json.write_text(
            json.dumps({"command": command, "load": [load, end_load], "results": results}, indent=2)
        )


if __name__ == "__main__":
    main()
