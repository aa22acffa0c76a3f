"""windowsmith's token count of a request against what the provider billed for it.

tau2-bench's gpt-4.1 retail file records, for every agent call, the ``prompt_tokens`` OpenAI billed.
Each of those requests is rebuilt with windowsmith (model gpt-4.1, format openai-chat, the model's
full window so nothing is dropped, the trace's system prompt and messages before the call) and
counted two ways: windowsmith's exact count (``pack.tokens``) and ``len(json.dumps(request)) / 4``
(the request as sent to the SDK). The relative error is ``(estimate - billed) / billed``.

Caveat, measured not hidden: the published file has ``tool_defs: null``, so the tool definitions that
were billed are not in the trace and both estimates miss them (a constant block per run). Three
figures are therefore reported for each estimator:

* ``absolute``: the error as is (tool definitions missing: both undercount);
* ``first_call_offset``: per run, the difference ``billed - estimate`` of the first call is added to
  the estimate of every later call of that run (an additive calibration on one observation), and the
  error is measured on the later calls only;
* ``increments``: the error on the growth between consecutive calls of a run,
  ``(Δestimate - Δbilled) / Δbilled``, which the missing constant block cancels out of.

A fourth estimator, ``calibrated`` ("windowsmith, calibrated online"), is what the engine does in
production: a second engine builds the same requests and, after each billed call, records its usage
with ``Session.record``, which feeds the engine's ``tokens.Calibration`` (``billed ≈ offset + slope x
count``, the line through the newest billed call) and stores it per model. Call k of a run is therefore
counted with what calls 1..k-1 of its run taught the engine, starting from what the engine stored after
the earlier runs billed by the same model, in replay order (a new session's prior slope is the median of
the slopes the earlier sessions fitted): an engine serving one model sees many sessions. Nothing is
learnt from the current call, the run's later calls or later runs. Its ``absolute`` error covers every
call, ``after_first`` the calls after the first of each run (the calls the offset also covers).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .metrics import percentile

#: an offload threshold no tool result reaches
_NEVER = 1 << 40


def _stats(errors: list[float]) -> dict[str, Any]:
    a = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "median_abs": round(statistics.median(a), 4) if a else None,
        "p95_abs": round(percentile(a, 95), 4) if a else None,
        "median_signed": round(statistics.median(errors), 4) if errors else None,
    }


def _by_run(samples: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_run: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_run.setdefault(s["run"], []).append(s)
    for ss in by_run.values():
        ss.sort(key=lambda s: s["call"])
    return by_run


def count_samples(paths: Sequence[str | Path], *, model: str = "gpt-4.1", fmt: str = "openai-chat",
                  registry: str | None = None, limit_runs: int | None = None, split: str = "all",
                  traces: Sequence[Any] | None = None, stored: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One sample per billed call: ``{run, call, billed, windowsmith, calibrated, len4}`` (at most
    ``limit_runs`` runs per file, of ``split``; or over ``traces`` when given). ``calibrated`` is the
    count of an engine that records each call's billed usage (``Session.record``) after building it,
    so call k of a run is counted with the calibration learnt from calls 1..k-1 of its run, starting
    from what the engine stored after the earlier runs (in replay order), as a production engine that
    serves many sessions of one model does; never from the current run's later calls or later runs.

    ``stored``: the engine's stored calibration before the first run (``Calibration.to_dict``; None: a
    fresh store); the dict is updated in place with what the engine stored after the last run, so a caller
    can carry it to the next file billed by the same model."""
    from ..compaction.config import CompactionConfig
    from ..engine import Engine
    from ..ingest.pipeline import IngestConfig
    from ..tokens import Calibration
    from ..traces import load_traces
    from .metrics import prepare, split_of

    def runs() -> Any:
        if traces is not None:
            yield from traces
            return
        for p in paths:
            picked = [t for t in load_traces(p) if split == "all" or split_of(t.id) == split]
            yield from picked[: limit_runs if limit_runs else None]

    out: list[dict[str, Any]] = []
    # the request as the agent sent it: no tool result offloaded to a compressed view, no secret redacted,
    # no compaction (each would make windowsmith's request differ from the billed one; that is not the count's error)
    as_sent: dict[str, Any] = {"ingest": IngestConfig(offload_tokens=_NEVER, redact=False),
                               "compaction": CompactionConfig(enabled=False)}
    carried: dict[str, Any] = dict(stored) if stored else Calibration().to_dict()
    with tempfile.TemporaryDirectory(prefix="ws-billing-") as d, \
            Engine(model, store=os.path.join(d, "billing.db"), format=fmt, registry=registry, **as_sent) as eng, \
            Engine(model, store=os.path.join(d, "calibrated.db"), format=fmt, registry=registry, **as_sent) as cal_eng:
        cal_key = f"{cal_eng.spec.name}|{fmt}"
        for t in runs():
            billed = t.billed or {}
            if not billed:
                continue
            run = prepare(t)
            if len(run.messages) != len(t.messages):  # repaired: indices of billed usage would shift
                continue
            # the engine as it runs in production: Session.record() feeds the billed usage of each call into
            # its Calibration, which scales the counts of the later calls, and stores it per model; a new
            # session starts from what the earlier sessions stored (their slopes are its prior)
            cal_eng.store.set_kv("calibration", cal_key, carried)
            sessions = [eng.session(f"billing-{t.id}"), cal_eng.session(f"billing-{t.id}")]
            for s in sessions:
                if t.system:
                    s.system(t.system)
                if t.tools:
                    s.tools(t.tools)
            raw_s, cal_s = sessions
            call = 0
            for i, m in enumerate(run.messages):
                if m.role == "assistant" and raw_s.state.units:
                    call += 1
                    u = billed.get(i)
                    if u is not None and u.prompt_tokens > 0:
                        pack = raw_s.build(fmt)
                        cal_pack = cal_s.build(fmt)  # counted before this call's usage is recorded
                        out.append({
                            "run": t.id, "call": call, "billed": u.prompt_tokens, "windowsmith": pack.tokens,
                            "calibrated": cal_pack.tokens,
                            "len4": len(json.dumps(pack.request, ensure_ascii=False)) / 4,
                        })
                        cal_s.record(usage=u, pack=cal_pack)
                for s in sessions:
                    s.add(m)
            eng.store.delete_session(raw_s.id)
            cal_eng.store.delete_session(cal_s.id)
            carried = cal_eng.store.get_kv("calibration", cal_key) or carried
    if stored is not None:
        stored.clear()
        stored.update(carried)
    return out


