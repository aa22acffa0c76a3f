"""The reference and fold-key scanners: the linear-time versions find exactly what the plain patterns
find (property tests against the patterns they replace), and one compaction scans each result once."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from windowsmith.compaction import references as R
from windowsmith.compaction import summarizer as S
from windowsmith.compaction.summarizer import _recent_identifiers
from windowsmith.model import Message, Text

PIECES = ["a", "Z", "_", "1", "0", "9", "#", "@", ".", "/", "-", "+", ":", "(", ")", "()", " ", "\n", "\r\n", "\t",
          "def ", "class ", "fn\n", "Error", "Exception", "ValueError", "xfailed", "FAILED", "failed", "error:",
          "fatal:", "panic:", "not found", "deNIED", "Traceback", "src/", ".py", "a.py:12", "../", "x.com", "a@b.co",
          "é", "ß", "\u017f", "\u212a", "\u0130", "ID", "AB12C", "req-", "snake_case", "HAT170", "#W23", "abc", "DEF9", "0123456789abcdef",
          "[REDACTED:aws]", '"first_name": ', "'a_bc':", "credit_card", "_1402274", "2024-05-17", "T19:22"]
texts = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


def plain_items(text: str, errors: bool) -> list[tuple[str, str]]:
    """What ``_scan_text`` found before it was made linear: one ``findall`` per pattern."""
    out = [("artifact", f"artifact://{sha}") for sha in R.ARTIFACT_RE.findall(text)]
    out += [("url", u.rstrip(".:")) for u in R._URL_RE.findall(text)[:20]]
    out += [("file", f) for f in R._FILE_RE.findall(text)[:30]]
    out += [("function", a or b) for a, b in R._FUNC_RE.findall(text)[:20]]
    out += [("id", i) for i in R._ID_RE.findall(text)[:20]]
    if errors:
        out += [("error", R._clip(e, 200)) for e in R._ERROR_RE.findall(text)[:2]]
    return out


def plain_keys(text: str, limit: int) -> list[str]:
    """``result_keys``: the first ``KEY_SCAN`` keys (at least ``limit``) found, kind words left out, dates after
    the rest, then the first ``limit``."""
    cap = max(limit, R.KEY_SCAN)
    seen: dict[str, None] = {}
    text = text[:50_000]
    if "[windowsmith:" in text or "[binary output:" in text or "[REDACTED:" in text or "[image: " in text:
        text = R.BOILERPLATE_RE.sub(" ", text)
    for m in R._KEY_RE.finditer(text):
        k = m.group(0)
        if len(k) <= 48 and k not in seen:
            seen[k] = None
            if len(seen) >= cap:
                break
    # a kind word before its ids ('credit_card' beside 'credit_card_1402274') is left out
    out = [k for k in seen if not any(re.fullmatch(re.escape(k) + r"_\d+", o) for o in seen) or "_" not in k]
    dates = [k for k in out if re.fullmatch(r"\d{4}-\d{2}-\d{2}", k)]
    return ([k for k in out if k not in dates] + dates)[:limit]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(texts)
def test_scanners_find_what_the_plain_patterns_find(text: str) -> None:
    for errors in (False, True):
        assert [(k, v) for k, v, _ in R._scan_items(text, errors)] == plain_items(text, errors)
    for limit in (1, 3, 100):
        assert R.error_lines(text, limit) == R._ERROR_RE.findall(text)[:limit]
    R._KEYS.items.clear()
    for limit in (3, 12, 40, 60):
        assert R.result_keys(text, limit) == plain_keys(text, limit)


# texts whose lines repeat (log and test output): the scanners read a repeated line once
RICH_LINES = ["req-00123 ab_4567 #9012 user_id=8901", "FAILED src/a.py::t - KeyError at b/c.py:3 and x.py",
              "call do_it() and x.y() then def handle_it(", "error: see https://x.com/i/42?q=1 HAT170 ZFA04Y",
              "0123456789abcdef" * 4, ""]
repeating = st.lists(st.one_of(texts, st.sampled_from(RICH_LINES)), min_size=1, max_size=4).flatmap(
    lambda lines: st.lists(st.sampled_from(lines), min_size=1, max_size=12)).map("\n".join)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(repeating)
def test_scanners_reading_a_repeated_line_once_find_what_the_plain_patterns_find(text: str) -> None:
    R._SCANS.items.clear()
    for errors in (False, True):
        assert [(k, v) for k, v, _ in R._scan_items(text, errors)] == plain_items(text, errors)
    R._KEYS.items.clear()
    for limit in (3, 12, 40):
        assert R.result_keys(text, limit) == plain_keys(text, limit)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(texts, min_size=1, max_size=2), min_size=1, max_size=8),
       st.lists(st.sampled_from(["old_one", "snake_case", "HAT170", "two_x"]), max_size=4), st.integers(0, 12))
def test_recent_identifiers_read_backwards_equal_the_forward_fold(blocks: list[list[str]], earlier: list[str],
                                                                   n: int) -> None:
    messages = [Message("user", tuple(Text(t) for t in b if t) or (Text("x"),)) for b in blocks]
    idents: dict[str, None] = dict.fromkeys(earlier)
    for m in messages:
        for b in m.content:
            for k in R.result_keys(b.text, 40):
                idents.pop(k, None)
                idents[k] = None
    assert _recent_identifiers(messages, earlier, n) == list(idents)[-n:]


def test_long_word_runs_and_error_lines_scan_in_linear_steps() -> None:
    """A 640-character hex run is stepped over in one match of the skipping branch, not one failed
    attempt per character per branch; error lines are tested by substring before any pattern runs."""
    run = "0123456789abcdef" * 40
    skips = [m for m in R._key_pattern(run).finditer(run) if m.group(1) is None]
    assert [m.span() for m in skips] == [(0, len(run))]
    assert list(R._found(R._key_pattern(run), run)) == []
    calls = []
    pattern = R._ERROR_WORD_RE
    try:
        R._ERROR_WORD_RE = _Counting(pattern, calls)  # type: ignore[assignment]
        text = "\n".join(["ok line"] * 1000 + ["FAILED tests/a.py::t - AssertionError"])
        assert R.error_lines(text, 3) == ["FAILED tests/a.py::t - AssertionError"]
    finally:
        R._ERROR_WORD_RE = pattern
    assert len(calls) == 1  # one line holds a hint: one search, not a scan of every line


dotted = st.lists(st.sampled_from(["a", "b.", ".", "()", "(", ")", "def ", "fn\t", "class  ", "1", "_", " ", "x.def y",
                                    ".def z", "a.b", "\n", "é", "func", "tion ", "Z9", ".5"]), max_size=16).map("".join)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(dotted)
def test_function_names_step_over_dotted_runs_and_find_what_the_plain_pattern_finds(text: str) -> None:
    assert list(R._func_names(R._FUNC_RE, text)) == [a or b for a, b in R._FUNC_RE.findall(text)]
    assert list(R._func_names(R._FUNC_PAREN_RE, text)) == R._FUNC_PAREN_RE.findall(text)
    run = "ab" + "a." * 2000 + "a()"  # one match of the call branch, not a retry from each of 2,000 starts
    assert [m.group(1) for m in R._FUNC_PAREN_SKIP.finditer(run)] == [run[:-2]]
    assert [m.group(0) for m in R._FUNC_PAREN_SKIP.finditer(run[:-2] + " x")] == [run[:-2]]  # a dotted run skipped


class _Counting:
    def __init__(self, pattern: re.Pattern[str], calls: list[str]) -> None:
        self.pattern, self.calls = pattern, calls

    def search(self, s: str) -> re.Match[str] | None:
        self.calls.append(s)
        return self.pattern.search(s)

    def finditer(self, s: str):  # type: ignore[no-untyped-def]
        self.calls.append(s)
        return self.pattern.finditer(s)


def test_a_result_is_scanned_once_for_its_fold_and_its_references() -> None:
    text = "FAILED tests/test_x.py::test_y - KeyError\nsrc/pkg/mod_a.py line 3 in handle_it\n" * 5
    R._KEYS.items.clear()
    R._SCANS.items.clear()
    calls = []
    real = R._result_keys
    try:
        R._result_keys = lambda t, limit: calls.append(t) or real(t, limit)  # type: ignore[assignment]
        fold = R.result_keys(text, 12)
        summary = R.result_keys(text, 40)
    finally:
        R._result_keys = real
    assert len(calls) == 1 and summary[:12] == fold
    first = R._scan_items(text, False)
    assert R._scan_items(text, False) is first  # the second reader (the summary's references) reuses it


PATH_PLAIN = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://)?[\w.~-]*(?:/[\w.~-]+)+")
path_texts = st.lists(st.sampled_from(["a", "Z", "1", "_", "~", ".", "-", "+", "/", "//", ":", "://", "http", "x", "é",
                                       " ", "\n", "@", "0123456789abcdef", "1http://", "_http://", "a/b", "~/", ".."]),
                      max_size=30).map("".join)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(path_texts)
def test_query_term_paths_are_the_plain_patterns_matches(text: str) -> None:
    from windowsmith.retrieval import terms

    assert [m.span() for m in terms._PATH.finditer(text)] == [m.span() for m in PATH_PLAIN.finditer(text)]


@pytest.mark.slow
def test_query_terms_of_a_long_word_run_take_linear_steps() -> None:
    """A 64 KB run of hex is stepped over once per branch, not once per character (the plain pattern
    took seconds on it); what ``identifiers`` finds around it is unchanged."""
    from windowsmith.retrieval import terms

    run = "0123456789abcdef" * 4096
    text = f"see src/pkg/mod_a.py and https://example.com/x/y\n{run}\nthen docs/guide.md"
    assert [m.group(0) for m in terms._PATH.finditer(text)] == [m.group(0) for m in PATH_PLAIN.finditer(text[:60])] + [
        "docs/guide.md"]
    assert terms.identifiers(text)[:3] == ["src/pkg/mod_a.py", "https://example.com/x/y", "docs/guide.md"]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=400))
def test_keys_found_in_pieces_of_lines_equal_one_scan_of_the_whole_text(lines: list[str]) -> None:
    """``_found`` scans a long text a few KB of lines at a time: the matches are those of one scan."""
    text = "\n".join(lines)
    pattern = R._key_pattern(text)
    assert list(R._found(pattern, text)) == [m.group(1) for m in pattern.finditer(text) if m.group(1)]


# The summarizer's sentence patterns: the patterns they replaced, retried from every character of a long sentence
# without a match, were quadratic (5 s on 8,000 characters); the one-pass forms must find exactly what they found.
_SENT = r"(?:[^.!?\n]|[.!?](?=\S))"
_OLD_PREF = re.compile(_SENT + r"*\b(?:I prefer|prefer|please always|always|never|don't|do not|make sure|I want|I need|must)\b"
                       + _SENT + r"*[.!?]?", re.I)
_OLD_NEXT = re.compile(_SENT + r"*\b(?:next|then I|I will|I'll|now I|going to)\b" + _SENT + r"*[.!?]?", re.I)
_OLD_QUESTION = re.compile(r"[^.!?\n]{8,}\?")
_sentence_text = st.lists(
    st.sampled_from(["a", "b", "x1", " ", "  ", ".", "!", "?", "\n", "'", "-", "refund.py", "I", "prefer", "always",
                     "never", "don't", "do not", "must", "NEXT", "next", "then I", "I'll", "going to", "alwaysx",
                     "xnext", "I want", "make sure", "?!", ".."]),
    max_size=40,
).map("".join)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(_sentence_text)
def test_summarizer_sentence_scans_find_what_the_backtracking_patterns_found(text: str) -> None:
    assert R.sentences_with(S.PREFERENCE_WORDS, text) == _OLD_PREF.findall(text)
    assert R.sentences_with(S.PREFERENCE_WORDS, text, 3) == _OLD_PREF.findall(text)[:3]
    assert R.sentences_with(S.NEXT_STEP_WORDS, text) == _OLD_NEXT.findall(text)
    assert S.QUESTION_RE.findall(text) == _OLD_QUESTION.findall(text)


def test_summarizer_sentence_scan_reads_a_long_sentence_once() -> None:
    """A long sentence without a keyword is one match of the sentence pattern (the old pattern started one match
    attempt at each of its characters) and yields nothing."""
    text = "a " * 10_000 + "and I prefer tabs. " + "b " * 10_000
    assert [m.group() for m in R.SENTENCE_RE.finditer(text)] == ["a " * 10_000 + "and I prefer tabs.", " " + "b " * 10_000]
    assert R.sentences_with(S.PREFERENCE_WORDS, text) == ["a " * 10_000 + "and I prefer tabs."]
    assert R.sentences_with(S.NEXT_STEP_WORDS, text) == []


#: the fold keys' path branch before it started only where its run does: after a '-' inside a run of path
#: characters it tried again from every start, reading to the run's end each time (quadratic on '-a-a-a…')
OLD_PATH_KEY = re.compile(r"(?<![\w/.])(?:[\w.-]+/)+[\w-][\w.-]*\.[A-Za-z0-9]{1,8}\b")
PATH_KEY = re.compile(next(b for b, need in R._KEY_BRANCHES if need == ("/",)))
path_texts = st.lists(st.sampled_from(["a", "-", "/", ".", "py", "x1", " ", "\n", "src/", "-a", "_", "=", "..",
                                       "b-c/", "d.txt"]), max_size=40).map("".join)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(path_texts)
def test_path_keys_start_where_their_run_starts_and_are_keys_the_old_branch_found(text: str) -> None:
    new = PATH_KEY.findall(text)
    assert set(new) <= set(OLD_PATH_KEY.findall(text))
    for m in PATH_KEY.finditer(text):  # never from inside a run of path characters
        assert m.start() == 0 or not (text[m.start() - 1].isalnum() or text[m.start() - 1] in "_-./")


def test_real_paths_with_dashes_are_still_fold_keys() -> None:
    text = ("see src/my-pkg/a_b.py and tests/test-data/x-y.json, --config=conf/app-1.yaml,\n"
            "../x-y/z.py -q/r.py (build-2/out/o.txt)")
    want = ["src/my-pkg/a_b.py", "tests/test-data/x-y.json", "conf/app-1.yaml", "../x-y/z.py", "-q/r.py",
            "build-2/out/o.txt"]
    assert PATH_KEY.findall(text) == OLD_PATH_KEY.findall(text) == want
    assert [k for k in R.result_keys(text, 12) if "/" in k] == want
