"""Tool results through the engine: redaction, offload, compressed views, retrieval tools, evidence."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import windowsmith as ws
from conftest import model_for
from windowsmith.budget import Budget
from windowsmith.ingest.pipeline import IngestConfig
from windowsmith.result_tools import RESULT_TOOLS

SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS = "AKIA" + "QYLPMN5HHHFPZAM2"
REF = re.compile(r"artifact://([0-9a-f]{64})")


def _session(engine, sid="s"):
    s = engine.session(sid, goal="fix the failing tests")
    s.tools([*RESULT_TOOLS, {"name": "bash", "description": "run a command",
                              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}])
    s.user("the tests fail, please fix")
    return s


def _call(s, cid, cmd="pytest -q"):
    s.assistant("", tool_calls=[{"id": cid, "name": "bash", "arguments": {"cmd": cmd}}])


def pytest_log(n: int = 6000) -> str:
    lines = [f"tests/test_mod{i % 50}.py::test_case_{i} PASSED" for i in range(n)]
    lines[1234] = "tests/test_refund.py::test_refund_twice FAILED"
    lines[4321] = "E   AssertionError: expected 1 refund, got 2"
    lines.append("=========== 1 failed, 5999 passed in 12.34s ===========")
    return "\n".join(lines)


def _read_all(s, ref: str, limit: int = 2000) -> tuple[list[str], list[str]]:
    """Every line of ``ref`` read page by page through ``read_result``, and the pages' texts."""
    lines: list[str] = []
    pages: list[str] = []
    offset = 0
    while True:
        out = s.result_tools("read_result", {"ref": ref, "offset": offset, "limit": limit})
        pages.append(out)
        body, footer = out.rsplit("\n", 1)
        lines += [ln.split(": ", 1)[1] for ln in body.split("\n")]
        if "end of result" in footer:
            return lines, pages
        offset = int(re.search(r"offset=(\d+)", footer).group(1))


def test_a_read_is_bounded_by_the_window_and_pages_through_everything(make_engine):
    """At an 8K window a default read_result page (200 lines, up to 40,000 characters) would be larger than
    the window; the session's tools answer at most page_chars(available) characters, and paging on with
    the footer's offset still returns every line exactly."""
    from windowsmith.result_tools import MAX_CHARS, page_chars

    small = make_engine(window=8000)
    s = _session(small)
    _call(s, "c1")
    log = pytest_log()
    ref = "artifact://" + REF.search(s.tool_result("c1", log).tool_results[0].text).group(1)
    cap = page_chars(Budget.for_window(8000, small.spec.max_output, small.budget).available)
    assert cap == 5840 * 3 // 4  # window - reserved output (2,000) - slack (160), three quarters of a character each
    assert cap < MAX_CHARS / 5
    first = s.result_tools("read_result", {"ref": ref})  # the default: 200 lines
    body, footer = first.rsplit("\n", 1)
    assert len(body) <= cap and "continue with offset=" in footer
    lines, pages = _read_all(s, ref)
    assert "\n".join(lines) == log and len(pages) > 1
    assert all(len(p.rsplit("\n", 1)[0]) <= cap for p in pages)
    hits = s.result_tools("search_result", {"ref": ref, "pattern": "PASSED", "context_lines": 0})
    assert len(hits.rsplit("\n", 1)[0]) <= cap and "output cut at the size limit" in hits


@settings(max_examples=30, deadline=None)
@given(st.lists(st.text(alphabet="ab \u00e9\u21aa:", max_size=300), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=3000), st.integers(min_value=1, max_value=50))
def test_paging_returns_every_line_for_any_page_size(tmp_path_factory, lines, max_chars, limit):
    """Whatever the page's character bound and line limit, reading on from each footer's offset returns the
    stored text exactly, and each page holds at least one line (never an empty page that cannot advance)."""
    from windowsmith.artifacts import FileArtifacts
    from windowsmith.result_tools import ResultTools

    store = FileArtifacts(tmp_path_factory.mktemp("paging"))
    text = "\n".join(lines)
    sha = store.put(text.encode(), session_id="s")
    rt = ResultTools(store, "s", max_chars=max_chars)
    got: list[str] = []
    offset = 0
    for _ in range(10_000):
        out = rt.read_result(f"artifact://{sha}", offset, limit)
        body, footer = out.rsplit("\n", 1)
        page = body.split("\n")
        assert page and page[0].startswith(f"{offset}: ")
        got += [ln.split(": ", 1)[1] for ln in page]
        if "end of result" in footer:
            break
        offset = int(re.search(r"offset=(\d+)", footer).group(1))
    assert "\n".join(got).replace("\n\u21aa", "") == text.replace("\n\u21aa", "")


