"""One attempt end to end on the `local` backend, every service real and
only the model scripted: the broker hands the claim to lisa-controller,
which starts a bubblewrap sandbox running lisa-agent; the agent fetches its
task from lisa-gateway over the unix socket bound into the sandbox, the
model (a scripted engine behind the gateway) calls tools, the agent posts
its answer, lisa-reward scores it and the rollout succeeds in the broker
with the spans the gateway recorded. And an attempt cancelled while its
sandbox runs: its token is refused on every gateway route, and no span
of it is stored after the cancel."""
import time

from brokerlib import task
from stacklib import pb, scripted, tokenizer, wait_for


def seen_text(body):
    return tokenizer().decode(body["prompt"], skip_special_tokens=False)


def test_attempt_end_to_end_on_local(make_stack):
    seen = []
    script = scripted(
        ("execute_bash", {"command": "cat documents/q.txt; "
                                     "echo '\\boxed{42}' > answer.txt"}),
        ("str_replace_editor", {"command": "view",
                                "path": "/testbed/answer.txt"}),
        ("submit", {}))

    def look(prompt, body):
        seen.append(body)
        return script(prompt, body)
    s = make_stack(look)
    t = task("What is 6*7? The notes are in documents/.", truth="42",
             files=[pb.File(path="q.txt", content=b"six times seven\n")])
    (rid,) = s.enqueue([t])
    s.controller()
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=60)
    assert r.state == pb.ROLLOUT_SUCCEEDED, (r, atts, s.log())
    # lisa-reward scored the answer file: the boxed answer matches.
    assert r.has_reward and r.reward.value == 1.0, r.reward
    assert r.reward.worker_id
    assert len(atts) == 1 and atts[0].sandbox_id.startswith("lisa-")
    # Three model calls through the gateway; each is a span in the broker
    # holding exactly the ids the engine sampled.
    assert len(seen) == 3
    q = s.client.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True))
    spans = sorted(q.spans, key=lambda sp: sp.seq)
    assert [list(sp.response_ids) for sp in spans] == \
        [ids for ids, _, _ in s.engine.replies]
    # The tools ran in the sandbox: the document was placed, the command's
    # output and the editor's view reached the model.
    assert "six times seven" in seen_text(seen[1])
    assert "\\boxed{42}" in seen_text(seen[2])
    # The sandbox is gone once the attempt ended.
    wait_for(lambda: not s.sandboxes(), what="sandbox removed")


def cancelled_mid_attempt(make_stack, start):
    """An attempt whose sandbox is running (its command sleeps) is
    cancelled through the broker: its token, the one its agent holds,
    gets 401/409 attempt_ended on every gateway route, and no span of it
    is stored after the cancel. `start(stack)` starts the controller."""
    from gwlib import mint
    from test_edges import TOKEN_ROUTES, call, spans_of
    s = make_stack(scripted(("execute_bash", {"command": "sleep 30"})))
    (rid,) = s.enqueue([task("q")])
    start(s)
    wait_for(lambda: s.engine.requests, timeout=60, what="first model call")
    (att,) = s.roll(rid)[1]
    wait_for(lambda: spans_of(s.client, rid), what="the first span stored")
    stored = len(spans_of(s.client, rid))
    s.client.ok("cancel", pb.CancelReq(rollout_ids=[rid], reason="test"))
    tok = mint(s.key, rid, att.attempt)
    wait_for(lambda: call(s.gateway, tok, *TOKEN_ROUTES[0])[0] != 200,
             timeout=5, what="the token refused")
    for method, path, body in TOKEN_ROUTES:
        st, err = call(s.gateway, tok, method, path, body)
        assert st in (401, 409), (path, st, err)
        assert err["error"]["code"] == "attempt_ended", (path, err)
    s.wait_state(rid, pb.ROLLOUT_CANCELLED, timeout=30)
    time.sleep(0.3)
    assert len(spans_of(s.client, rid)) == stored
    return s


def test_cancelled_attempt_token_refused_from_a_local_sandbox(make_stack):
    s = cancelled_mid_attempt(make_stack, lambda s: s.controller())
    wait_for(lambda: not s.sandboxes(), what="sandbox removed")
