#!/usr/bin/env python3
"""Export finished rollouts from the lisa broker as JSON lines: per
rollout its reward and the token sequences of its final attempt with loss
masks and sampling logprobs. --prune deletes what was exported.

    export_results.py --run my-run -o results.jsonl"""
import argparse
import json
import sys

from google.protobuf import json_format

from lisa_client import Broker, pb, sequences


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="")
    ap.add_argument("--prune", action="store_true")
    ap.add_argument("-o", "--output", default="-")
    ap.add_argument("--broker", default=None)
    ap.add_argument("--key-file", default=None,
                    help="this client's secret CURVE certificate "
                    "(default $LISA_CURVE_CERT)")
    ap.add_argument("--broker-cert", default=None,
                    help="the broker's public CURVE certificate "
                    "(default $LISA_BROKER_CERT)")
    a = ap.parse_args()
    out = sys.stdout if a.output == "-" else open(a.output, "w")
    b = Broker(a.broker, caller="export_results.py", key_file=a.key_file,
               broker_cert=a.broker_cert)
    after, total = "", 0
    while True:
        ex = b.call("export", pb.ExportReq(run_id=a.run, after=after, limit=50,
                                           prune=a.prune)).export
        for r in ex.rollouts:
            row = json_format.MessageToDict(r, preserving_proto_field_name=True)
            spans = [s for s in ex.spans
                     if s.rollout_id == r.rollout_id and s.attempt == r.attempts]
            row["reward_value"] = r.reward.value if r.has_reward else None
            row["sequences"] = sequences(spans)
            out.write(json.dumps(row) + "\n")
            total += 1
        after = ex.next_after
        if not after:
            break
    out.flush()
    print("exported %d rollouts%s" % (total, " (pruned)" if a.prune else ""),
          file=sys.stderr)
    b.close()


if __name__ == "__main__":
    main()