def test_result_tools_refuse_a_page_bound_that_is_not_positive(engine):
    from windowsmith.result_tools import ResultTools

    for bad in (0, -5, True, 2.5):
        with pytest.raises(ws.ConfigError, match="max_chars must be a positive"):
            ResultTools(engine.artifacts, "s", max_chars=bad)


def test_small_results_stay_inline(engine):
    s = _session(engine)
    _call(s, "c1", "ls")
    m = s.tool_result("c1", "a.py\nb.py")
    assert m.tool_results[0].text == "a.py\nb.py"


def test_large_result_is_offloaded_compressed_and_recoverable(engine):
    s = _session(engine)
    _call(s, "c1")
    log = pytest_log()
    m = s.tool_result("c1", log)
    view = m.tool_results[0].text
    ref = "artifact://" + REF.search(view).group(1)
    assert "test_refund_twice FAILED" in view and "AssertionError" in view  # error lines survive
    assert "read_result" in view and len(view) < len(log) / 10
    # recoverable byte for byte through the retrieval tool
    lines, _ = _read_all(s, ref)
    assert "\n".join(lines) == log
    hits = s.result_tools("search_result", {"ref": ref, "pattern": r"FAILED|AssertionError", "context_lines": 1})
    assert "1234: tests/test_refund.py::test_refund_twice FAILED" in hits and "4321: E   AssertionError" in hits
    pack = s.build()
    assert ref in pack.manifest.artifacts
    tail = pack.request["messages"][-1]["content"][-1]["text"]
    # the result's own view names its artifact in the history: an EVIDENCE note would repeat it, uncached
    assert "## EVIDENCE" not in tail and ref in json.dumps(pack.request["messages"][-1]["content"][0])
    s.user("thanks, now the docs")  # a new step: the old evidence leaves the tail
    assert "## EVIDENCE" not in json.dumps(s.build().request["messages"][-1])


def test_secrets_never_reach_store_artifact_manifest_or_request(engine, tmp_path):
    s = _session(engine)
    _call(s, "c1", "cat .env")
    env = f"GITHUB_TOKEN={SECRET}\nAWS_ACCESS_KEY_ID={AWS}\nDEBUG=true\n" + "filler line\n" * 20000
    s.tool_result("c1", env)
    s.user(f"also my token is {SECRET}")
    pack = s.build("openai-chat", model="gpt-4.1")
    blob = json.dumps(pack.request) + json.dumps(pack.manifest.to_dict())
    assert SECRET not in blob and AWS not in blob
    assert pack.manifest.redactions.get("github_token", 0) >= 1
    con = sqlite3.connect(tmp_path / "ws.db")
    for table, col in (("events", "data"), ("blobs", "data"), ("packs", "manifest")):
        for (value,) in con.execute(f"SELECT {col} FROM {table}"):
            raw = value if isinstance(value, bytes) else value.encode()
            assert SECRET.encode() not in raw and AWS.encode() not in raw, table
    con.close()
    assert "DEBUG=true" in json.dumps(pack.request)  # non-secrets survive


BEARER = "Bearer " + "eyJ0eXAiOi" + "Zx9Qw7Lm2Rt8Vb4Kp1Sd6Hj3"
PASSWORD = "Tr0ub4dor-" + "horse-staple-9"


