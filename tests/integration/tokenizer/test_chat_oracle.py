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


# ---- SmolLM2's ChatML ------------------------------------------------------
# The chat template of SmolLM2-135M-Instruct (its GGUF file's
# tokenizer.chat_template; trainer_smollm2 checks that the published file
# carries exactly this string).
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] "
    "!= 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant "
    "named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")

# The rule lisa documents for tools with SmolLM2 (lisa_chat.h), written as
# a Jinja template: SmolLM2's turns, with Qwen's hermes-style tools (the
# "# Tools" system block, <tool_call> blocks, <tool_response> user turns).
SMOLLM2_HERMES = """
{%- set smol = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- elif messages %}
        {{- smol + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- elif messages and messages[0].role != 'system' %}
    {{- '<|im_start|>system\\n' + smol + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
        {%- if not tools %}
            {{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- elif message.role == 'user' or message.role == 'system' %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' + message.content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    """A tokenizer directory carrying SmolLM2's template (the Qwen3
    vocabulary, which has the ChatML tokens), as `lisa convert` writes
    SmolLM2's."""
    import shutil
    d = tmp_path_factory.mktemp("smollm2-tok")
    shutil.copy(os.path.join(QWEN, "tokenizer.json"), d / "tokenizer.json")
    with open(os.path.join(QWEN, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg["chat_template"] = SMOLLM2
    with open(d / "tokenizer_config.json", "w") as f:
        json.dump(cfg, f)
    return d


@pytest.fixture(scope="module")
def smol_hf(smol_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(smol_dir))


def _no_tools(case):
    """The case as SmolLM2's own template can render it: no tools, no
    tool calls, no tool messages."""
    msgs = []
    for m in case["messages"]:
        if m["role"] == "tool":
            continue
        m = {k: v for k, v in m.items() if k != "tool_calls"}
        msgs.append(m)
    return {"messages": msgs, "tools": None,
            "add_generation_prompt": case["add_generation_prompt"]}


def _smol_render(hf, case, template):
    return hf.apply_chat_template(
        copy.deepcopy(case["messages"]), tools=case["tools"] or None,
        add_generation_prompt=case["add_generation_prompt"], tokenize=False,
        chat_template=template)


def test_smollm2_template_without_tools(smol_dir, smol_hf):
    """SmolLM2's own template (transformers renders it) equals lisa's
    rendering, directly and through the gateway reading the directory."""
    cases = [_no_tools(c) for c in conversations(seed=23, n=250)]
    direct = chat_tool("render", [dict(c, chat_template=SMOLLM2)
                                  for c in cases])
    gw_cases = [c for c in cases if c["add_generation_prompt"]]
    assert len(gw_cases) > 150
    p = subprocess.run([TOOL, "gateway", str(smol_dir)],
                       input=json.dumps(gw_cases).encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert b"chat template smollm2" in p.stderr
    via_gw = json.loads(p.stdout)
    n_default = 0
    for case, g in zip(cases, direct):
        want = _smol_render(smol_hf, case, None)
        assert g == want, (case, g, want)
        n_default += "named SmolLM" in want
    for case, g in zip(gw_cases, via_gw):
        assert g == _smol_render(smol_hf, case, None)
    assert n_default > 50  # the default system turn was exercised


def test_smollm2_tools_follow_the_hermes_rule(smol_dir, smol_hf):
    """With tools: the documented rule (SMOLLM2_HERMES, rendered by
    transformers) equals lisa's rendering; the rule reduces to SmolLM2's
    own template where there are no tools."""
    cases = conversations(seed=29, n=250)
    got = chat_tool("render", [dict(c, chat_template=SMOLLM2)
                               for c in cases])
    with_tools = 0
    for case, g in zip(cases, got):
        assert g == _smol_render(smol_hf, case, SMOLLM2_HERMES), case
        with_tools += bool(case["tools"])
        nt = _no_tools(case)
        assert (_smol_render(smol_hf, nt, SMOLLM2_HERMES) ==
                _smol_render(smol_hf, nt, None))
    assert with_tools > 100
    # the agent's calls parse from what the template shows the model
    case = {"messages": [{"role": "user", "content": "q"}], "tools": TOOLS,
            "add_generation_prompt": True}
    p = subprocess.run([TOOL, "gateway", str(smol_dir)],
                       input=json.dumps([case]).encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert "<tools>\n" in json.loads(p.stdout)[0]
    reply = chat_tool("reply", ['<tool_call>\n{"name": "submit", '
                                '"arguments": {}}\n</tool_call>'])[0]
    assert [c["name"] for c in reply["calls"]] == ["submit"]


def test_smollm2_render_from_is_a_suffix():
    cases = conversations(seed=31, n=40)
    for c in cases:
        items = [dict(c, start=k, chat_template=SMOLLM2)
                 for k in range(len(c["messages"]) + 1)]
        got = chat_tool("render", items)
        for part in got:
            assert got[0].endswith(part)


def test_unknown_template_is_an_error(tmp_path):
    """A template lisa cannot render is refused: by the renderer, and by
    the gateway at start-up (no silent Qwen3 rendering)."""
    other = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n" \
            "{% endfor %}"
    got = chat_tool("render", [{"messages": [{"role": "user",
                                              "content": "x"}],
                                "chat_template": other}])
    assert "unknown chat template" in got[0]["error"]
    import shutil
    shutil.copy(os.path.join(QWEN, "tokenizer.json"),
                tmp_path / "tokenizer.json")
    with open(tmp_path / "tokenizer_config.json", "w") as f:
        json.dump({"chat_template": other, "eos_token": "<|im_end|>"}, f)
    p = subprocess.run([TOOL, "gateway", str(tmp_path)], input=b"[]",
                       capture_output=True, timeout=120)
    assert p.returncode == 1
    assert b"unknown chat template" in p.stderr
