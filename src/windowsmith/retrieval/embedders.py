"""Embedders for hybrid retrieval, each behind its extra and imported lazily.

* :class:`WordLlamaEmbedder` (``pip install 'windowsmith[vectors]'``): WordLlama's ``l2_supercat``
  static token embeddings (256 dimensions), whose weights and tokenizer ship inside the ``wordllama``
  wheel, so it works offline: nothing is downloaded, ever (``disable_download=True``).
* :class:`OpenAIEmbedder` (``pip install 'windowsmith[openai]'``): the OpenAI embeddings endpoint
  through the official SDK (``text-embedding-3-small`` by default).

Vectors are stored on the chunks themselves (float32, little-endian) in the same store.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError

MAX_EMBED_CHARS = 8000


class WordLlamaEmbedder:
    """Offline static embeddings from the ``wordllama`` package's shipped weights."""

    def __init__(self, dim: int = 256) -> None:
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError:
            raise ConfigError("the offline embedder needs wordllama: pip install 'windowsmith[vectors]'") from None
        shipped = Path(wordllama.__file__).parent  # holds weights/ and tokenizers/ as the wheel ships them
        try:
            self._model: Any = WordLlama.load(config="l2_supercat", dim=dim, cache_dir=shipped, disable_download=True)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(f"the wordllama package lacks its shipped l2_supercat weights ({e}); reinstall it") from None
        self.name = f"wordllama-l2_supercat-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vecs = self._model.embed([t[:MAX_EMBED_CHARS] for t in texts], norm=True)
        return [list(map(float, v)) for v in vecs]


class OpenAIEmbedder:
    """OpenAI embeddings over the official SDK (pass ``client=`` to reuse one, e.g. with a mock transport)."""

    def __init__(self, model: str = "text-embedding-3-small", *, client: Any = None, batch: int = 256) -> None:
        if client is None:
            try:
                import openai
            except ImportError:
                raise ConfigError("OpenAI embeddings need the SDK: pip install 'windowsmith[openai]'") from None
            client = openai.OpenAI(timeout=60.0)
        self._client = client
        self.model = model
        self.batch = batch
        self.name = f"openai-{model}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch):
            part = [t[:MAX_EMBED_CHARS] or " " for t in texts[i:i + self.batch]]
            resp = self._client.embeddings.create(model=self.model, input=part)
            out.extend(list(map(float, d.embedding)) for d in sorted(resp.data, key=lambda d: d.index))
        return out


__all__ = ["OpenAIEmbedder", "WordLlamaEmbedder"]
