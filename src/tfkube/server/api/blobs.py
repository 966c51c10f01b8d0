"""A blob as an HTTP response: the file itself when the blob store is this machine's disk,
else streamed from the store in chunks (`--store s3://`), never read whole."""

from __future__ import annotations

from fastapi.responses import FileResponse, Response, StreamingResponse

from tfkube.server.artifacts import BlobStore


def blob_response(
    blobs: BlobStore, sha256: str, headers: dict[str, str] | None = None
) -> Response | None:
    """The blob's bytes as application/gzip, or None when there is no such blob."""
    if blobs.is_local:
        path = blobs.path(sha256)
        if not path.is_file():
            return None
        return FileResponse(path, media_type="application/gzip", headers=headers)
    found = blobs.stream(sha256)
    if found is None:
        return None
    size, chunks = found
    return StreamingResponse(
        chunks,
        media_type="application/gzip",
        headers={**(headers or {}), "Content-Length": str(size)},
    )
