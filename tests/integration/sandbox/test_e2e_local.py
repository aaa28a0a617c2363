"""One attempt end to end on the `local` backend, every service real and
only the model scripted: the broker hands the claim to lisa-controller,
which starts a bubblewrap sandbox running lisa-agent; the agent fetches its
task from lisa-gateway over the unix socket bound into the sandbox, the
model (a scripted engine behind the gateway) calls tools, the agent posts
its answer, lisa-reward scores it and the rollout succeeds in the broker
with the spans the gateway recorded."""
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
