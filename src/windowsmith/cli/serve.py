"""``windowsmith serve``: the proxy, the JSON API and the dashboard (the ``server`` extra)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .helpers import CLIENT_MODEL, STORE_HELP, clean_errors, one_line_warnings

if TYPE_CHECKING:
    from ..server import ServerConfig

def _env(name: str) -> str:
    return f"WINDOWSMITH_{name}"


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar=_env("HOST"),
              help="Interface to bind. The default serves this machine only; 0.0.0.0 exposes the proxy (use --token).")
@click.option("--port", type=click.IntRange(0, 65535), default=8750, show_default=True, envvar=_env("PORT"),
              help="TCP port (0: any free port).")
@click.option("--store", default=None, envvar=_env("STORE"), help=STORE_HELP)
@click.option("--openai-base-url", default=None, envvar=_env("OPENAI_BASE_URL"),
              help="Upstream for /v1/chat/completions (default: the OpenAI SDK's).")
@click.option("--anthropic-base-url", default=None, envvar=_env("ANTHROPIC_BASE_URL"),
              help="Upstream for /v1/messages (default: the Anthropic SDK's).")
@click.option("--gemini-base-url", default=None, envvar=_env("GEMINI_BASE_URL"),
              help="Upstream for /v1beta/models/...:generateContent (default: Google's Gemini API).")
@click.option("--artifacts", default=None, envvar=_env("ARTIFACTS"), metavar="URL",
              help="Keep offloaded tool results in s3://bucket[/prefix] (obstore; AWS_* variables for credentials and "
                   "endpoint) or file:///folder, each tenant under its own prefix (default: in the store).")
@click.option("--model-window", type=click.IntRange(min=1), default=None, envvar=_env("MODEL_WINDOW"),
              help="Build windows of this many tokens instead of each model's full window.")
@click.option("--registry", type=click.Path(exists=True, dir_okay=False), default=None, envvar=_env("REGISTRY"),
              help="A JSON or TOML model file merged over the packaged registry (windows, tokenizers, prices).")
@click.option("--default-window", type=click.IntRange(min=1), default=None, envvar=_env("DEFAULT_WINDOW"),
              help="Proxy models no registry knows with this context window (counted with o200k_base, calibrated "
                   "from billed usage). Without it such a model gets a 400 naming this option.")
@click.option("--token", "tokens", multiple=True, metavar="TOKEN[=TENANT]",
              help="Require this API token (repeatable); TOKEN=TENANT scopes it to a tenant. Also WINDOWSMITH_TOKENS "
                   "(comma-separated).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, envvar=_env("WORKERS"),
              help="Worker processes over the one store; a session's turns never interleave across them (POSIX).")
@click.option("--max-body", type=click.IntRange(min=1), default=8 * 1024 * 1024, show_default=True,
              envvar=_env("MAX_BODY"), help="The largest request body in bytes; a larger one gets a 413 unread.")
@click.option("--body-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              envvar=_env("BODY_TIMEOUT"), help="Seconds a client has to send its request body (then a 408).")
@click.option("--upstream-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              envvar=_env("UPSTREAM_TIMEOUT"),
              help="Seconds an upstream call may take (per read when streaming; then a 504 or an error event).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, envvar=_env("LOG_LEVEL"), help="Server log level (info: one access line per call).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              envvar=_env("LOG_FORMAT"), help="Log lines as text or as one JSON object each.")
@clean_errors
def serve(host: str, port: int, store: str | None, openai_base_url: str | None, anthropic_base_url: str | None,
          gemini_base_url: str | None, artifacts: str | None, model_window: int | None, registry: str | None, default_window: int | None,
          tokens: tuple[str, ...], workers: int, max_body: int, body_timeout: float, upstream_timeout: float, log_level: str,
          log_format: str) -> None:
    """Run the proxy (POST /v1/chat/completions, /v1/messages), the JSON API (/api/...) and the dashboard (/).

    Every option can also come from an environment variable: WINDOWSMITH_ and the option's name in capitals
    (WINDOWSMITH_STORE, WINDOWSMITH_DEFAULT_WINDOW, ...)."""
    import os

    from ..server import ServerConfig
    from ..server.logs import configure

    pairs = list(tokens) + [t for t in os.environ.get("WINDOWSMITH_TOKENS", "").split(",") if t.strip()]
    token_map: dict[str, str | None] = {}
    for item in pairs:
        tok, _, tenant = item.strip().partition("=")
        token_map[tok] = tenant or None
    configure(log_level, log_format)
    config = ServerConfig(store=store, openai_base_url=openai_base_url, anthropic_base_url=anthropic_base_url,
                          gemini_base_url=gemini_base_url, artifacts=artifacts, model_window=model_window, tokens=token_map, registry=registry,
                          default_window=default_window,
                          max_body=max_body, body_timeout=body_timeout, upstream_timeout=upstream_timeout)
    _warn_if_open(host, token_map)
    with one_line_warnings(model=CLIENT_MODEL):  # a retired model is the one a client asked for, not an option
        _serve(config, host, port, workers, (log_level, log_format))


def _warn_if_open(host: str, tokens: dict[str, str | None]) -> None:
    """Without tokens the proxy, the JSON API and the dashboard are open to whoever reaches the port: fine on
    loopback, worth a warning anywhere else."""
    import ipaddress

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        loopback = False
    if not tokens and not loopback:
        click.echo(f"warning: serving on {host} without --token: anyone who reaches this port can use the proxy and "
                   "read every session through the JSON API and the dashboard. Add --token TOKEN (e.g. "
                   "`openssl rand -hex 24`), or bind 127.0.0.1.", err=True)


def _uvicorn_limits() -> dict[str, Any]:
    """uvicorn's read timeouts: an idle keep-alive connection closes after 5 s, and a connection must send its request
    headers within :data:`~windowsmith.server.limits.HEADER_TIMEOUT` seconds (the body's own timeout is the app's)."""
    from ..server.limits import HeaderTimeoutH11

    return {"http": HeaderTimeoutH11, "timeout_keep_alive": 5}


def _serve(config: ServerConfig, host: str, port: int, workers: int, logs: tuple[str, str] = ("info", "text")) -> None:
    import uvicorn

    from ..server import create_app

    if workers == 1:
        app = create_app(config)
        click.echo(f"windowsmith serving on http://{host}:{port} (dashboard at /, proxy at /v1)", err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=30,
                    **_uvicorn_limits())
        return
    _serve_workers(config, host, port, workers, logs)


def _serve_workers(config: ServerConfig, host: str, port: int, workers: int,
                   logs: tuple[str, str] = ("info", "text")) -> None:
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
        os.environ[_env("LOG_LEVEL")], os.environ[_env("LOG_FORMAT")] = logs  # (each worker configures its logs)
        click.echo(f"windowsmith serving on http://{host}:{port} with {workers} workers (dashboard at /, proxy at /v1)",
                   err=True)
        uvicorn.run("windowsmith.server.app:app_from_env", factory=True, workers=workers, host=host, port=port,
                    log_level="warning", access_log=False, timeout_graceful_shutdown=30, **_uvicorn_limits())
    finally:
        os.environ.pop(SERVE_ENV, None)
        shutil.rmtree(lock_dir, ignore_errors=True)


COMMANDS: tuple[click.Command, ...] = (serve,)

__all__ = ["COMMANDS", "serve"]
