"""docs/protocol.md matches proto/lisa.proto: every message, every RPC
body and every status code of the proto is named on the page."""
import os
import re

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROTO = open(os.path.join(SRC, "proto", "lisa.proto")).read()
DOC = open(os.path.join(SRC, "docs", "protocol.md")).read()


def oneof_types(envelope):
    body = re.search(r"message %s \{(.*?)\n\}" % envelope, PROTO, re.S).group(1)
    block = body[body.index("oneof body"):]
    return re.findall(r"^\s+(\w+) \w+ = \d+;", block, re.M)


def test_every_message_is_documented():
    names = re.findall(r"^message (\w+)", PROTO, re.M)
    assert len(names) > 40
    missing = [n for n in names if not re.search(r"\b%s\b" % n, DOC)]
    assert not missing, "docs/protocol.md does not name: %s" % missing


def test_every_rpc_body_is_in_the_reference():
    req, rep = oneof_types("Request"), oneof_types("Reply")
    assert len(req) == len(rep) >= 17
    ref = DOC[DOC.index("## RPC reference"):]
    missing = [t for t in req + rep if t not in ref]
    assert not missing, missing


def test_every_status_code_is_documented():
    codes = re.findall(r"^\s+(CODE_\w+) = \d+;", PROTO, re.M)
    missing = [c for c in codes if c not in DOC]
    assert not missing, missing


def test_documented_messages_exist():
    # names in backticks that look like protobuf messages must exist
    cited = set(re.findall(r"`([A-Z][A-Za-z]+(?:Req|Rep|Msg|Event))`", DOC))
    names = set(re.findall(r"^message (\w+)", PROTO, re.M))
    unknown = sorted(cited - names)
    assert not unknown, unknown
