"""`python -m tfkube.datacache --server URL --dir DIR [--limit 50GiB] [--host H] [--port P]`:
the node cache (`tfkube.datacache`). `--port 0` takes a free port and prints it."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tfkube.datacache._server import NodeCache, make_server
from tfkube.datacache._store import DiskCache, parse_size

DEFAULT_PORT = 8470


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfkube.datacache")
    parser.add_argument("--server", required=True, help="the tfkube server's URL")
    parser.add_argument("--dir", required=True, type=Path, help="the cache's folder")
    parser.add_argument("--limit", default="20GiB", help="at most this much on disk")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--ca-file", default=None, help="the server's CA (https)")
    args = parser.parse_args(argv)
    try:
        limit = parse_size(args.limit)
    except ValueError as exc:
        parser.error(f"--limit: {exc}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cache = NodeCache(DiskCache(args.dir, limit), args.server, args.ca_file)
    httpd = make_server(args.host, args.port, cache)
    print(f"listening on {args.host}:{httpd.server_address[1]}", flush=True)
    logging.getLogger("tfkube.datacache").info(
        "node cache for %s in %s, at most %d bytes", cache.server, args.dir, limit
    )
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