def _db_bytes(folder) -> bytes:
    """Every byte SQLite wrote for the store (main file, WAL, journal)."""
    return b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.startswith("ws.db"))


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_task_and_tool_definition_secrets_never_reach_store_or_request(tmp_path, fmt):
    folder = tmp_path / "db"
    folder.mkdir()
    engine = ws.Engine(model="claude-sonnet-4-5", store=folder / "ws.db")
    s = engine.session("t", goal=f"rotate the deploy key {AWS} used by CI",
                       acceptance=[f"old token {SECRET} revoked", "pipeline green"], step=f"curl -H 'Authorization: {BEARER}'")
    s.tools([{"name": "deploy", "description": f"Deploy. Send header Authorization: {BEARER}",
              "parameters": {"type": "object", "required": ["password"], "properties": {
                  "password": {"type": "string", "default": PASSWORD, "examples": [PASSWORD]},
                  "region": {"type": "string", "default": "eu-west-1", "enum": ["eu-west-1", f"key-{AWS}"]},
              }}}])
    s.user("go")
    s.check(f"old token {SECRET} revoked")  # the caller still names the item by its original text
    assert s.state.task.acceptance[0][1] is True
    pack = s.build(fmt, model=model_for(fmt))
    request = json.dumps(pack.request)
    counts = pack.manifest.redactions
    assert counts["aws_access_key_id"] == 2 and counts["github_token"] == 1  # goal + enum; acceptance
    assert counts["bearer_token"] == 2 and counts["password_assignment"] == 2  # step + description; default + example
    engine.close()
    for secret in (AWS, SECRET, BEARER.split()[1], PASSWORD):
        assert secret not in request
        assert secret.encode() not in _db_bytes(folder)
    # the non-secret parts survive, and the schema is still a valid schema
    assert "rotate the deploy key [REDACTED:aws_access_key_id]" in request and "pipeline green" in request
    assert "eu-west-1" in request and "[REDACTED:password_assignment]" in request
    with ws.Engine(model="claude-sonnet-4-5", store=folder / "ws.db") as again:
        s2 = again.session("t", goal=f"rotate the deploy key {AWS} used by CI")  # same task: nothing appended
        assert s2.state.seq == s.state.seq
        spec = s2.state.tools[0]
        assert spec.parameters["properties"]["password"]["default"] == "[REDACTED:password_assignment]"
        ws.ToolSpec.from_dict(spec.to_dict())  # still validates as JSON Schema


def test_redaction_off_keeps_task_and_tools_verbatim(tmp_path):
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "ws.db", ingest=IngestConfig(redact=False)) as e:
        s = e.session("t", goal=f"key {AWS}")
        s.tools([{"name": "t", "description": f"uses {SECRET}", "parameters": {"type": "object"}}])
        assert AWS in s.state.task.goal and SECRET in s.state.tools[0].description


def test_threshold_adapts_to_the_room_left():
    cfg = IngestConfig()
    assert cfg.threshold(150_000) == 6_000
    assert cfg.threshold(20_000) == 5_000
    assert cfg.threshold(1_000) == 400  # the fuller the window, the lower the threshold
    assert IngestConfig(offload_tokens=900).threshold(10**6) == 900


@pytest.mark.parametrize("output, expect", [
    (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, "PNG image"),
    (b"\x00\x01\x02binary\x00", "binary data"),
])
def test_binary_output_is_stored_whole(engine, output, expect):
    s = _session(engine)
    _call(s, "c1", "cat img")
    m = s.tool_result("c1", output)
    text = m.tool_results[0].text
    assert expect in text
    assert engine.artifacts.get(REF.search(text).group(1)) == output


PROC_ENVIRON = (b"PATH=/usr/bin\x00GITHUB_TOKEN=" + SECRET.encode() + b"\x00DB_PASSWORD=Tr0ub4dor-horse\x00"
                + b"AWS_ACCESS_KEY_ID=" + AWS.encode() + b"\x00HOME=/root\x00")


