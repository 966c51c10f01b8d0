"""The tfkube platform server: a multi-user HTTP API and a dashboard over the engines.

    tfkube server ─> uvicorn ─> app.py (builds the Platform: platform.py)
      api/routes/<resource>.py  the JSON API: parse -> scope check -> query or domain call
                                -> answer; api/deps.py: SessionDep, CurrentUser, TeamDep ...
      web/                      the dashboard's pages: read through the same queries
      queries/<resource>.py     every read both doors share (visibility, filters, counts,
                                paging); queries/views.py: rows -> tfkube.wire shapes
      jobs/ workloads/ accounts.py artifacts.py tenants.py
                                the domain: every write, the sync and watch loops
      outputs/                  a job's output folder: logs, scalars, checkpoints, files
      core/                     config, db, tables, security, scopes (who may do what), ...

A request goes to a route (JSON) or a page (HTML); a read is a `queries` function, a rule
of who may is `core/scopes.py`, a write is the domain's. The server reaches every
workload through `tfkube.engines.Engine`; it may use `tfkube.wire` (the JSON shapes it
shares with the client) and anything below the engines, never `tfkube.cli`.
"""

from tfkube.server.app import build_platform, create_app, serve
from tfkube.server.core.config import DEFAULT_PORT, ServerSettings

__all__ = ["DEFAULT_PORT", "ServerSettings", "build_platform", "create_app", "serve"]
