"""End to end: the real lisa-agent in a temporary testbed talks only to the
real lisa-gateway, which calls a scripted engine and a real broker. The
agent fetches its task, runs a tool call, submits, posts its result; the
broker ends up holding a prefix-exact span chain and the result."""
import os
import subprocess
import time

from brokerlib import Client, claim, enqueue, task  # noqa: I100 (sets the path)
import lisa_pb2 as pb  # noqa: E402
from gwlib import BIN, tokenizer, tool_reply  # noqa: E402

AGENT = os.path.join(BIN, "bin", "lisa-agent")


def script(prompt, body):
    text = tokenizer().decode(prompt, skip_special_tokens=False)
    if "<tool_response>" not in text:
        return tool_reply("execute_bash", {"command": "cat documents/notes.txt > answer.txt"},
                          "I will copy the notes."), "stop"
    return tool_reply("submit", {}), "stop"


def test_agent_episode_through_the_gateway(make_engine, make_gateway, make_broker, key, tmp_path):
    kf = tmp_path / "shared.key"
    kf.write_text(key.hex() + "\n")
    os.chmod(kf, 0o600)
    eng = make_engine(script)
    brk = make_broker(token_key=str(kf))
    gw = make_gateway(engines=eng.url, broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    rid = enqueue(c, [task("Copy the notes into the answer.",
                           files=[pb.File(path="notes.txt", content=b"forty-two\n")])])[0]
    att = claim(c)[0]
    tb = tmp_path / "testbed"
    tb.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LISA_GATEWAY_URL": gw.url, "LISA_ATTEMPT_TOKEN": att.token,
           "LISA_TESTBED": str(tb), "LISA_HEARTBEAT_MS": "200",
           "LISA_RESERVE_S": "0", "LISA_STARTUP_S": "5"}
    p = subprocess.run([AGENT], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tb / "answer.txt").read_text() == "forty-two\n"
    rep = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_attempts=True, with_spans=True))
    assert rep.attempts[0].result.answer == "forty-two\n"
    assert rep.attempts[0].result.end_reason == "submit"
    spans = sorted(rep.spans, key=lambda s: s.seq)
    assert len(spans) == len(eng.requests) == 2
    # the agent's history (with its "Steps Remaining" suffixes) extended
    # the chain: turn 2's prompt = turn 1's prompt + sampled ids + new ids
    assert spans[1].prev_seq == 0 and spans[1].segment == 0
    first = list(spans[0].appended_ids) + list(spans[0].response_ids)
    assert eng.requests[1]["prompt"][:len(first)] == first
    assert list(spans[1].response_ids) == eng.replies[1][0]
    c.close()