@pytest.mark.parametrize("output", [
    PROC_ENVIRON,  # /proc/1/environ, env -0: NUL-separated
    b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8 + b"token=" + SECRET.encode() + b"\x00" + bytes(range(200)),
    b"\x00\x01MZ" + f"API_KEY={SECRET}\r\n".encode("utf-16-le") + bytes(range(256)),  # UTF-16 inside binary
])
def test_binary_output_is_redacted_before_it_is_stored(tmp_path, output):
    folder = tmp_path / "db"
    folder.mkdir()
    with ws.Engine(model="claude-sonnet-4-5", store=folder / "ws.db") as engine:
        s = _session(engine)
        _call(s, "c1", "cat /proc/1/environ")
        m = s.tool_result("c1", output)
        stub = m.tool_results[0].text
        assert "binary output" in stub and "secret(s) redacted" in stub
        ref = REF.search(stub).group(1)
        stored = engine.artifacts.get(ref)
        read = s.result_tools("read_result", {"ref": "artifact://" + ref})
        for secret in (SECRET, AWS, "Tr0ub4dor-horse"):
            for blob in (stored, read.encode(), stored.decode("utf-16-le", "replace").encode()):
                assert secret.encode() not in blob
        assert b"[REDACTED:" in stored or "[REDACTED:".encode("utf-16-le") in stored
    for secret in (SECRET, AWS):
        assert secret.encode() not in _db_bytes(folder)
        assert secret.encode("utf-16-le") not in _db_bytes(folder)


def test_binary_redaction_changes_only_the_secret_bytes():
    from windowsmith.ingest.decode import redact_binary

    head, tail = b"\x00\xff\xfe" + bytes(range(256)), b"\x00\xc3\x28" + bytes(range(255, -1, -1))
    out, counts = redact_binary(head + b"password=hunter2x" + tail)
    assert out == head + b"password=[REDACTED:password_assignment]" + tail and counts == {"password_assignment": 1}
    clean = head + b"nothing to see" + tail
    assert redact_binary(clean) == (clean, {})  # the original bytes, untouched


def test_one_bad_byte_or_a_legacy_encoding_is_still_text(engine):
    s = _session(engine)
    lines = [f"tests/test_m.py::test_{i} PASSED" for i in range(330)]
    lines[150] = "tests/test_m.py::test_refund FAILED - caf\xe9 r\xe9sum\xe9"
    latin1 = "\n".join(lines).encode("latin-1")  # a 10 KB Latin-1 log
    assert len(latin1) > 10_000
    stray = ("ok ünïcode\n" * 50).encode() + b"\xff" + b"\nFAILED test_y - assert 1 == 2\n"
    utf16 = "FAILED test_z: boom\r\n".encode("utf-16")
    cp1252 = b"FAILED test_w: \x93quoted\x94 \x80 5\n"
    for i, (output, expect) in enumerate([(latin1, "test_refund FAILED - café résumé"),
                                          (stray, "FAILED test_y - assert 1 == 2"),
                                          (utf16, "FAILED test_z: boom"),
                                          (cp1252, "FAILED test_w: \u201cquoted\u201d \u20ac 5")]):
        _call(s, f"c{i}", "pytest")
        view = s.tool_result(f"c{i}", output).tool_results[0].text
        assert "binary output" not in view
        assert expect in view or expect in s.result_tools("read_result", {"ref": REF.search(view).group(0)})


def test_secrets_in_legacy_encoded_text_are_redacted(engine):
    s = _session(engine)
    _call(s, "c1", "cat config.ini")
    m = s.tool_result("c1", f"[db]\nnom=caf\xe9\npassword = Tr0ub4dor-horse\ntoken={SECRET}\n".encode("latin-1"))
    text = m.tool_results[0].text
    assert "nom=café" in text and "Tr0ub4dor" not in text and SECRET not in text


