"""The tfkube platform server: a multi-user HTTP API over the engines.

    tfkube server ─> uvicorn ─> FastAPI app (_app)
      routes/<resource>.py   thin handlers: parse, check scope (deps, _scopes), call, answer
      deps.py                typed dependencies: SessionDep, CurrentUser, TeamDep, JobDep ...
      _accounts, _security   users, teams, sessions, tokens, CSRF, code claims
      _artifacts             the content-addressed artifact store
      _jobs                  submit (pin to the server, queue), the sync loop, stop/delete
      _admission             the local engine's fair queue (pure)
      _forms                 four fields / TFJob document -> TFJob (pure)
      _engines               one Backend per team (LocalBackend / KubernetesBackend)
      _tables, _db, migrations/   SQLAlchemy tables, engine, Alembic migrations

The server reaches jobs only through `tfkube.engines.Backend`; it may use
`tfkube.wire` (the JSON shapes it shares with the client) and anything below the
backends, never `tfkube.cli`.
"""

from tfkube.server.app import build_platform, create_app, serve
from tfkube.server.core.config import DEFAULT_PORT, ServerSettings

__all__ = ["DEFAULT_PORT", "ServerSettings", "build_platform", "create_app", "serve"]