def token_count_error(paths: Sequence[str | Path], *, model: str = "gpt-4.1", fmt: str = "openai-chat",
                      registry: str | None = None, limit_runs: int | None = None, split: str = "all",
                      traces: Sequence[Any] | None = None, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """Median and p95 relative error of windowsmith's count and of len/4 against billed prompt tokens
    (``stored``: see :func:`count_samples`)."""
    samples = count_samples(paths, model=model, fmt=fmt, registry=registry, limit_runs=limit_runs, split=split,
                            traces=traces, stored=stored)
    res: dict[str, Any] = {"model": model, "format": fmt, "files": [str(p) for p in paths], "calls": len(samples),
                           "runs": len({s["run"] for s in samples})}
    for key in ("windowsmith", "len4"):
        absolute = [(s[key] - s["billed"]) / s["billed"] for s in samples]
        offset: list[float] = []
        inc: list[float] = []
        for ss in _by_run(samples).values():
            off = ss[0]["billed"] - ss[0][key]
            for s in ss[1:]:
                offset.append((s[key] + off - s["billed"]) / s["billed"])
            for a, b in itertools.pairwise(ss):
                db = b["billed"] - a["billed"]
                if db > 0:
                    inc.append(((b[key] - a[key]) - db) / db)
        res[key] = {"absolute": _stats(absolute), "first_call_offset": _stats(offset), "increments": _stats(inc)}
    # the engine's own online calibration: each call counted with what the earlier calls of its run (and the
    # earlier runs of its model) taught it
    later = {(s["run"], s["call"]) for ss in _by_run(samples).values() for s in ss[1:]}
    res["calibrated"] = {
        "absolute": _stats([(s["calibrated"] - s["billed"]) / s["billed"] for s in samples]),
        "after_first": _stats([(s["calibrated"] - s["billed"]) / s["billed"] for s in samples
                               if (s["run"], s["call"]) in later]),
    }
    res["tools_recorded"] = False
    return res


#: the registry model counted for a billing model the registry does not have, by family
FAMILY_FALLBACK = {"gemini": "gemini-2.5-pro", "claude": "claude-sonnet-4-5", "gpt": "gpt-4.1"}


def billed_model(traces: Sequence[Any], registry: Any, fallback: str) -> tuple[str, bool]:
    """The registry model that the traces' billed usage came from (``meta["model"]``, a provider
    prefix or a date suffix dropped), and whether it was found. A model the registry does not have
    is counted as its family's model (:data:`FAMILY_FALLBACK`), else as ``fallback``: its tokenizer
    is then not the one that billed."""
    import re

    names = {str((t.meta or {}).get("model") or "") for t in traces} - {""}
    for raw in sorted(names):
        cand = raw.split("/")[-1]
        for c in (cand, re.sub(r"-\d{8}$", "", cand), re.sub(r"-\d{4}-\d{2}-\d{2}$", "", cand)):
            try:
                return registry.get(c).name, True
            except Exception:
                continue
    for raw in sorted(names):
        for fam, model in FAMILY_FALLBACK.items():
            if fam in raw.lower():
                return model, False
    return fallback, False


def token_count_by_file(files: Sequence[str | Path], *, registry: str | None = None, limit_runs: int | None = None,
                        split: str = "all", fallback_model: str = "gpt-4.1") -> list[dict[str, Any]]:
    """:func:`token_count_error` for every trace file with billed usage, each with the model that
    billed it (the trace's ``meta["model"]``; ``fallback_model`` when it is not in the registry),
    honouring ``limit_runs`` and ``split`` as the bench does.

    The files are replayed in the order given, and the calibrating engine's store is shared by the files
    billed by the same model (the trace's model, provider prefix dropped) and counted as the same registry
    model: an engine serving one model sees many sessions. A run's "calibrated online" count therefore
    starts from what the earlier runs of that model (earlier files, earlier runs of its file, of the same
    split) taught the engine, never from its own later calls or from later runs."""
    from ..registry import load_registry
    from ..traces import load_traces
    from .metrics import split_of

    reg = load_registry(registry)
    out = []
    stores: dict[tuple[Any, ...], dict[str, Any]] = {}  # one calibrating engine store per billing model
    for f in files:
        picked = [t for t in load_traces(f) if split == "all" or split_of(t.id) == split]
        picked = [t for t in picked[: limit_runs if limit_runs else None] if t.billed]
        if not picked:
            continue
        model, known = billed_model(picked, reg, fallback_model)
        spec = reg.get(model)
        by = sorted({str((t.meta or {}).get("model") or "?").split("/")[-1] for t in picked})
        stored = stores.setdefault((model, spec.default_format, *by), {})
        res = token_count_error([f], model=model, fmt=spec.default_format, registry=registry, traces=picked,
                                stored=stored)
        if not res["calls"]:
            continue
        res["file"] = str(f)
        res["model_from_trace"] = known
        res["billed_by"] = sorted({str((t.meta or {}).get("model") or "?") for t in picked})
        res["tools_recorded"] = all((t.meta or {}).get("tools_recorded", True) for t in picked)
        out.append(res)
    return out


__all__ = ["FAMILY_FALLBACK", "billed_model", "count_samples", "token_count_by_file", "token_count_error"]
