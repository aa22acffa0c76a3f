"""A text-protocol agent's command survives a cut: the work-log line of a reply that acts in its text (mini-swe-agent's
``THOUGHT: …`` then a fenced command, SWE-agent's ``DISCUSSION`` then a command, a ReAct ``Action:`` line, an action
tag) shows the head of its reasoning and then its action (``text.action_line``), where a head alone kept the reasoning
and cut off what the agent ran."""

from __future__ import annotations

import pytest

import windowsmith as ws
from windowsmith.model import Message, Text
from windowsmith.records import EmergencyRecord
from windowsmith.text import action_line

THOUGHT = "THOUGHT: The renderer calls draw_text with the graphics context, so the setting must reach it there. " * 3


@pytest.mark.parametrize(("text", "action"), [
    (f"{THOUGHT}\n\n```bash\nnl -ba lib/matplotlib/text.py | sed -n '700,760p'\n```", "nl -ba lib/matplotlib/text.py | sed -n '700,760p'"),
    (f"DISCUSSION\n{THOUGHT}\n```\nfind_file \"fields.py\" src\n```\n", 'find_file "fields.py" src'),
    (f"Thought: {THOUGHT}\nAction: search[matplotlib antialiased]", "Action: search[matplotlib antialiased]"),
    (f"{THOUGHT}\n<execute_bash>\npytest tests/test_text.py -x\n</execute_bash>", "<execute_bash> pytest tests/test_text.py -x </execute_bash>"),
])
def test_action_line_keeps_the_command_a_head_would_cut_off(text, action):
    line = action_line(Message("assistant", (Text(text),)), 120)
    assert line is not None and len(line) <= 120
    assert line.endswith(action) and " ⟶ " in line
    assert line.startswith(text.split()[0])  # then the reasoning's head, as far as it fits


@pytest.mark.parametrize(("text", "action"), [
    # a snippet quoted in the reasoning, then the command in a block left unclosed: the command, not the prose between
    (f"{THOUGHT}\n```python\nx.set_antialiased(True)\n```\nSo run it:\n```bash\nls -la src\n", "ls -la src"),
    # a one-line fence: its first word is the command, not a language tag
    (f"{THOUGHT}\n```ls -la src```", "ls -la src"),
])
def test_action_line_takes_the_last_block_whole(text, action):
    line = action_line(Message("assistant", (Text(text),)), 120)
    assert line is not None and line.endswith(f" ⟶ {action}")


def test_action_line_is_none_for_a_short_reply_a_user_or_a_reply_without_an_action():
    assert action_line(Message("assistant", (Text("```bash\nls\n```"),)), 120) is None  # fits whole
    assert action_line(Message("user", (Text(f"{THOUGHT}\n```bash\nls\n```"),)), 120) is None
    assert action_line(Message("assistant", (Text(THOUGHT),)), 120) is None


def test_a_long_action_is_clipped_and_still_leads_with_the_reasoning():
    cmd = "python -c '" + "x = 1; " * 60 + "'"
    line = action_line(Message("assistant", (Text(f"{THOUGHT}\n```bash\n{cmd}\n```"),)), 120)
    assert line is not None and len(line) <= 120 and line.endswith("…") and "python -c" in line
    assert line.startswith("THOUGHT")


@pytest.mark.slow
def test_an_emergency_cut_of_a_text_protocol_session_logs_the_commands_it_dropped(tmp_path):
    """mini-swe-agent-like: no tools, every reply a thought then a command, every observation a user message; at 8K
    the free cut drops replies whose work-log lines must name the files the commands read."""
    with ws.Engine(model="claude-sonnet-4-5", store=tmp_path / "w.db", window=8000) as e:
        s = e.session("text-protocol")
        s.system("You are a helpful assistant that can interact with a computer shell. Reply with one bash block.")
        s.user("<pr_description>Add get/set_antialiased to Text objects.</pr_description>")
        for i in range(30):
            s.assistant(f"{THOUGHT}\n\n```bash\ncat lib/pkg/module_{i}.py\n```")
            s.user("<returncode>0</returncode>\n<output>\n" + f"def function_{i}(x):\n    return x + {i}\n" * 60
                   + "</output>")
            s.build()
        logs = [line for r in s.state.records if isinstance(r, EmergencyRecord) for line in r.work_log]
        replies = [line for line in logs if "] assistant: " in line]
        assert len(replies) >= 5
        named = [line.rsplit("⟶ cat lib/pkg/module_", 1)[-1] for line in replies]
        assert all("⟶ cat lib/pkg/module_" in line and len(line) < 400 for line in replies)
        # each reply's own command, in the session's order (a head of the thought alone named none of them)
        assert [int(x.removesuffix(".py")) for x in named] == sorted(int(x.removesuffix(".py")) for x in named)
