#!/usr/bin/env python3
"""Submit verl-format tasks (JSON array or JSON lines) to the lisa broker.

    submit_tasks.py train_verl.json --n 8 --run my-run --step 0

Each record: prompt, data_source, reward_model.ground_truth, extra_info
(problem_statement, input_files as a JSON string or object, qa_type, id).
Prints one JSON object with the rollout and group ids."""
import argparse
import json
import sys

from lisa_client import Broker, pb


def load(path):
    text = sys.stdin.read() if path == "-" else open(path).read()
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(l) for l in text.splitlines() if l.strip()]


def to_task(rec, index, n):
    extra = dict(rec.get("extra_info") or {})
    gt = (rec.get("reward_model") or {}).get("ground_truth",
                                              rec.get("ground_truth", extra.get("ground_truth", "")))
    problem = extra.get("problem_statement") or rec.get("problem_statement")
    if not problem:
        prompt = rec.get("prompt")
        if isinstance(prompt, str):
            problem = prompt
        else:
            users = [m["content"] for m in prompt or [] if m.get("role") == "user"]
            problem = users[-1] if users else ""
    files = extra.pop("input_files", rec.get("input_files")) or {}
    if isinstance(files, str):
        files = json.loads(files)
    extra.pop("ground_truth", None)
    return pb.TaskSpec(
        task_id=str(extra.get("id", rec.get("id", index))),
        data_source=rec.get("data_source") or rec.get("domain", ""),
        problem_statement=problem,
        files=[pb.File(path=k, content=str(v).encode()) for k, v in files.items()],
        ground_truth=gt if isinstance(gt, str) else json.dumps(gt),
        extra_info_json=json.dumps(extra), n=n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--run", default="")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--policy", type=int, default=0)
    ap.add_argument("--mode", choices=["train", "val"], default="train")
    ap.add_argument("--key", default="", help="idempotency key (resubmits return the same ids)")
    ap.add_argument("--broker", default=None)
    ap.add_argument("--key-file", default=None,
                    help="this client's secret CURVE certificate "
                    "(default $LISA_CURVE_CERT)")
    ap.add_argument("--broker-cert", default=None,
                    help="the broker's public CURVE certificate "
                    "(default $LISA_BROKER_CERT)")
    a = ap.parse_args()
    tasks = [to_task(r, i, a.n) for i, r in enumerate(load(a.file))]
    b = Broker(a.broker, caller="submit_tasks.py", key_file=a.key_file,
               broker_cert=a.broker_cert)
    rep = b.call("enqueue", pb.EnqueueReq(
        run_id=a.run, step=a.step, policy_version=a.policy,
        mode=pb.MODE_VAL if a.mode == "val" else pb.MODE_TRAIN,
        tasks=tasks, idempotency_key=a.key))
    print(json.dumps({"tasks": len(tasks), "rollout_ids": list(rep.enqueue.rollout_ids),
                      "group_ids": list(rep.enqueue.group_ids)}))
    b.close()


if __name__ == "__main__":
    main()
