"""Contract tests of lisa-gateway against a scripted engine and a real
broker: OpenAI shapes (tool calls, streaming == plain), token-exact prompt
chains across 30 turns, spans that hold exactly the sampled ids, segments
on rewritten history, context overflow."""
import json
import time

import openai
import pytest

from brokerlib import Client, claim, enqueue, task  # noqa: I100 (sets the path)
import lisa_pb2 as pb  # noqa: E402
from gwlib import IM_END, http, mint, tokenizer, tool_reply

TOOLS = [{"type": "function", "function": {
    "name": "execute_bash", "description": "run a shell command",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}}, "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "finish",
        "parameters": {"type": "object", "properties": {}}}}]


def turn_script(prompt, body):
    """Turn k (counted by tool responses in the prompt) calls a tool; the
    reply text differs per turn so chains are checkable."""
    k = tokenizer().decode(prompt, skip_special_tokens=False).count("<tool_response>")
    if k >= 29:
        return "All done: the answer is 42.", "stop"
    return tool_reply("execute_bash", {"command": "echo turn %d" % k},
                      "Step %d." % k if k % 3 else ""), "stop"


def attempt_of(client):
    rid = enqueue(client, [task("q")])[0]
    att = claim(client)[0]
    assert att.rollout.rollout_id == rid
    return rid, att.attempt


def spans_of(client, rid):
    rep = client.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True))
    return sorted(rep.spans, key=lambda s: (s.attempt, s.seq))


def wait_spans(client, rid, n, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        sp = spans_of(client, rid)
        if len(sp) >= n:
            return sp
        time.sleep(0.05)
    raise AssertionError("only %d spans stored" % len(spans_of(client, rid)))


@pytest.fixture
def stack(make_engine, make_gateway, make_broker, key):
    eng = make_engine(turn_script)
    brk = make_broker()
    gw = make_gateway(engines=eng.url, broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    yield eng, gw, c
    c.close()


def converse(gw, token, turns, stream):
    """The agent loop the way an OpenAI client writes it."""
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
    msgs = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "Solve the task in /testbed."}]
    seen = []
    for k in range(turns):
        if stream:
            content, calls, finish = "", {}, None
            for ch in client.chat.completions.create(
                    model="lisa", messages=msgs, tools=TOOLS, stream=True):
                if not ch.choices:
                    continue
                d = ch.choices[0].delta
                content += d.content or ""
                for tc in d.tool_calls or []:
                    e = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    e["id"] += tc.id or ""
                    e["name"] += tc.function.name or ""
                    e["arguments"] += tc.function.arguments or ""
                finish = ch.choices[0].finish_reason or finish
            msg = {"role": "assistant", "content": content or None}
            if calls:
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for _, c in sorted(calls.items())]
        else:
            r = client.chat.completions.create(model="lisa", messages=msgs, tools=TOOLS)
            finish = r.choices[0].finish_reason
            msg = r.choices[0].message.model_dump(exclude_none=True)
        seen.append((msg, finish))
        msgs.append(msg)
        for tc in msg.get("tool_calls") or []:
            args = json.loads(tc["function"]["arguments"])
            msgs.append({"role": "tool", "tool_call_id": tc["id"],
                         "content": "output of " + args["command"]})
        if not msg.get("tool_calls"):
            msgs.append({"role": "user", "content": "Continue."})
    return seen


def test_tool_calls_and_streaming_match(stack):
    eng, gw, c = stack
    rid, att = attempt_of(c)
    plain = converse(gw, mint(gw_key(gw), rid, att), 4, stream=False)
    rid2, att2 = attempt_of(c)
    streamed = converse(gw, mint(gw_key(gw), rid2, att2), 4, stream=True)
    assert [f for _, f in plain] == ["tool_calls"] * 4
    for (a, _), (b, _) in zip(plain, streamed):
        assert a.get("content") == b.get("content")
        strip = lambda m: [(t["function"]["name"], t["function"]["arguments"])
                           for t in m["tool_calls"]]
        assert strip(a) == strip(b)
    first = plain[0][0]["tool_calls"][0]
    assert first["type"] == "function"
    assert first["function"]["name"] == "execute_bash"
    assert json.loads(first["function"]["arguments"]) == {"command": "echo turn 0"}
    assert plain[1][0]["content"] == "Step 1."


def gw_key(gw):
    with open(gw.keyfile) as f:
        return bytes.fromhex(f.read().strip())


