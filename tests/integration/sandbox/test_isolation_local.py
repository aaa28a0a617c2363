"""Isolation of `local` sandboxes, tried from inside by the model's own
commands with every service real: two sandboxes run at once; the second
looks for the first one's files (its /testbed and /tmp, through /proc and
the file system), tries to open a TCP connection to the broker, and tries
to use the gateway with a token for the other rollout. None of it works:
the model sees only its own files and processes, no network, and the
gateway refuses its token for the other rollout."""
from brokerlib import task
from gwlib import mint
from stacklib import pb, scripted, tokenizer, wait_for


def test_sandbox_cannot_reach_neighbour_broker_or_other_rollout(make_stack):
    holder = {}

    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        k = text.count("<tool_response>")
        if "task-owner" in text:
            return scripted(
                ("execute_bash", {"command":
                                  "echo owner-secret-7 > /testbed/secret.txt;"
                                  " echo owner-secret-7 > /tmp/secret.txt;"
                                  " sleep 4"}),
                ("submit", {}))(prompt, body)
        # The prober's one command; its output goes back to the model.
        wait_for(lambda: "probe" in holder, timeout=5, what="probe")
        return scripted(
            ("execute_bash", {"command": holder["probe"]}),
            ("submit", {}))(prompt, body) if k < 2 else \
            scripted(None, None, ("submit", {}))(prompt, body)

    s = make_stack(script)
    port = s.broker.ep["rpc"].rsplit(":", 1)[1]
    (owner,) = s.enqueue([task("task-owner")])
    ctl = s.controller(max_concurrency=2)
    wait_for(lambda: len(s.sandboxes()) == 1 and s.engine.requests,
             what="owner running")
    (prober,) = s.enqueue([task("task-prober")])
    # The prober's own attempt token (what its agent holds; the model's
    # commands never see it, so the test hands it over) names its rollout:
    # the gateway refuses it for the owner's rollout.
    mine = mint(s.key, prober, 1)
    holder["probe"] = (
        "cat /proc/[0-9]*/root/testbed/secret.txt /proc/[0-9]*/root/tmp/"
        "secret.txt 2>/dev/null; find / \\( -path /proc -o -path /sys -o "
        "-path /usr \\) -prune -o -name secret.txt -print 2>/dev/null | "
        "xargs -r cat; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && "
        "echo BROKER-OPEN; "
        "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo NET-OPEN; "
        "ls /proc | grep -c '^[0-9]' | sed 's/^/procs=/'; "
        "curl -s --unix-socket /run/lisa/gateway.sock "
        f"-H 'Authorization: Bearer {mine}' -H 'Content-Type: "
        "application/json' -d '{\"rollout_id\": \"" + owner + "\", "
        "\"attempt\": 1, \"answer\": \"stolen\"}' "
        "http://gw/lisa/v1/result | head -c 300; echo; "
        "curl -s --unix-socket /run/lisa/gateway.sock "
        f"-H 'Authorization: Bearer {mine}' "
        "http://gw/lisa/v1/task | head -c 300; echo END")
    r, atts = s.wait_state(prober, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=60)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts
    obs = None
    for body in s.engine.requests:
        text = tokenizer().decode(body["prompt"], skip_special_tokens=False)
        if "task-prober" in text and text.count("<tool_response>") == 1:
            obs = text.rsplit("<tool_response>", 1)[1]
    assert obs is not None and "END" in obs, obs
    assert "owner-secret-7" not in obs, obs  # no neighbour's files
    assert "BROKER-OPEN" not in obs and "NET-OPEN" not in obs, obs
    # Only the sandbox's own few processes are visible.
    procs = int(obs.split("procs=", 1)[1].split()[0])
    assert procs < 10, obs
    # The gateway refused the prober's token for the owner's rollout, and
    # the task it serves for that token is the prober's own.
    assert "wrong_rollout" in obs, obs
    assert "task-prober" in obs and "task-owner" not in obs, obs
    r_owner, atts = s.wait_state(owner, [pb.ROLLOUT_SUCCEEDED,
                                         pb.ROLLOUT_FAILED], timeout=30)
    assert r_owner.state == pb.ROLLOUT_SUCCEEDED, atts
    assert r_owner.reward.extracted != "stolen"
    assert not any("stolen" in a.reason for a in atts)
    del ctl