def test_image_urls_with_a_credential_are_withheld_and_other_images_kept(tmp_path):
    folder = tmp_path / "db"
    folder.mkdir()
    signed = f"https://bucket.s3.amazonaws.com/shot.png?X-Amz-Credential={AWS}%2F20240501"
    userinfo = "https://deploy:Tr0ub4dor-horse@cdn.example.com/diagram.png"
    plain = "https://cdn.example.com/plain.png"
    data = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    with ws.Engine(model="claude-sonnet-4-5", store=folder / "ws.db") as engine:
        s = _session(engine)
        s.add(ws.Message("user", (ws.Text("what is in these?"), ws.Image(url=signed, caption="screenshot"),
                                  ws.Image(url=plain), ws.Image(data=data, media_type="image/png"))))
        _call(s, "c1", "render")
        m = s.tool_result("c1", [{"type": "text", "text": "rendered"}, {"type": "image", "url": userinfo}])
        assert "[REDACTED:url_password]" in m.tool_results[0].text and "withheld" in m.tool_results[0].text
        pack = s.build("anthropic")
        request = json.dumps(pack.request)
        assert "[image 'screenshot' withheld: its URL carried a secret:" in request
        assert plain in request and data in request  # images without a secret stay images
        assert pack.manifest.redactions["aws_access_key_id"] == 1 and pack.manifest.redactions["url_password"] == 1
    for secret in (AWS, "Tr0ub4dor-horse"):
        assert secret not in request and secret.encode() not in _db_bytes(folder)


def test_invalid_json_and_json_values(engine):
    s = _session(engine)
    _call(s, "c1", "curl api")
    m = s.tool_result("c1", '{"broken": [1, 2,')
    assert m.tool_results[0].text == '{"broken": [1, 2,'
    _call(s, "c2", "curl api")
    big = {"items": [{"id": i, "name": f"item {i}", "price": i * 1.5} for i in range(5000)], "total": 5000}
    m = s.tool_result("c2", big)
    view = m.tool_results[0].text
    assert "artifact://" in view and "items" in view
    ref = "artifact://" + REF.search(view).group(1)
    assert json.loads(engine.artifacts.get(ref[11:])) == big


@pytest.mark.slow
def test_huge_result_200mb(engine):
    s = _session(engine)
    _call(s, "c1", "cat big.log")
    big = "x" * 199 + "\n"
    big = big * (200 * 1024 * 1024 // len(big))
    m = s.tool_result("c1", big)
    assert len(m.tool_results[0].text) < 100_000
    pack = s.build()
    assert pack.tokens <= pack.manifest.available
    del big


@pytest.mark.parametrize("args, expect", [
    ({"ref": "artifact://" + "0" * 64}, "not a result of this session"),
    ({"ref": "artifact://../../etc/passwd"}, "not a valid reference"),
    ({"ref": "/etc/passwd"}, "not a valid reference"),
    ({}, "ref is required"),
    ({"ref": "REF", "offset": -5}, "offset must be >= 0"),
    ({"ref": "REF", "offset": 10**12}, "past the end"),
    ({"ref": "REF", "limit": 0}, "limit must be at least 1"),
    ({"ref": "REF", "offset": "abc"}, "offset must be an integer"),
])
def test_read_result_bad_calls_explain_themselves(engine, args, expect):
    s = _session(engine)
    _call(s, "c1")
    ref = "artifact://" + REF.search(s.tool_result("c1", pytest_log()).tool_results[0].text).group(1)
    args = {k: (ref if v == "REF" else v) for k, v in args.items()}
    out = s.result_tools("read_result", args)
    assert out.startswith("error:") and expect in out


def test_other_sessions_refs_and_bad_regexes(engine):
    a = _session(engine, "a")
    _call(a, "c1")
    ref = "artifact://" + REF.search(a.tool_result("c1", pytest_log()).tool_results[0].text).group(1)
    b = _session(engine, "b")
    assert "not a result of this session" in b.result_tools("read_result", {"ref": ref})
    assert "invalid regular expression" in a.result_tools("search_result", {"ref": ref, "pattern": "(unclosed"})
    none = a.result_tools("search_result", {"ref": ref, "pattern": "zzqqzz"})
    assert none.startswith("no line matches")
    assert "unknown tool" in a.result_tools("rm_rf", {})


def test_catastrophic_regex_times_out_with_a_message(engine, monkeypatch):
    import windowsmith.result_tools as rt

    monkeypatch.setattr(rt, "REGEX_TIMEOUT", 0.2)
    s = _session(engine)
    _call(s, "c1")
    evil = ("a" * 60 + "!\n") * 200
    ref = "artifact://" + REF.search(s.tool_result("c1", evil * 20).tool_results[0].text).group(1)
    out = s.result_tools("search_result", {"ref": ref, "pattern": r"(a|aa)+$"})
    assert out.startswith("error:") and "took too long" in out


@pytest.mark.parametrize("fmt", ["anthropic", "openai-chat", "openai-responses", "gemini"])
def test_retrieval_tools_work_through_every_renderer(engine, fmt):
    s = _session(engine, f"r-{fmt}")
    _call(s, "c1")
    ref = "artifact://" + REF.search(s.tool_result("c1", pytest_log()).tool_results[0].text).group(1)
    s.assistant("", tool_calls=[{"id": "c2", "name": "search_result", "arguments": {"ref": ref, "pattern": "FAILED"}}])
    s.tool_result("c2", s.result_tools("search_result", {"ref": ref, "pattern": "FAILED"}))
    req = s.build(fmt, model=model_for(fmt)).request
    dumped = json.dumps(req)
    assert "read_result" in dumped and "search_result" in dumped and "test_refund_twice FAILED" in dumped


_SECRET_LINES = [b"GITHUB_TOKEN=" + SECRET.encode(), b"aws_access_key_id = " + AWS.encode(),
                 b"DB_PASSWORD='Tr0ub4dor-horse'", b"Authorization: " + BEARER.encode()]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(_SECRET_LINES), st.binary(max_size=300),
       st.sampled_from([b"\n", b"\x00", b"\r\n"]))
