#!/usr/bin/env python3
"""Print the lisa broker's events as JSON lines, reporting sequence gaps.

    watch_events.py --count 10 --topic rollout"""
import argparse
import json
import sys
import time

from google.protobuf import json_format

from lisa_client import events_endpoint, read_event, subscribe


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", default=None)
    ap.add_argument("--broker", default=None)
    ap.add_argument("--key-file", default=None,
                    help="this client's secret CURVE certificate "
                    "(default $LISA_CURVE_CERT)")
    ap.add_argument("--broker-cert", default=None,
                    help="the broker's public CURVE certificate "
                    "(default $LISA_BROKER_CERT)")
    ap.add_argument("--topic", action="append", default=None)
    ap.add_argument("--count", type=int, default=0, help="stop after N events")
    ap.add_argument("--duration", type=float, default=0, help="stop after S seconds")
    a = ap.parse_args()
    sock = subscribe(events_endpoint(a.events, a.broker), a.topic or [""],
                     a.key_file, a.broker_cert)
    seen, last = 0, None
    end = time.monotonic() + a.duration if a.duration else None
    while not a.count or seen < a.count:
        if end and time.monotonic() >= end:
            break
        got = read_event(sock, 200)
        if got is None:
            continue
        topic, ev = got
        if last is not None and ev.seq > last + 1:
            print("gap: missed %d events" % (ev.seq - last - 1), file=sys.stderr)
        last = ev.seq
        out = json_format.MessageToDict(ev, preserving_proto_field_name=True)
        out["topic"] = topic
        print(json.dumps(out), flush=True)
        seen += 1
    sock.close(0)


if __name__ == "__main__":
    main()
