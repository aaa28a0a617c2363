"""lisa_chat against transformers' apply_chat_template (the oracle), byte
for byte, on generated conversations with tools, tool calls, tool results,
reasoning and several turns, both called directly and through the
gateway's rendering path (gw_render, the code that answers agents); plus
the gateway's incremental path, checked token for token against a full
re-render tokenized by HF tokenizers, with the assistant turns rebuilt
from the replies the gateway gives the agent (tool-call arguments as the
model wrote them).
"""
import copy
import json
import os
import random
import subprocess

import pytest

SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.environ.get("LISA_BINARY_DIR", os.path.join(SRC, "build",
                                                       "default"))
TOOL = os.path.join(BUILD, "tests", "bin", "chat_tool")
QWEN = os.path.join(SRC, "tests", "fixtures", "qwen3-tokenizer")
IM_END = 151645

TOOLS = [
    {"type": "function", "function": {
        "name": "execute_bash",
        "description": "Execute a bash command in the sandbox.\n"
                       "Output is truncated at 16 KiB.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "the command"},
            "timeout": {"type": "number", "default": 30.0,
                        "minimum": 0.001, "maximum": 1e20},
            "step": {"type": "number", "default": 0.1, "minimum": 1e-7,
                     "multipleOf": 3.0, "title": "pas de temps, 步长"}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "str_replace_editor",
        "description": "View, create and edit files: <path> & 'quotes' / "
                       "slashes, tabs\tand unicode: café 日本 🎉 \u0001",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string",
                        "enum": ["view", "create", "str_replace", "insert"]},
            "path": {"type": "string"},
            "view_range": {"type": "array", "items": {"type": "integer"}},
            "insert_line": {"type": "integer", "default": -0.0},
            "flags": {"type": "object", "additionalProperties": False,
                      "properties": {}},
            "ratio": {"type": "number", "default": 1.5e-07},
            "nothing": None, "yes": True, "big": 12345678901234567}}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Submit /testbed/answer.txt.",
        "parameters": {"type": "object", "properties": {}}}},
]

TEXTS = ["hello", "What is 2+2?", "Look at /testbed/documents/a.txt",
         "多语言 текст 🎉", "line1\nline2\n\n", "  spaced  ", "",
         "<tool_response>\nfake\n</tool_response>", "a \"quoted\" \\ back",
         "math: $\\frac{1}{2}$", "tab\there"]


def _args(rng):
    choice = rng.randrange(4)
    if choice == 0:
        return {"command": rng.choice(["ls -la", "cat a.txt | head",
                                       "echo \"hi\" > /tmp/x"])}
    if choice == 1:
        return {"command": "view", "path": "/testbed/ä.py",
                "view_range": [1, 20], "ratio": rng.choice([0.1, 2.5, 1e-05,
                                                            1e-7, 3.0, 1e16])}
    if choice == 2:  # a JSON string, copied as is by the template
        return json.dumps({"command": "python3 -c 'print(1)'"},
                          ensure_ascii=rng.random() < 0.5)
    return {}


def _assistant(rng):
    m = {"role": "assistant", "content": rng.choice(TEXTS)}
    r = rng.random()
    if r < 0.15:
        m["reasoning_content"] = rng.choice(["think hard", "\nstep 1\n\n",
                                             ""])
    elif r < 0.25:
        m["content"] = "<think>\nplan\n</think>\n\n" + m["content"]
    if rng.random() < 0.6:
        calls = []
        for _ in range(rng.randrange(1, 4)):
            c = {"name": rng.choice(["execute_bash", "str_replace_editor",
                                     "submit"]), "arguments": _args(rng)}
            calls.append({"id": "call_%d" % rng.randrange(1000),
                          "type": "function", "function": c}
                         if rng.random() < 0.8 else c)
        m["tool_calls"] = calls
    return m


def conversations(seed=11, n=250):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.7:
            msgs.append({"role": "system",
                         "content": rng.choice(["You are a helpful agent.",
                                                "系统提示", ""])})
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        for _ in range(rng.randrange(0, 5)):
            msgs.append(_assistant(rng))
            if "tool_calls" in msgs[-1] or rng.random() < 0.3:
                for _ in range(rng.randrange(1, 4)):
                    msgs.append({"role": "tool",
                                 "content": rng.choice(TEXTS)})
            if rng.random() < 0.3:
                msgs.append({"role": rng.choice(["user", "system"]),
                             "content": rng.choice(TEXTS)})
        if rng.random() < 0.2:
            msgs.append(_assistant(rng))
        tools = rng.choice([TOOLS, TOOLS[:1], None, []])
        case = {"messages": msgs, "tools": tools,
                "add_generation_prompt": rng.random() < 0.8}
        if rng.random() < 0.15:
            case["enable_thinking"] = rng.random() < 0.5
        out.append(case)
    return out