def test_no_bytes_around_a_secret_let_it_reach_the_artifact_store(pre, line, post, sep):
    import tempfile

    from windowsmith.artifacts import FileArtifacts
    from windowsmith.ingest.pipeline import ingest_result

    secret = line.split(b"=", 1)[-1].split(b" ")[-1].strip(b"'")
    with tempfile.TemporaryDirectory() as folder:
        store = FileArtifacts(folder)
        ing = ingest_result(pre + sep + line + sep + post, artifacts=store, session_id="s", count_tokens=len,
                            remaining_tokens=100, config=IngestConfig(offload_tokens=64))
        shown = "".join(b.text for b in ing.blocks if isinstance(b, ws.Text))
        assert secret.decode() not in shown
        stored = store.get(ing.artifact) if ing.artifact else b""
        assert secret not in stored and secret.decode().encode("utf-16-le") not in stored


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_decode_text_never_fails_and_keeps_utf8_text_exact(raw):
    from windowsmith.ingest.decode import decode_text, redact_binary

    text = decode_text(raw)
    assert text is None or isinstance(text, str)
    try:
        exact = raw.decode("utf-8")
    except UnicodeDecodeError:
        exact = None
    if exact is not None and text is not None and not exact.startswith("\ufeff"):
        assert text == exact  # valid UTF-8 that is text comes back unchanged
    out, counts = redact_binary(raw)
    assert (out == raw) == (not counts)  # the original bytes exactly when nothing was redacted


