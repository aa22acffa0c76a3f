"""``windowsmith serve``: the proxy, the JSON API and the dashboard (the ``server`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .helpers import CLIENT_MODEL, STORE_HELP, clean_errors, one_line_warnings

if TYPE_CHECKING:
    from ..server import ServerConfig

@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind. The default serves this machine only; 0.0.0.0 exposes the proxy (use --token).")
@click.option("--port", type=click.IntRange(0, 65535), default=8750, show_default=True, help="TCP port (0: any free port).")
@click.option("--store", default=None, help=STORE_HELP)
@click.option("--openai-base-url", default=None, help="Upstream for /v1/chat/completions (default: the OpenAI SDK's).")
@click.option("--anthropic-base-url", default=None, help="Upstream for /v1/messages (default: the Anthropic SDK's).")
@click.option("--model-window", type=click.IntRange(min=1), default=None,
              help="Build windows of this many tokens instead of each model's full window.")
@click.option("--token", "tokens", multiple=True, metavar="TOKEN[=TENANT]",
              help="Require this API token (repeatable); TOKEN=TENANT scopes it to a tenant. Also WINDOWSMITH_TOKENS "
                   "(comma-separated).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes over the one store; a session's turns never interleave across them (POSIX).")
@clean_errors
def serve(host: str, port: int, store: str | None, openai_base_url: str | None, anthropic_base_url: str | None,
          model_window: int | None, tokens: tuple[str, ...], workers: int) -> None:
    """Run the proxy (POST /v1/chat/completions, /v1/messages), the JSON API (/api/...) and the dashboard (/)."""
    import os

    from ..server import ServerConfig

    pairs = list(tokens) + [t for t in os.environ.get("WINDOWSMITH_TOKENS", "").split(",") if t.strip()]
    token_map: dict[str, str | None] = {}
    for item in pairs:
        tok, _, tenant = item.strip().partition("=")
        token_map[tok] = tenant or None
    config = ServerConfig(store=store, openai_base_url=openai_base_url, anthropic_base_url=anthropic_base_url,
                          model_window=model_window, tokens=token_map)
    with one_line_warnings(model=CLIENT_MODEL):  # a retired model is the one a client asked for, not an option
        _serve(config, host, port, workers)


def _serve(config: ServerConfig, host: str, port: int, workers: int) -> None:
    import uvicorn

    from ..server import create_app

    if workers == 1:
        app = create_app(config)
        click.echo(f"windowsmith serving on http://{host}:{port} (dashboard at /, proxy at /v1)", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
        return
    _serve_workers(config, host, port, workers)


def _serve_workers(config: ServerConfig, host: str, port: int, workers: int) -> None:
    """``serve --workers N``: the store opened (and migrated) once here, then N uvicorn worker processes, each
    building the app from :data:`~windowsmith.server.app.SERVE_ENV`, with one lock directory for the session locks
    (removed when the server stops)."""
    import os
    import shutil
    import tempfile
    from dataclasses import replace

    import uvicorn

    from ..errors import UsageError
    from ..server.app import SERVE_ENV, config_to_env
    from ..server.locks import cross_process_locks
    from ..store import open_store

    if not cross_process_locks():
        raise UsageError("--workers needs POSIX file locks (fcntl), which this system lacks: run one worker")
    open_store(config.store).close()  # migrate once, before the workers race to
    lock_dir = tempfile.mkdtemp(prefix="windowsmith-serve-locks-")
    try:
        os.environ[SERVE_ENV] = config_to_env(replace(config, lock_dir=lock_dir))
        click.echo(f"windowsmith serving on http://{host}:{port} with {workers} workers (dashboard at /, proxy at /v1)",
                   err=True)
        uvicorn.run("windowsmith.server.app:app_from_env", factory=True, workers=workers, host=host, port=port,
                    log_level="warning", access_log=False)
    finally:
        os.environ.pop(SERVE_ENV, None)
        shutil.rmtree(lock_dir, ignore_errors=True)


COMMANDS: tuple[click.Command, ...] = (serve,)

__all__ = ["COMMANDS", "serve"]
