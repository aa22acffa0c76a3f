"""``windowsmith serve``: an OpenAI- and Anthropic-compatible proxy, a JSON API and a live dashboard.

Needs the ``server`` extra (``pip install 'windowsmith[server]'``); spans need the ``otel`` extra.

    from windowsmith.server import ServerConfig, create_app
    app = create_app(ServerConfig(store="agents.db", openai_base_url="https://api.openai.com/v1"))
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError


def _require() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError(
            "windowsmith serve needs the server extra: pip install 'windowsmith[server]'"
        ) from None


def __getattr__(name: str) -> Any:
    if name == "ServerConfig":
        _require()
        from .state import ServerConfig

        return ServerConfig
    if name == "create_app":
        _require()
        from .app import create_app

        return create_app
    raise AttributeError(name)


__all__ = ["ServerConfig", "create_app"]
