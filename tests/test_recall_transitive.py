"""Recoverable recall follows artifact references inside artifacts (a transcript chain)."""

from __future__ import annotations

import hashlib

from windowsmith.bench.identifiers import extract_identifiers
from windowsmith.bench.metrics import recall
from windowsmith.model import Message, Text
from windowsmith.request import NeutralRequest


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _req(text: str) -> NeutralRequest:
    return NeutralRequest(model="m", system=(), session=(), tools=(), messages=(Message("user", (Text(text),)),),
                          tail=None, max_output_tokens=100, cache_key="k")


def test_identifier_two_artifacts_deep_is_recoverable_not_strict():
    deep = b"Traceback: ValueError in src/billing/refund_calc.py line 12\n"
    middle = f"[earlier history: artifact://{_sha(deep)}]\nASSISTANT: looked at the invoice\n".encode()
    blobs = {_sha(deep): deep, _sha(middle): middle}
    targets = frozenset(extract_identifiers("open src/billing/refund_calc.py"))
    assert "src/billing/refund_calc.py" in targets
    req = _req(f"summary so far; transcript: artifact://{_sha(middle)}")

    def resolve(ref: str) -> bytes | None:
        return blobs.get(ref.removeprefix("artifact://"))

    strict, recov = recall(req, targets, resolve=resolve)
    assert strict == 0
    assert recov == len(targets)
    # without a resolver nothing behind a reference counts
    assert recall(req, targets) == (0, 0)
    # a broken chain (the deep blob missing) leaves the identifier unreachable
    blobs.pop(_sha(deep))
    from windowsmith.bench import metrics

    metrics._blob_ids.clear()
    assert recall(req, targets, resolve=resolve) == (0, 0)


def test_reference_cycles_terminate():
    a_text = b"see artifact://" + b"b" * 64 + b" and FooBarError"
    b_text = b"see artifact://" + b"a" * 64
    blobs = {"a" * 64: a_text, "b" * 64: b_text}
    from windowsmith.bench import metrics

    metrics._blob_ids.clear()
    targets = frozenset({"FooBarError", "MissingThing"})
    strict, recov = recall(_req("artifact://" + "a" * 64), targets,
                           resolve=lambda r: blobs.get(r.removeprefix("artifact://")))
    assert (strict, recov) == (0, 1)
