"""Which models the server budgets: the registry (packaged, plus ``serve --registry FILE``), and for a model no
registry knows (``llama3:8b``, a fine-tune, an older snapshot) a declared window (``serve --default-window N``)
with a fallback tokenizer. Its counts are calibrated from the billed usage like any model's, so the fallback
tokenizer's error shrinks after the first calls; its prices are unknown (costs show as 0).
"""

from __future__ import annotations

from pathlib import Path

from ..artifacts import ArtifactStore
from ..engine import Engine
from ..errors import UnknownModelError, UsageError
from ..registry import ModelSpec, Prices, Provider, Registry, Tokenizer, load_registry
from ..store import Store

#: The tokenizer a model no registry knows is counted with (calibrated from billed usage afterwards).
FALLBACK_TOKENIZER: Tokenizer = "o200k_base"


def fallback_spec(model: str, window: int) -> ModelSpec:
    """A spec for ``model`` with ``window`` tokens: output reserved as a quarter of it (at most 16,384), the
    provider guessed from the name (it chooses the cache rules: Anthropic's breakpoints, or none)."""
    low = model.lower()
    provider: Provider = "anthropic" if "claude" in low else "gemini" if "gemini" in low else "openai"
    fmt = {"anthropic": "anthropic", "gemini": "gemini", "openai": "openai-chat"}[provider]
    return ModelSpec(name=model, provider=provider, default_format=fmt,  # type: ignore[arg-type]
                     context_window=window, max_output=max(1, min(16_384, window // 4)),
                     tokenizer=FALLBACK_TOKENIZER, token_factor=1.0, prices=Prices(0.0, 0.0, 0.0, 0.0),
                     min_cacheable_prefix=1024 if provider == "anthropic" else 0,
                     max_breakpoints=4 if provider == "anthropic" else 0)


class Models:
    """The server's registry and its answer for unknown models."""

    def __init__(self, registry: str | Path | None = None, default_window: int | None = None) -> None:
        if default_window is not None and (not isinstance(default_window, int) or default_window <= 0):
            raise UsageError(f"default_window must be a positive number of tokens, got {default_window!r}")
        self.registry: Registry = load_registry(registry)
        self.default_window = default_window

    def engine(self, model: str, store: Store, window: int | None, artifacts: ArtifactStore | None = None) -> Engine:
        """An engine for ``model`` over ``store`` (``window``: the server's cap on every window; ``artifacts``: where
        offloaded results go, None for the store)."""
        if self.registry.find(model) is None:
            if self.default_window is None:
                raise UnknownModelError(
                    f"model {model!r} is not in windowsmith's registry, so its window is unknown: start the server "
                    "with --default-window TOKENS (its context window) or --registry FILE (a JSON or TOML file "
                    "describing it)")
            reg = Registry([fallback_spec(model, self.default_window)])
            return Engine(model, store=store, registry=reg, window=window, artifacts=artifacts)
        return Engine(model, store=store, registry=self.registry, window=window, artifacts=artifacts)


__all__ = ["FALLBACK_TOKENIZER", "Models", "fallback_spec"]