@pytest.mark.parametrize("stream", [False, True])
def test_thirty_turns_prefix_exact_and_spans_hold_sampled_ids(stack, stream):
    eng, gw, c = stack
    rid, att = attempt_of(c)
    seen = converse(gw, mint(gw_key(gw), rid, att), 30, stream=stream)
    assert seen[-1][1] == "stop"
    reqs = [r for r in eng.requests]
    assert len(reqs) == 30
    # every prompt = previous prompt + previous sampled ids + new ids
    for k in range(1, 30):
        prev = reqs[k - 1]["prompt"] + eng.replies[k - 1][0]
        assert reqs[k]["prompt"][:len(prev)] == prev, "turn %d re-tokenized" % k
    # the first prompt is exactly what transformers' chat template renders
    spans = wait_spans(c, rid, 30)
    assert [s.seq for s in spans] == list(range(30))
    full = []
    for k, s in enumerate(spans):
        assert s.prev_seq == k - 1 and s.segment == 0
        assert list(s.response_ids) == eng.replies[k][0]
        assert [round(x, 6) for x in s.response_logprobs] == \
            [round(x, 6) for x in eng.replies[k][1]]
        assert s.policy_version == 7 and s.engine_id == "e0"
        full += list(s.appended_ids)
        assert full == reqs[k]["prompt"] and s.prompt_len == len(full)
        full += list(s.response_ids)
        assert s.finish_reason in ("tool_calls", "stop")
    # turn 2's new ids are exactly the tool response + generation prompt
    app = tokenizer().decode(spans[2].appended_ids, skip_special_tokens=False)
    assert app == ("\n<|im_start|>user\n<tool_response>\noutput of echo turn 1\n"
                   "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_first_prompt_matches_transformers_template(stack):
    transformers = pytest.importorskip("transformers")
    from gwlib import TOKDIR
    eng, gw, c = stack
    rid, att = attempt_of(c)
    converse(gw, mint(gw_key(gw), rid, att), 2, stream=False)
    tok = transformers.AutoTokenizer.from_pretrained(TOKDIR)
    msgs = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "Solve the task in /testbed."}]
    want = tok.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True,
                                   tokenize=False)
    want_ids = tok(want, add_special_tokens=False)["input_ids"]
    assert eng.requests[0]["prompt"] == want_ids
    # turn 2's full prompt, rendered from scratch by the template, is the
    # same text as the chain (the model's reply re-rendered)
    r0 = tokenizer().decode(eng.requests[1]["prompt"], skip_special_tokens=False)
    call = json.dumps({"command": "echo turn 0"})
    msgs += [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "execute_bash", "arguments": call}}]},
        {"role": "tool", "tool_call_id": "x", "content": "output of echo turn 0"}]
    assert r0 == tok.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True,
                                         tokenize=False)


def test_rewritten_history_starts_a_new_segment(stack):
    eng, gw, c = stack
    rid, att = attempt_of(c)
    token = mint(gw_key(gw), rid, att)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model="lisa", messages=msgs, tools=TOOLS)
    msgs.append(r.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": r.choices[0].message.tool_calls[0].id,
                 "content": "x"})
    client.chat.completions.create(model="lisa", messages=msgs, tools=TOOLS)
    # the agent summarizes: drops the middle of its history
    msgs = [{"role": "user", "content": "hi (summary: ran one command)"}]
    client.chat.completions.create(model="lisa", messages=msgs, tools=TOOLS)
    spans = wait_spans(c, rid, 3)
    assert [(s.seq, s.prev_seq, s.segment) for s in spans] == [(0, -1, 0), (1, 0, 0), (2, -1, 1)]
    assert list(spans[2].appended_ids) == eng.requests[2]["prompt"]


def test_context_overflow_is_400(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("ok", "stop"))
    gw = make_gateway(engines=eng.url, max_context=300)
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=mint(key, "r-ctx", 1),
                           max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="lisa", messages=[
            {"role": "user", "content": "word " * 400}])
    assert ei.value.code == "context_length_exceeded"
    assert eng.requests == []
    # max_tokens is clamped to the room left
    client.chat.completions.create(model="lisa", max_tokens=1000, messages=[
        {"role": "user", "content": "word " * 100}])
    assert len(eng.requests[0]["prompt"]) + eng.requests[0]["max_tokens"] == 300


# Arguments as a model writes them; a re-serialiser would write
# 0.10000000000000001, 1e-07 and upper-case \u escapes.
MODEL_ARGS = ['{"command": "ls", "ratio": 0.1, "eps": 1e-7, "n": 3.0}',
              '{"path": "/testbed/café \\u00e9\\u00E9 日本 🎉", "x": [1 ,2.50]}']


def test_tool_call_arguments_reach_the_agent_as_written(make_engine,
                                                        make_gateway, key):
    transformers = pytest.importorskip("transformers")
    from gwlib import TOKDIR
    texts = ['Run.\n<tool_call>\n{"name": "execute_bash", "arguments": %s}\n'
             '</tool_call>' % a for a in MODEL_ARGS]
    eng = make_engine(lambda p, b: (texts[min(len(eng.requests) - 1, 1)],
                                    "stop"))
    gw = make_gateway(engines=eng.url)
    token = mint(key, "r-args", 1)
    msgs = [{"role": "user", "content": "go"}]
    for k, want in enumerate(MODEL_ARGS):
        st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                           json.dumps({"model": "lisa", "messages": msgs,
                                       "tools": TOOLS}).encode(),
                           {"Authorization": "Bearer " + token,
                            "Content-Type": "application/json"})
        assert st == 200, body
        msg = json.loads(body)["choices"][0]["message"]
        assert [c["function"]["arguments"] for c in msg["tool_calls"]] == [want]
        assert msg["content"] == "Run."
        msgs += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"],
                       "content": "done %d" % k}]
    # the history sent back extended the chain (no new segment), and the
    # chain is what the template renders for that history
    prev = eng.requests[0]["prompt"] + eng.replies[0][0]
    assert eng.requests[1]["prompt"][:len(prev)] == prev
    tok = transformers.AutoTokenizer.from_pretrained(TOKDIR)
    hist = [dict(m, content=m.get("content") or "") for m in msgs[:3]]
    want = tok.apply_chat_template(hist, tools=TOOLS, add_generation_prompt=True,
                                   tokenize=False)
    assert tokenizer().decode(eng.requests[1]["prompt"],
                              skip_special_tokens=False) == want
    # streamed, the arguments are the same bytes
    st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                       json.dumps({"model": "lisa", "stream": True,
                                   "messages": [{"role": "user", "content": "s"}],
                                   "tools": TOOLS}).encode(),
                       {"Authorization": "Bearer " + mint(key, "r-args2", 1),
                        "Content-Type": "application/json"})
    assert st == 200
    args = ""
    for line in body.decode().split("\n"):
        if line.startswith("data: {"):
            for ch in json.loads(line[6:])["choices"]:
                for tc in ch["delta"].get("tool_calls") or []:
                    args += tc["function"].get("arguments") or ""
    assert args == MODEL_ARGS[1]