def test_thinking_blocks_go_back_unmodified_as_documented(engine):
    # Providers sign or encrypt reasoning and reject an edited block, so windowsmith passes it back as
    # the provider produced it (README, "Security"); the text and tool arguments around it are redacted.
    s = _session(engine)
    thought = {"type": "thinking", "thinking": f"the user pasted {AWS}; do not repeat it", "signature": "EqQBCkYIBxgCKkA"}
    s.add(ws.Message("assistant", (ws.Thinking(provider="anthropic", data=thought, text=thought["thinking"]),
                                   ws.Text(f"I will not echo {AWS}"))))
    request = s.build("anthropic").request
    blocks = [b for m in request["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])]
    assert thought in blocks  # byte for byte, signature intact
    assert any(b.get("text") == "I will not echo [REDACTED:aws_access_key_id]" for b in blocks)


@pytest.mark.slow
@pytest.mark.parametrize("recent", [None, 4])
def test_evidence_notes_are_deduplicated_and_left_out_while_the_history_names_their_artifact(make_engine, recent):
    """The tail is never cached: an EVIDENCE note is shown once per artifact, only while the history view
    does not already hold that artifact's reference (the result's view, its fold line, its work-log line), and
    only for the newest ``recent`` offloaded results of the step (an autonomous agent's step lasts the run).
    (With ``skip_compacted=False``: by default a note of a result a compaction took away does not come back at
    all, see the next test.)"""
    from windowsmith.layers.builtin import default_layers
    from windowsmith.layers.evidence import EvidenceLayer

    def layers():
        return [EvidenceLayer(recent=recent, skip_compacted=False) if isinstance(x, EvidenceLayer) else x
                for x in default_layers()]

    e = make_engine(window=8000, layers=layers)
    s = _session(e)
    shown_once_gone = 0
    for i in range(24):
        _call(s, f"c{i}", f"pytest -q -k case{i // 2}")
        s.tool_result(f"c{i}", pytest_log(5000 + 40 * (i // 2)))  # 12 distinct outputs, each offloaded twice
        pack = s.build()
        msgs = pack.neutral.messages
        history_refs = {r for m in msgs for r in REF.findall(json.dumps(m.to_dict()))}
        tail = pack.neutral.tail or ""
        tail_refs = REF.findall(tail.split("## EVIDENCE", 1)[1]) if "## EVIDENCE" in tail else []
        assert len(tail_refs) == len(set(tail_refs)), "a duplicate note in the tail"
        assert not set(tail_refs) & history_refs, "a note repeats a reference the history holds"
        if recent is not None:
            newest = {n["ref"].removeprefix("artifact://") for n in s.state.notes_for("evidence")[-recent:]}
            assert set(tail_refs) <= newest, "a note older than the newest results of the step"
        shown_once_gone += bool(tail_refs)
        s.assistant(f"looked at run {i}")
    if recent is None:
        assert shown_once_gone, "a note whose artifact left the view comes back to the tail"
    notes = s.state.notes_for("evidence")
    assert len(notes) == 24 and len({n["ref"] for n in notes}) == 12  # the log keeps every note


@pytest.mark.slow
def test_evidence_notes_of_compacted_results_stay_out_of_the_tail_and_are_reachable_from_the_transcript(make_engine):
    """A compaction that takes an offloaded result out of the view references the span's transcript in the
    summary message (cached) and records what it lost there; an EVIDENCE note in the uncached tail would only
    repeat it on every call. So no note of a compacted result comes back, and every such result's artifact is
    reachable from the request: its reference in the history, or through the transcript chain."""
    e = make_engine(window=8000)
    s = _session(e)
    compacted = 0
    for i in range(24):
        _call(s, f"c{i}", f"pytest -q -k case{i // 2}")
        s.tool_result(f"c{i}", pytest_log(5000 + 40 * (i // 2)))
        pack = s.build()
        state = s.state
        tail = pack.neutral.tail or ""
        assert "## EVIDENCE" not in tail or not state.transcript
        history = json.dumps([m.to_dict() for m in pack.neutral.messages])
        reachable, queue = set(REF.findall(history)), list(REF.findall(history))
        while queue:
            blob = e.artifacts.get(queue.pop())
            for r in REF.findall(blob.decode("utf-8", "replace")):
                if r not in reachable:
                    reachable.add(r)
                    queue.append(r)
        gone = [n for n in state.notes_for("evidence") if n["seq"] < state.keep_from_seq]
        compacted += bool(gone)
        assert {n["ref"].removeprefix("artifact://") for n in gone} <= reachable
        s.assistant(f"looked at run {i}")
    assert compacted, "the run never compacted an offloaded result: the test proves nothing"


def test_a_result_with_no_blocks_stays_empty(engine):
    """A replayed tool result with no content blocks is an empty result, as ``None`` is, not the JSON ``[]``."""
    s = engine.session("empty")
    s.user("think first")
    s.add(ws.Message("assistant", (ws.ToolCall("t1", "think", {"thought": "plan"}),)))
    s.add(ws.Message("tool", (ws.ToolResult("t1", (), False, "think"),)))
    s.add(ws.Message("assistant", (ws.ToolCall("t2", "think", {"thought": "again"}),)))
    s.tool_result("t2", None)
    first, second = (m.tool_results[0] for m in s.messages if m.role == "tool")
    assert first.text == "" and second.text == ""