def chat_tool(mode, items):
    argv = [TOOL, mode] + ([QWEN] if mode in ("gateway", "reply") else [])
    p = subprocess.run(argv, input=json.dumps(items).encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(QWEN)


def hf_render(hf, case):
    kw = {}
    if "enable_thinking" in case:
        kw["enable_thinking"] = case["enable_thinking"]
    return hf.apply_chat_template(
        copy.deepcopy(case["messages"]), tools=case["tools"],
        add_generation_prompt=case["add_generation_prompt"], tokenize=False,
        **kw)


def test_usage_example(hf):
    case = {"messages": [{"role": "system", "content": "sys"},
                         {"role": "user", "content": "hi"}],
            "tools": TOOLS[2:], "add_generation_prompt": True}
    got = chat_tool("render", [case])[0]
    assert got.startswith("<|im_start|>system\nsys\n\n# Tools\n")
    assert got.endswith("<|im_start|>user\nhi<|im_end|>\n"
                        "<|im_start|>assistant\n")
    assert got == hf_render(hf, case)


def _gateway_case(case):
    """The case as the gateway renders it: always with the generation
    prompt, enable_thinking never set."""
    return case["add_generation_prompt"] and "enable_thinking" not in case


def test_generated_conversations(hf):
    cases = conversations()
    got = chat_tool("render", cases)
    gw_cases = [c for c in cases if _gateway_case(c)]
    assert len(gw_cases) > 150
    gw_got = chat_tool("gateway", gw_cases)
    bad = []
    for case, g in zip(cases, got):
        want = hf_render(hf, case)
        if g != want:
            bad.append((case, g, want))
    for case, g in zip(gw_cases, gw_got):
        want = hf_render(hf, case)
        if g != want:
            bad.append((case, g, want))
    assert not bad, "%d of %d differ; first: %s\nlisa=%r\nhf=%r" % (
        len(bad), len(cases) + len(gw_cases), json.dumps(bad[0][0])[:2000],
        bad[0][1], bad[0][2])


def test_render_from_is_a_suffix():
    cases = conversations(seed=5, n=60)
    items = []
    for c in cases:
        for k in range(len(c["messages"]) + 1):
            items.append(dict(c, start=k))
    got = chat_tool("render", items)
    i = 0
    for c in cases:
        full = got[i]
        assert isinstance(full, str)
        prev = full
        for k in range(len(c["messages"]) + 1):
            part = got[i + k]
            assert full.endswith(part) and len(part) <= len(prev)
            prev = part
        i += len(c["messages"]) + 1


def test_incremental_ids_are_token_exact(hf):
    """The gateway path: prompt ids + sampled ids (ending in <|im_end|>) +
    ids of the continuation == ids of the full re-render, turn after
    turn, with the assistant message rebuilt from the gateway's reply
    (what the agent gets and sends back), rendered by gw_render."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(QWEN, "tokenizer.json"))
    rng = random.Random(3)
    outputs = [
        'Let me look.\n<tool_call>\n{"name": "execute_bash", "arguments": '
        '{"command": "ls -la /testbed"}}\n</tool_call>',
        '<tool_call>\n{"name": "str_replace_editor", "arguments": {"command":'
        ' "view", "path": "/testbed/a.py"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "execute_bash", "arguments": {"command": "python3 a.py",'
        ' "timeout": 10}}\n</tool_call>',
        'The answer is 42 — done. 日本',
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>',
        # decimals and escapes as a model writes them: json.dumps would
        # write 1e-07 and a re-serialiser 0.10000000000000001
        'Tuning.\n<tool_call>\n{"name": "str_replace_editor", "arguments": '
        '{"command": "view", "path": "/testbed/ä \\u00e9\\u00E9.py", '
        '"ratio": 0.1, "eps": 1e-7, "n": 3.0, "big": 1E+20}}\n</tool_call>',
    ]
    # (Outputs must be in the template's own shape: a model that writes
    # '{"name":"submit"}' is re-rendered with '": "' by the template, which
    # is why the gateway extends the sampled ids and never re-renders.)
    for trial in range(8):
        msgs = [{"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "Solve the task. 🎉"}]
        tools = TOOLS
        ids = tok.encode(chat_tool("gateway", [{
            "messages": msgs, "tools": tools,
            "add_generation_prompt": True}])[0]).ids
        for turn in range(rng.randrange(1, 4)):
            text = rng.choice(outputs)
            ids += tok.encode(text).ids + [IM_END]  # what was sampled
            parsed = chat_tool("reply", [text])[0]
            # null content (only tool calls) as "", which the template needs
            asst = {"role": "assistant", "content": parsed["content"] or ""}
            if parsed["calls"]:
                assert parsed["finish_reason"] == "tool_calls"
                asst["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"],
                                  "arguments": c["arguments"]}}
                    for c in parsed["calls"]]
            msgs.append(asst)
            start = len(msgs)
            for _ in range(rng.randrange(1, 3)):
                msgs.append({"role": "tool", "content": rng.choice(TEXTS)})
            if rng.random() < 0.3:
                msgs.append({"role": "user", "content": "continue"})
            cont = chat_tool("gateway", [{
                "messages": msgs, "tools": tools, "start": start,
                "continuation": "im_end", "add_generation_prompt": True}])[0]
            ids += tok.encode(cont).ids
            full = hf.apply_chat_template(copy.deepcopy(msgs), tools=tools,
                                          add_generation_prompt=True,
                                          tokenize=False)
            assert ids == tok.encode(full).ids, (trial, turn, cont)


def _rand_json(rng, depth=0):
    r = rng.random()
    if depth > 3 or r < 0.35:
        k = rng.randrange(7)
        if k == 0:
            return rng.choice([True, False, None])
        if k == 1:
            return rng.randrange(-10 ** 12, 10 ** 12)
        if k == 2:  # floats of every magnitude, parsed back from text
            return float("%.*g" % (rng.randrange(1, 18), rng.uniform(-1, 1)
                                   * 10 ** rng.randrange(-30, 30)))
        if k == 3:
            return rng.choice([0.0, -0.0, 1.0, 0.1, 1e16, 1e-05, 1e-4,
                               123456789.125, 5e-324, 1.7976931348623157e308])
        alphabet = ("ab \"\\/\n\t\r\b\f\u0000\u0001\u001f\u007f\u0085\u2028"
                    "é日🎉<>&'")
        return "".join(rng.choice(alphabet)
                       for _ in range(rng.randrange(0, 12)))
    if r < 0.7:
        return [_rand_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {"k%d%s" % (i, rng.choice(["", "é", "\"", "\n"])):
            _rand_json(rng, depth + 1) for i in range(rng.randrange(4))}


def test_tojson_matches_python(hf):
    """Tools and dict arguments carry random JSON values: the C rendering
    of `tojson` must match Python's json.dumps byte for byte."""
    rng = random.Random(17)
    cases = []
    for _ in range(120):
        tool = {"type": "function", "function": {
            "name": "f", "parameters": _rand_json(rng)}}
        args = {"x": _rand_json(rng), "y": _rand_json(rng)}
        cases.append({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "",
             "tool_calls": [{"function": {"name": "f", "arguments": args}}]},
            {"role": "tool", "content": "r"}],
            "tools": [tool], "add_generation_prompt": True})
    # through JSON text, as the gateway receives it
    cases = json.loads(json.dumps(cases))
    got = chat_tool("render", cases)
    for case, g in zip(cases, got):
        assert g == hf_render(hf, case)
    for case, g in zip(cases, chat_tool("gateway", cases)):
        assert g == hf_render(hf, case)


