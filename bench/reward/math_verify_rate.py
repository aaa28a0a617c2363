"""Times math-verify (the recipe's math reward) on the inputs that
lisa-reward-bench dumped, and checks how often it agrees with
`lisa-reward score` on the same inputs. Prints one line of figures.

usage: math_verify_rate.py DUMP.jsonl LISA_REWARD_BINARY [N]
"""
import json
import subprocess
import sys
import time


def last_boxed(s):
    i = s.rfind("\\boxed")
    if i < 0:
        return None
    j = s.find("{", i)
    if j < 0:
        return None
    depth = 0
    for k in range(j, len(s)):
        if s[k] == "{":
            depth += 1
        elif s[k] == "}":
            depth -= 1
            if depth == 0:
                return s[j + 1:k]
    return None


def main():
    dump, binary = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    rows = [json.loads(x) for x in open(dump)][:n]
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    f = math_metric(gold_extraction_target=(LatexExtractionConfig(),),
                    pred_extraction_target=(ExprExtractionConfig(),
                                            LatexExtractionConfig()))
    ref = []
    t0 = time.process_time()
    for r in rows:
        pred = last_boxed(r["answer"])
        pred = r["answer"] if pred is None else pred
        try:
            s, _ = f(["\\boxed{" + r["ground_truth"] + "}"],
                     ["\\boxed{" + pred + "}"])
        except Exception:
            s = 0.0
        ref.append(float(s))
    dt = time.process_time() - t0
    inp = "".join(json.dumps({"data_source": "math", **r}) + "\n" for r in rows)
    out = subprocess.run([binary, "score"], input=inp, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    ours = [json.loads(x)["reward"] for x in out]
    agree = sum(1 for a, b in zip(ours, ref) if a == b)
    print(f"{len(rows) / dt:.0f} {agree} {len(rows)}")


if __name__ == "__main__":
    main()
