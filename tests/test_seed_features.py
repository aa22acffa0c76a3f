"""The seed features issue 55 closes (items 5-14): each test shows one behaving as the seed says."""

from __future__ import annotations

import json

import windowsmith as ws

RUN_TOOL = {"name": "run", "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def short_session(engine: ws.Engine, turns: int = 4) -> ws.Session:
    s = engine.session("short", goal="Fix the failing test in parser.py")
    s.system("You are a coding agent. " * 100)
    s.tools([RUN_TOOL])
    for i in range(turns):
        s.user(f"question {i}: what about src/parser.py line {i}?")
        s.assistant(f"answer {i}: ok.", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
        s.tool_result(f"c{i}", f"1 passed test_{i}")
    return s


# --------------------------------------------------------------------------- item 8: compaction never grows


def test_compact_on_a_short_session_is_a_noop_with_a_reason(engine):
    s = short_session(engine)
    before = s.build().manifest.to_dict()["tokens"]
    result = s.compact()
    assert not result.changed
    assert "nothing would shrink" in result.reason
    assert "nothing to compact" in result.describe() and result.reason in result.describe()
    assert any(a.kind == "noop" for a in result.actions)
    assert s.build().manifest.to_dict()["tokens"] == before
    assert "nothing would shrink" in s.compact_context(reason="tidy up")
    assert s.build().manifest.to_dict()["tokens"] == before


def test_compact_still_shrinks_a_long_session(engine):
    s = engine.session("long", goal="Fix the refund bug")
    s.tools([RUN_TOOL])
    s.user("ORIGINAL TASK: the refund endpoint refunds twice.")
    for i in range(12):
        s.assistant(f"step {i}", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": f"pytest -k t{i}"}}])
        s.tool_result(f"c{i}", "tests/test_x.py::test PASSED\n" * 40)
    before = s.build().manifest.to_dict()["tokens"]
    result = s.compact()
    assert result.changed and not result.reason
    assert s.build().manifest.to_dict()["tokens"] < before


# --------------------------------------------------------------------------- item 10: the artifact store fails


def test_a_failing_artifact_store_keeps_the_result_inline_clipped(engine, monkeypatch):
    import pytest

    from windowsmith.errors import ArtifactStoreWarning

    s = engine.session("store-down", goal="Fix the failing test in parser.py")
    s.tools([RUN_TOOL])
    s.user("run the tests")
    s.assistant(tool_calls=[{"id": "c1", "name": "run", "arguments": {"command": "pytest"}}])

    def refuse(data: bytes, *, session_id: str) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine.artifacts, "put", refuse)
    big = "".join(f"tests/test_parser.py::test_case_{k} FAILED AssertionError: expected {k}\n" for k in range(3000))
    with pytest.warns(ArtifactStoreWarning, match="kept inline"):
        msg = s.tool_result("c1", big)
    text = msg.tool_results[0].content[0].text
    assert "tests/test_parser.py::test_case_0 " in text and "test_case_2999 " in text  # head and tail
    assert "clipped" in text and "artifact://" not in text
    pack = s.build()
    # clipped to the offload threshold (at most max_offload_tokens), where the result is some 60,000 tokens
    assert pack.manifest.to_dict()["tokens"] < engine.ingest.max_offload_tokens + 500
    repairs = [r["what"] for r in pack.manifest.to_dict()["repairs"]]
    assert any("artifact store failed" in r and "'c1'" in r for r in repairs)


def test_a_failing_file_artifact_store_keeps_the_result_inline(make_engine, tmp_path):
    import shutil

    import pytest

    from windowsmith.artifacts import FileArtifacts
    from windowsmith.errors import ArtifactStoreWarning

    folder = tmp_path / "blobs"
    folder.mkdir()
    e = make_engine(artifacts=FileArtifacts(str(folder)))
    s = e.session("gone", goal="Fix the failing test in parser.py")
    s.tools([RUN_TOOL])
    s.user("run the tests")
    s.assistant(tool_calls=[{"id": "c1", "name": "run", "arguments": {"command": "pytest"}}])
    shutil.rmtree(folder)
    folder.write_text("not a folder")  # the store's folder is gone: no blob can be written
    with pytest.warns(ArtifactStoreWarning):
        s.tool_result("c1", "line of output\n" * 5000)
    what = s.build().manifest.to_dict()["repairs"][0]["what"]
    assert "StoreError" in what and "kept inline" in what


# --------------------------------------------------------------------------- item 11: caps and deferral


def test_a_huge_memory_note_is_capped_on_a_large_window(make_engine):
    from windowsmith.budget import DEFAULT_CAPS

    e = make_engine(window=200_000)
    s = e.session("memo", goal="Fix the failing test in parser.py")
    s.user("go")
    note = " ".join(f"fact{k} parser tokenizer edge case number {k}." for k in range(1500))
    s.note("memory", note)
    pack = s.build()
    used = pack.manifest.to_dict()["layers"]["memory"]["used"]
    assert 0 < used <= DEFAULT_CAPS["memory"]
    # a cap is a setting: without one the whole note (over 9,000 tokens) is sent
    e2 = make_engine(window=200_000, budget=ws.BudgetConfig(caps={}), store=e.store)
    whole = e2.session("memo").build().manifest.to_dict()["layers"]["memory"]["used"]
    assert whole > 9_000


def test_budget_caps_are_validated():
    import pytest

    from windowsmith.errors import ConfigError

    with pytest.raises(ConfigError, match="history"):
        ws.BudgetConfig(caps={"history": 1000})
    with pytest.raises(ConfigError, match=">= 0"):
        ws.BudgetConfig(caps={"memory": -1})


def _catalog(n: int, size: int) -> list[dict]:
    return [{"name": f"tool_{i}", "description": f"Tool number {i}. " + "It does a careful thing. " * size,
             "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}} for i in range(n)]


def test_few_but_large_tools_are_deferred_by_budget_share(make_engine):
    from windowsmith.guidance.tools import ToolPolicy, deferred_layers

    policy = ToolPolicy(core=("tool_0",))
    e = make_engine(model="gpt-4.1", window=8_000, layers=lambda: deferred_layers(policy))
    s = e.session("share", goal="Fix the failing test in parser.py")
    s.tools(_catalog(5, 80))
    s.user("go")
    pack = s.build("openai-chat")
    report = pack.manifest.to_dict()["guidance"]["tools"]
    assert report["mode"] == "search" and report["deferred"] == 4
    names = [t["function"]["name"] for t in pack.request["tools"]]
    assert names == ["tool_0", "tool_search"]
    assert "[4 tools deferred: search with tool_search]" in json.dumps(pack.request)
    # by count only: five tools are not deferred
    e2 = make_engine(model="gpt-4.1", window=8_000, layers=lambda: deferred_layers(ToolPolicy(core=("tool_0",), defer_share=None)),
                     store=e.store)
    p2 = e2.session("share").build("openai-chat")
    assert len(p2.request["tools"]) == 5 and "deferred" not in json.dumps(p2.request["messages"])


# --------------------------------------------------------------------------- item 7: scope_tools, default layers


def _two_tools(engine: ws.Engine, model: str | None = None) -> ws.Session:
    s = engine.session("scoped", goal="Fix the failing test in parser.py")
    s.tools([RUN_TOOL, {"name": "read_file", "description": "Read a file.",
                        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}])
    s.task(step="read the parser")
    s.user("go")
    return s


def test_scope_tools_works_with_the_default_layers(make_engine):
    e = make_engine(model="gpt-4.1")
    s = _two_tools(e)
    before = s.build("openai-chat").request
    assert "tool_choice" not in before
    s.scope_tools(["read_file"])
    req = s.build("openai-chat").request
    assert [t["function"]["name"] for t in req["tools"]] == ["run", "read_file"]  # the list stays (cache-safe)
    assert req["tool_choice"]["type"] == "allowed_tools"
    assert [t["function"]["name"] for t in req["tool_choice"]["allowed_tools"]["tools"]] == ["read_file"]
    gem = s.build("gemini", model="gemini-2.5-flash").request
    assert gem["config"]["tool_config"]["function_calling_config"]["allowed_function_names"] == ["read_file"]
    anth = s.build("anthropic", model="claude-sonnet-4-5")
    assert "In this step use only these tools: read_file" in (anth.neutral.tail or "")
    s.task(step="run the tests")  # a new step: the scope lifts
    assert "tool_choice" not in s.build("openai-chat").request


def test_the_adk_hook_honours_the_step_tool_scope(make_engine):
    import asyncio
    from types import SimpleNamespace

    import pytest

    pytest.importorskip("google.adk")
    from google.adk.models import LlmRequest
    from google.genai import types as gtypes

    from windowsmith.integrations.adk import WindowsmithPlugin

    e = make_engine(model="gemini-2.5-flash")
    s = e.session("adk-scope", goal="Fix the failing test in parser.py")
    s.task(step="read the parser")
    decls = [gtypes.FunctionDeclaration(name=n, description=f"{n} tool",
                                        parameters=gtypes.Schema(type="OBJECT", properties={"x": gtypes.Schema(type="STRING")}))
             for n in ("run", "read_file")]
    config = gtypes.GenerateContentConfig(tools=[gtypes.Tool(function_declarations=decls)])
    contents = [gtypes.Content(role="user", parts=[gtypes.Part(text="go")])]
    plugin = WindowsmithPlugin(s)
    ctx = SimpleNamespace(session=SimpleNamespace(id="a"), invocation_id="i", agent_name="x")
    req = LlmRequest(model="gemini-2.5-flash", contents=contents, config=config)
    asyncio.run(plugin.before_model_callback(callback_context=ctx, llm_request=req))
    assert req.config.tool_config is None
    s.scope_tools(["read_file"])
    req = LlmRequest(model="gemini-2.5-flash", contents=contents, config=config)
    asyncio.run(plugin.before_model_callback(callback_context=ctx, llm_request=req))
    assert req.config.tool_config.function_calling_config.allowed_function_names == ["read_file"]


# --------------------------------------------------------------------------- item 5: skills


def _skill(base, name: str, description: str, body: str) -> None:
    d = base / name
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")


def _request_text(pack) -> str:
    return json.dumps(pack.request)


def test_skills_are_listed_in_the_cached_context_and_loaded_on_demand(make_engine, tmp_path):
    from windowsmith.layers.skills import LOAD_SKILL_TOOL

    root, home = tmp_path / "repo", tmp_path / "home"
    _skill(root / ".claude" / "skills", "pdf-forms", "Fill in PDF forms with pypdf.", "Use pypdf.PdfWriter; SECRET-PDF-STEP.")
    _skill(root / ".windowsmith" / "skills", "release", '"Cut a release of the package."', "Bump the version; RELEASE-BODY.")
    _skill(home / ".claude" / "skills", "release", "The user's own release skill.", "USER-RELEASE")  # the project's wins
    e = make_engine(model="gpt-4.1")
    s = e.session("sk", goal="Fix the failing test in parser.py")
    s.tools([RUN_TOOL, LOAD_SKILL_TOOL])
    skills = s.skills(root=root, user_dir=home)
    assert [k.name for k in skills] == ["pdf-forms", "release"]
    assert skills[1].description == "Cut a release of the package."
    n = len(s.store.events("sk"))
    s.skills(root=root, user_dir=home)  # unchanged: nothing logged
    assert len(s.store.events("sk")) == n
    s.user("go")
    p1 = s.build("openai-chat")
    text = _request_text(p1)
    assert "- pdf-forms: Fill in PDF forms with pypdf." in text and "SECRET-PDF-STEP" not in text
    assert "USER-RELEASE" not in text
    assert p1.manifest.to_dict()["layers"]["skills"]["used"] > 0
    assert s.load_skill("nope").startswith("error: no skill named 'nope'")
    assert "loaded" in s.load_skill(name="pdf-forms")
    s.assistant("loading it")
    p2 = s.build("openai-chat")
    assert "SECRET-PDF-STEP" in _request_text(p2) and "RELEASE-BODY" not in _request_text(p2)
    n = p1.rendered.cache_prefix_parts
    assert n >= 1 and p2.rendered.parts[:n] == p1.rendered.parts[:n]  # the body is in the tail: the prefix holds
    s.task(step="run the release skill")  # a step that names a skill loads it too
    assert "RELEASE-BODY" in _request_text(s.build("openai-chat"))


def test_sessions_without_skills_render_as_before(make_engine):
    e = make_engine(model="gpt-4.1")
    s = short_session(e)
    assert "skills" not in s.build("openai-chat").manifest.to_dict()["guidance"]


def test_skill_front_matter_is_checked(tmp_path):
    import pytest

    from windowsmith.errors import UsageError
    from windowsmith.layers.skills import discover_skills, front_matter

    meta, body = front_matter("---\nname: a-b\ndescription: >\n  folded\n  text\n---\nbody", "x")
    assert meta == {"name": "a-b", "description": "folded text"} and body == "body"
    _skill(tmp_path / ".claude" / "skills", "Bad Name", "x", "y")
    with pytest.raises(UsageError, match="lower-case"):
        discover_skills(tmp_path, tmp_path / "nohome")
    with pytest.raises(UsageError, match="front matter"):
        front_matter("no front matter", "SKILL.md")


# --------------------------------------------------------------------------- item 6: @path imports


def test_instruction_files_expand_at_path_imports(tmp_path):
    import pytest

    from windowsmith.errors import UsageError
    from windowsmith.instructions import discover

    root, home = tmp_path / "repo", tmp_path / "home"
    (root / "docs").mkdir(parents=True)
    (home / "team").mkdir(parents=True)
    (root / "AGENTS.md").write_text("Project rules.\nSee @docs/style.md and mail ops@example.com.\n"
                                    "```\n@docs/never.md\n```\nAlso `@docs/style.md` in code, and @~/team/RULES.md\n")
    (root / "docs" / "style.md").write_text("STYLE: four spaces. More in @../docs/deep.md\n")
    (root / "docs" / "deep.md").write_text("DEEP RULE\n")
    (root / "docs" / "never.md").write_text("NEVER IMPORTED\n")
    (home / "team" / "RULES.md").write_text("TEAM RULE\n")
    [f] = discover(root, home_dir=home)
    assert "STYLE: four spaces" in f.text and "DEEP RULE" in f.text and "TEAM RULE" in f.text
    assert "NEVER IMPORTED" not in f.text and f.text.count("STYLE: four spaces") == 1
    assert "[imported from @docs/style.md]" in f.text and "ops@example.com" in f.text
    # depth: a chain of 7 files stops after 5 imports
    chain = tmp_path / "chain"
    chain.mkdir()
    for i in range(7):
        (chain / f"f{i}.md").write_text(f"LEVEL{i} @f{i + 1}.md\n" if i < 6 else "LEVEL6\n")
    (chain / "AGENTS.md").write_text("@f0.md\n")
    text = discover(chain)[0].text
    assert "LEVEL4" in text and "LEVEL5" not in text
    # a cycle is refused, naming it
    cyc = tmp_path / "cyc"
    cyc.mkdir()
    (cyc / "AGENTS.md").write_text("@a.md\n")
    (cyc / "a.md").write_text("@b.md\n")
    (cyc / "b.md").write_text("@a.md\n")
    with pytest.raises(UsageError, match=r"cycle \(AGENTS.md -> a.md -> b.md -> a.md\)"):
        discover(cyc)


def test_instruction_files_are_read_from_the_repository_root_down_to_the_working_directory(make_engine, tmp_path):
    from windowsmith.instructions import discover

    repo = tmp_path / "repo"
    work = repo / "services" / "api"
    work.mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / "CLAUDE.md").write_text("ROOT RULE\n")
    (repo / "services" / "AGENTS.md").write_text("SERVICES RULE\n")
    (work / "CLAUDE.md").write_text("API RULE\n")
    (repo / "web").mkdir()
    (repo / "web" / "AGENTS.md").write_text("WEB RULE\n")
    files = discover(cwd=work)
    assert [(f.path, f.scope) for f in files] == [("CLAUDE.md", ""), ("services/AGENTS.md", ""),
                                                  ("services/api/CLAUDE.md", ""), ("web/AGENTS.md", "web")]
    e = make_engine(model="gpt-4.1")
    s = e.session("cwd")
    s.instructions(cwd=work)
    s.user("go")
    text = json.dumps(s.build("openai-chat").request)
    assert "ROOT RULE" in text and "SERVICES RULE" in text and "API RULE" in text and "WEB RULE" not in text


# --------------------------------------------------------------------------- item 12: the task tail


def test_the_task_tail_can_follow_the_newest_user_text_with_progress(make_engine):
    from windowsmith.layers.builtin import default_layers

    e = make_engine(model="claude-sonnet-4-5", layers=lambda: default_layers(recite_after_user=True))
    s = e.session("tail", goal="Fix the failing test in parser.py")
    s.task(acceptance=["tests pass", "no lint", "changelog", "docs", "review"])
    for item in ("tests pass", "no lint", "changelog"):
        s.check(item)
    s.user("please also update the docs")
    req = s.build("anthropic").request
    last = req["messages"][-1]
    assert last["role"] == "user"
    texts = [b["text"] for b in last["content"] if b.get("type") == "text"]
    assert texts[0] == "please also update the docs"  # the user's words first, the recitation after them
    assert "## ACCEPTANCE\n3/5 done\n- [x] tests pass" in texts[-1]
    p1 = s.build("anthropic")
    s.assistant("Updating the docs now.")
    s.user("thanks, and the changelog entry?")
    p2 = s.build("anthropic")
    n = p1.rendered.cache_prefix_parts
    assert n >= 1 and p2.rendered.parts[:n] == p1.rendered.parts[:n]  # the cached prefix holds across turns
    oai = s.build("openai-chat", model="gpt-4.1").request["messages"]
    flat = json.dumps(oai[-2:])
    assert flat.index("the changelog entry?") < flat.index("3/5 done")


def test_the_default_task_tail_still_goes_before_the_user_text(make_engine):
    e = make_engine(model="claude-sonnet-4-5")
    s = e.session("tail0", goal="Fix the failing test in parser.py")
    s.task(acceptance=["tests pass"])
    s.user("go on")
    last = s.build("anthropic").request["messages"][-1]
    texts = [b["text"] for b in last["content"] if b.get("type") == "text"]
    assert texts[-1] == "go on" and "done\n" not in texts[0]


def test_acceptance_items_report_missing_evidence(make_engine):
    import pytest

    from windowsmith.errors import UsageError

    e = make_engine(model="claude-sonnet-4-5")
    s = e.session("ev", goal="Refund the double charge")
    s.task(acceptance=["refund issued", "customer told", "ticket closed"],
           evidence_needed=["refund issued", "customer told"])
    s.user("go")
    pack = s.build("anthropic")
    report = pack.manifest.to_dict()["guidance"]["task"]
    assert report == {"evidence_needed": ["refund issued", "customer told"],
                      "without_evidence": ["refund issued", "customer told"]}
    assert "- [ ] refund issued (evidence needed)" in (pack.neutral.tail or "")
    s.check("refund issued", evidence="artifact://" + "a" * 64)
    pack = s.build("anthropic")
    assert pack.manifest.to_dict()["guidance"]["task"]["without_evidence"] == ["customer told"]
    assert "- [x] refund issued\n" in (pack.neutral.tail or "")
    with pytest.raises(UsageError, match="not acceptance items"):
        s.task(evidence_needed=["no such item"])


# --------------------------------------------------------------------------- item 13: estimate_cache_savings


def test_estimate_cache_savings_prices_a_change_of_cache_plan_and_of_layers(make_engine):
    import dataclasses

    from windowsmith.cache_estimate import estimate_cache_savings
    from windowsmith.request import CachePlan

    e = make_engine(model="claude-sonnet-4-5")
    s = e.session("est", goal="Fix the failing test in parser.py")
    s.system("You are a careful coding agent. " * 300)
    s.tools([RUN_TOOL])
    s.user("go")
    pack = s.build("anthropic")
    counter = s.counter("anthropic")
    no_cache = dataclasses.replace(pack.neutral, cache=CachePlan())
    est = estimate_cache_savings(e.spec, "anthropic", counter, pack.neutral, no_cache, calls=10)
    assert est.current_cached_tokens > 2_000 and est.proposed_cached_tokens == 0
    assert est.savings_usd < 0 and "costs" in est.describe()  # dropping the cache plan costs more per call
    # the same request is free to keep
    same = estimate_cache_savings(e.spec, "anthropic", counter, pack.neutral, pack.neutral)
    assert same.savings_usd == 0
    # a layer change: the same request without its long system prompt (the system layer left out)
    shorter = dataclasses.replace(pack.neutral, system=())
    cut = estimate_cache_savings(e.spec, "anthropic", counter, pack.neutral, shorter, calls=1)
    assert cut.savings_usd > 0 and cut.proposed_tokens < cut.current_tokens


# --------------------------------------------------------------------------- item 9: drift without false alarms


def test_an_on_task_session_is_not_told_it_drifts(make_engine):
    from windowsmith.guidance.recitation import RecitationLayer
    from windowsmith.layers.builtin import default_layers

    e = make_engine(model="claude-sonnet-4-5", layers=lambda: [*default_layers(), RecitationLayer()])
    s = e.session("ontask", goal="fix the failing test in parser.py")
    s.tools([RUN_TOOL])
    s.user("the CI is red")
    actions = ["pytest tests/ -x", "cat src/tokenize.py", "pytest -k tokenizer -q", "grep -n def src/lexer.py",
               "pytest tests/ -q", "git diff"]
    for i, cmd in enumerate(actions):
        s.assistant("Running it.", tool_calls=[{"id": f"c{i}", "name": "run", "arguments": {"command": cmd}}])
        s.tool_result(f"c{i}", "3 failed, 40 passed")
        report = s.build("anthropic").manifest.to_dict()["guidance"]["recitation"]
        assert not report["drift"], (cmd, report)
    # an agent that wanders off (invoices, e-mail) is still caught
    for i, cmd in enumerate(["open invoices dashboard", "send marketing email", "browse weather forecast",
                             "order lunch delivery"]):
        s.assistant("Doing something else.", tool_calls=[{"id": f"d{i}", "name": "run", "arguments": {"command": cmd}}])
        s.tool_result(f"d{i}", "ok")
    assert s.build("anthropic").manifest.to_dict()["guidance"]["recitation"]["drift"]