def test_reply_arguments_are_the_models_bytes(hf):
    """The tool-call arguments the agent gets are the bytes the model
    wrote (decimals, exponents, escapes of either case, non-ASCII text,
    odd spacing), and the history the agent sends back renders, through
    the gateway and through transformers, to the text that was sampled."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(QWEN, "tokenizer.json"))
    args = ['{"x": 0.1, "eps": 1e-7, "n": 3.0, "big": 1E+20, "neg": -0.0}',
            '{"path": "/tmp/café \\u00e9\\u00E9 日本 🎉", "q": "\\"a\\" \\/"}',
            '{ "spaced" :[1 ,2.50, 1.0e-3 ] ,"o":{ }}',
            '{"nested": {"list": [0.30000000000000004, 1e300, -1234567890123456789]}}']
    texts = ['<tool_call>\n{"name": "f", "arguments": %s}\n</tool_call>' % a
             for a in args]
    got = chat_tool("reply", texts)
    for a, text, g in zip(args, texts, got):
        assert g["content"] is None and g["finish_reason"] == "tool_calls"
        assert [c["arguments"] for c in g["calls"]] == [a]
        msgs = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"id": c["id"], "type": "function",
                                 "function": {"name": c["name"],
                                              "arguments": c["arguments"]}}
                                for c in g["calls"]]},
                {"role": "tool", "content": "ok"}]
        case = {"messages": msgs, "tools": TOOLS,
                "add_generation_prompt": True}
        full = chat_tool("gateway", [case])[0]
        assert full == hf_render(hf, case)
        assert ("<|im_start|>assistant\n" + text + "<|im_end|>") in full
        first = chat_tool("gateway", [dict(case, messages=msgs[:1])])[0]
        cont = chat_tool("gateway", [dict(case, start=2,
                                          continuation="im_end")])[0]
        ids = (tok.encode(first).ids + tok.encode(text).ids + [IM_END] +
               tok.encode(cont).ids)
        assert ids == tok.encode(full).ids
