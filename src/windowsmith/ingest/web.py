"""Compressors for what data-fetching tools return: JSON (its shape and a truncated sample), search results
(titles, URLs, snippets) and HTML pages (their text)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from typing import Any

from ..text import JSON_PARSE_LIMIT, NOT_JSON, head_tail, try_json
from ..text_view import cap_line
from .compressors import SCAN_LIMIT, Context, fit_levels

# ---------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(v), type(v).__name__)


def _shape(v: Any, depth: int, max_keys: int) -> str:
    if isinstance(v, dict):
        if not v:
            return "{}"
        if depth <= 0:
            return f"{{…{len(v)} keys}}"
        items = [f"{k}: {_shape(x, depth - 1, max_keys)}" for k, x in list(v.items())[:max_keys]]
        more = f", …+{len(v) - max_keys} keys" if len(v) > max_keys else ""
        return "{" + ", ".join(items) + more + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        if depth <= 0:
            return f"array[{len(v)}]"
        sample = v[:20]
        if all(isinstance(x, dict) for x in sample):
            merged: dict[str, Any] = {}
            for x in sample:
                for k, val in x.items():
                    merged.setdefault(k, val)
            return f"array[{len(v)}] of {_shape(merged, depth - 1, max_keys)}"
        kinds = sorted({_shape(x, depth - 1, max_keys) for x in sample[:5]})
        return f"array[{len(v)}] of {' | '.join(kinds[:3])}"
    return _type_name(v)


def _truncate(v: Any, items: int, chars: int, depth: int) -> Any:
    if isinstance(v, str):
        return v if len(v) <= chars else f"{v[:chars]}…(+{len(v) - chars:,} chars)"
    if isinstance(v, list):
        if depth <= 0:
            return f"…array[{len(v)}]"
        out = [_truncate(x, items, chars, depth - 1) for x in v[:items]]
        if len(v) > items:
            out.append(f"… +{len(v) - items:,} more items")
        return out
    if isinstance(v, dict):
        if depth <= 0:
            return f"…object with {len(v)} keys"
        keys = list(v)[: max(items * 4, 8)]
        out_d = {k: _truncate(v[k], items, chars, depth - 1) for k in keys}
        if len(v) > len(keys):
            out_d["…"] = f"+{len(v) - len(keys):,} more keys"
        return out_d
    return v


def _scalars(v: Any, limit: int) -> list[str]:
    """``path = value`` for scalar fields at the top two levels of an object."""
    out: list[str] = []
    if not isinstance(v, dict):
        return out
    for k, x in v.items():
        if isinstance(x, str | int | float | bool) or x is None:
            out.append(f"{k} = {json.dumps(_truncate(x, 0, 120, 0), ensure_ascii=False)}")
        elif isinstance(x, dict):
            for k2, y in list(x.items())[:20]:
                if isinstance(y, str | int | float | bool) or y is None:
                    out.append(f"{k}.{k2} = {json.dumps(_truncate(y, 0, 120, 0), ensure_ascii=False)}")
        if len(out) >= limit:
            break
    return out[:limit]


def json_shape(text: str, ctx: Context) -> str | None:
    data = try_json(text)
    if data is NOT_JSON:
        ctx.notes.append("not valid JSON" if len(text) <= JSON_PARSE_LIMIT else "JSON too large to parse")
        return None
    if find_results(data):
        return _search_from_data(data, ctx)
    top = f"object with {len(data):,} keys" if isinstance(data, dict) else (
        f"array of {len(data):,} items" if isinstance(data, list) else _type_name(data)
    )
    header = f"[json: {top}, {len(text):,} chars]"
    levels = [
        (6, 40, 30, 3, 200, True), (5, 30, 20, 3, 120, True), (4, 20, 15, 2, 80, True), (3, 15, 10, 2, 60, True),
        (3, 12, 8, 1, 40, True), (2, 10, 5, 1, 30, False), (2, 8, 3, 0, 0, False), (1, 6, 0, 0, 0, False),
        (1, 3, 0, 0, 0, False), (0, 0, 0, 0, 0, False),
    ]  # fmt: skip

    def build(i: int) -> str:
        depth, max_keys, n_scalars, items, chars, with_sample = levels[i]
        parts = [header, "shape: " + _shape(data, depth, max_keys)]
        sc = _scalars(data, n_scalars)
        if sc:
            parts.append("fields:")
            parts.extend("  " + s for s in sc)
        if with_sample:
            sample = json.dumps(_truncate(data, items, chars, depth), ensure_ascii=False, separators=(",", ":"))
            parts.append("sample (truncated): " + sample)
        return "\n".join(parts)

    ctx.notes.append("json shape summary")
    return fit_levels(build, len(levels), ctx)


# ---------------------------------------------------------------------------------------------------
# search results
# ---------------------------------------------------------------------------------------------------

_TITLE_KEYS = ("title", "name", "headline")
_URL_KEYS = ("url", "link", "href", "uri", "source_url", "source")
_SNIPPET_KEYS = ("snippet", "description", "content", "text", "body", "summary", "abstract", "highlights")
_LIST_KEYS = ("results", "items", "organic_results", "organic", "hits", "data", "documents", "value", "web", "news")


def _first_str(d: Mapping[str, Any], keys: Sequence[str]) -> str:
    for k in keys:
        v = d.get(k)
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return " … ".join(v)
    return ""


def find_results(data: Any, depth: int = 3) -> list[dict[str, Any]]:
    """The list of search results in a parsed response: dicts with a URL and a title or snippet."""
    if isinstance(data, list):
        dicts = [x for x in data if isinstance(x, dict)]
        if dicts and len(dicts) >= 0.8 * len(data):
            good = [d for d in dicts if _first_str(d, _URL_KEYS) and (_first_str(d, _TITLE_KEYS) or _first_str(d, _SNIPPET_KEYS))]
            if good and len(good) >= 0.5 * len(dicts):
                return dicts
        return []
    if isinstance(data, dict) and depth > 0:
        for k in _LIST_KEYS:
            if k in data:
                found = find_results(data[k], depth - 1)
                if found:
                    return found
    return []


def _render_results(results: list[tuple[str, str, str]], total: int, n: int, chars: int) -> str:
    parts = [f"[search results: {total:,} results" + (f", top {n} shown]" if n < total else "]")]
    for i, (title, url, snippet) in enumerate(results[:n], 1):
        parts.append(f"{i}. {cap_line(' '.join(title.split()), 200) or '(no title)'}")
        if url:
            parts.append(f"   {cap_line(url, 300)}")
        s = " ".join(snippet.split())
        if chars and s:
            parts.append("   " + (s if len(s) <= chars else s[:chars] + "…"))
    return "\n".join(parts)


def _fit_results(results: list[tuple[str, str, str]], ctx: Context) -> str | None:
    total = len(results)
    ns = sorted({min(total, n) for n in (total, 20, 10, 8, 5, 3, 2, 1)}, reverse=True)
    levels = [(n, c) for n in ns for c in (400, 200)] + [(ns[-1], 100), (ns[-1], 0)]
    levels = sorted(set(levels), key=lambda lc: (-lc[0], -lc[1]))
    ctx.notes.append(f"{total} search results")
    return fit_levels(lambda i: _render_results(results, total, *levels[i]), len(levels), ctx)


def _search_from_data(data: Any, ctx: Context) -> str | None:
    results = [
        (_first_str(d, _TITLE_KEYS), _first_str(d, _URL_KEYS), _first_str(d, _SNIPPET_KEYS)) for d in find_results(data)
    ]
    return _fit_results(results, ctx) if results else None


_URL = re.compile(r"https?://[^\s<>\"')\]]{3,2000}")


def search_results(text: str, ctx: Context) -> str | None:
    data = try_json(text)
    if data is not NOT_JSON:
        out = _search_from_data(data, ctx)
        if out is not None:
            return out
    blocks = re.split(r"\n\s*\n|\n(?=\s{0,3}\d{1,3}[.)] )", text[:SCAN_LIMIT])
    results: list[tuple[str, str, str]] = []
    for block in blocks:
        m = _URL.search(block)
        if not m:
            continue
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        title = next((ln for ln in lines if m.group(0) not in ln), "")
        title = re.sub(r"^(?:\d{1,3}[.)]\s*|title:\s*|#+\s*)", "", title, flags=re.I)
        snippet = " ".join(ln for ln in lines if ln != lines[0] and m.group(0) not in ln) if len(lines) > 1 else ""
        results.append((title, m.group(0), snippet))
    return _fit_results(results, ctx) if results else None


# ---------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------

_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas", "head"})
_BLOCK_TAGS = frozenset(
    ("p", "div", "br", "hr", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "section",
     "article", "header", "footer", "nav", "aside", "main", "pre", "blockquote", "dd", "dt", "dl", "form",
     "title", "figcaption", "details", "summary")
)  # fmt: skip


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.title: list[str] = []
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in _SKIP_TAGS:
            self.skip += 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in _SKIP_TAGS and self.skip:
            self.skip -= 1
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, visible text) of an HTML page; scripts, styles and markup dropped."""
    p = _TextExtractor()
    p.feed(html[:SCAN_LIMIT])
    p.close()
    lines = (" ".join(ln.split()) for ln in "".join(p.parts).splitlines())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(ln for ln in lines if ln))
    return " ".join("".join(p.title).split()), text


def html_page(text: str, ctx: Context) -> str | None:
    title, body = html_to_text(text)
    header = f"[html page{': ' + cap_line(title, 200) if title else ''} — {len(text):,} chars of HTML, {len(body):,} chars of text]"
    ctx.notes.append("html text extraction")
    room = ctx.budget - ctx.count(header + "\n")
    if room <= 0:
        return None
    return header + "\n" + head_tail(body, room, ctx.count, head_fraction=0.8)


__all__ = ["find_results", "html_page", "html_to_text", "json_shape", "search_results"]
