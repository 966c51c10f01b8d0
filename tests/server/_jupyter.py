"""A Jupyter kernel driven as JupyterLab's page drives it: an `execute_request` on the
kernel's WebSocket channels (through tfkube's proxy, with a bearer token), its output read
until the kernel is idle again."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from websockets.sync.client import connect


def _message(session: str, code: str) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "username": "test",
            "session": session,
            "msg_type": "execute_request",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "channel": "shell",
        "buffers": [],
    }


def run_cell(ws_url: str, token: str, code: str, timeout: float) -> str:
    """Execute `code` in the kernel over its WebSocket; -> everything it printed. Done
    at the kernel's `idle` status for the request (on iopub, after all its output):
    `execute_reply` comes on the shell channel and may pass output still on its way."""
    session = uuid.uuid4().hex
    printed: list[str] = []
    with connect(
        ws_url + f"?session_id={session}",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=60,
        max_size=None,
    ) as ws:
        request = _message(session, code)
        ws.send(json.dumps(request))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = json.loads(ws.recv(timeout=deadline - time.monotonic()))
            if reply.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
                continue
            kind = reply["header"]["msg_type"]
            if kind == "stream":
                printed.append(reply["content"]["text"])
            elif kind == "error":
                printed.append("\n".join(reply["content"]["traceback"]))
            elif kind == "status" and reply["content"].get("execution_state") == "idle":
                return "".join(printed)
    raise AssertionError(f"the cell did not finish in {timeout:.0f} s; it printed {printed}")
