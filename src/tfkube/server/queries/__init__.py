"""The server's reads: one module per resource, plain functions that both the JSON API
(`api/routes`) and the pages (`web/`) call, so a page shows exactly what the API answers.

    api/routes/<resource>.py ─┐
                              ├─> queries.<resource>.<function>(db, actor, filters...)
    web/pages.py, ...        ─┘        -> rows, or wire shapes through queries/views.py
                                       (rows -> tfkube.wire, pure)

- `find(db, actor, id)` answers None for what does not exist *and* for another team's
  thing, so every caller answers "not found" for both (core/scopes.visible decides);
  whether the actor's role allows an action (403) is the caller's check.
- `list_*` hold the filters, the per-phase counts and the paging the dashboard uses,
  with a fixed number of queries however long the page.
- `view(db, row)` is one row as the API answers it, with the names its ids point to.

Nothing here writes, and nothing here knows HTTP (no fastapi): writes are the domain's
(jobs/service.py, accounts.py, artifacts.py, workloads/), reached from the routes.
"""

from tfkube.server.queries import (
    artifacts,
    compare,
    jobs,
    model_servers,
    notebooks,
    notifications,
    teams,
    tokens,
    users,
    views,
)

__all__ = [
    "artifacts",
    "compare",
    "jobs",
    "model_servers",
    "notebooks",
    "notifications",
    "teams",
    "tokens",
    "users",
    "views",
]
