#!/usr/bin/env python3
"""Arithmetic word problems for the SmolLM2 learning run (scripts/smol-rl.sh).

Writes, deterministically from a seed:

  OUT/train.json, OUT/val.json   verl records: one-step word problems
      (addition, subtraction, multiplication, exact division) with their
      answers as the ground truth. The data source, math_toy_arith, routes
      the agent to the compact toy prompt and its two tools (execute_bash,
      submit) and lisa-reward to its math rule. No problem text is in both
      splits.
  OUT/sft.jsonl                  demonstrations for lisa-sft on bare
      arithmetic questions of the same four operations and operand ranges
      ("What is 37 + 55?", "What is 96 / 8?"): the conversation lisa-agent
      has on such a task, one execute_bash call that lets bash compute the
      answer into /testbed/answer.txt (`echo $((37 + 55)) >
      /testbed/answer.txt`), then submit. They teach the tool-call format,
      where the answer goes and how bash computes, but not which operation
      a word problem asks for nor which of its numbers to use: RL on the
      word problems has to learn that from the reward. Other families
      (--sft-family): lookup (look a number up in the question: "Shelf 4
      holds 37 books and shelf 9 holds 12 books. How many books are on
      shelf 9?", answered by echoing that number; a warm start on it
      learned to copy numbers from the question), count (questions whose
      answer a command counts: "How many letters are in the word
      'pencil'?": `echo -n pencil | wc -c > /testbed/answer.txt`), mix
      (half lookup, half count).

  make_arith.py OUT [--seed S] [--train N] [--val N] [--sft N] [--max A]
                    [--sft-family expr|lookup|count|mix]

--max bounds the operands of addition and subtraction (multiplication and
division use factors up to 12): the difficulty knob.
"""

import argparse
import json
import os
import random

SYSTEM = ("You solve tasks with tools. Write the answer to "
          "/testbed/answer.txt, then call submit.")
# lisa_toy.h's LISA_TOY_TOOLS: what lisa-agent sends for math_toy* tasks
TOOLS = [
    {"type": "function", "function": {
        "name": "execute_bash", "description": "Run a bash command in /testbed.",
        "parameters": {"type": "object", "properties": {"command": {
            "type": "string", "description": "The command."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Finish the task.",
        "parameters": {"type": "object", "properties": {}, "required": []}}},
]
MAX_TURNS = 4
SOURCE = "math_toy_arith"

NAMES = ["Ava", "Ben", "Carla", "Dan", "Emma", "Finn", "Grace", "Hugo", "Iris",
         "Jack", "Kira", "Leo", "Mia", "Noah", "Olga", "Pablo", "Rosa", "Sam",
         "Tara", "Umar", "Vera", "Will", "Yara", "Zoe"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "cookies", "books",
         "stamps", "coins", "shells", "cards", "balloons", "eggs"]
PLACES = ["shelf", "box", "room", "bag", "row", "basket"]


def problem(rng, top):
    """One word problem and its integer answer."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(2, top), rng.randint(2, top)
        return (f"{name} has {a} {item} and gets {b} more. "
                f"How many {item} does {name} have now?", a + b)
    if kind == 1:
        a = rng.randint(3, top)
        b = rng.randint(1, a - 1)
        return (f"{name} has {a} {item} and gives away {b}. "
                f"How many {item} does {name} have left?", a - b)
    if kind == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return (f"{name} buys {a} bags with {b} {item} in each bag. "
                f"How many {item} does {name} buy?", a * b)
    b, q = rng.randint(2, 12), rng.randint(2, 12)
    return (f"{name} shares {b * q} {item} equally among {b} friends. "
            f"How many {item} does each friend get?", q)


OPS = ["+", "-", "*", "/"]


def expr(rng, top):
    """A bare arithmetic question of one of the four operations, operands
    drawn as problem() draws them (the default SFT family): the question
    and the command that lets bash compute the answer."""
    kind = rng.randrange(4)
    if kind == 0:
        a, b = rng.randint(2, top), rng.randint(2, top)
    elif kind == 1:
        a = rng.randint(3, top)
        b = rng.randint(1, a - 1)
    elif kind == 2:
        a, b = rng.randint(2, 12), rng.randint(2, 12)
    else:
        b, q = rng.randint(2, 12), rng.randint(2, 12)
        a = b * q
    op = OPS[kind]
    return (f"What is {a} {op} {b}?",
            f"echo $(({a} {op} {b})) > /testbed/answer.txt")


def lookup(rng):
    """A question whose answer is one of its numbers (the SFT family)."""
    place, item = rng.choice(PLACES), rng.choice(ITEMS)
    n = rng.randint(2, 3)
    labels = rng.sample(range(1, 20), n)
    counts = [rng.randint(2, 99) for _ in range(n)]
    parts = [f"{place} {lab} holds {c} {item}" for lab, c in zip(labels, counts)]
    text = ", ".join(parts[:-1]) + " and " + parts[-1]
    k = rng.randrange(n)
    return (f"{text[0].upper()}{text[1:]}. How many {item} does "
            f"{place} {labels[k]} hold?", counts[k])


def count(rng):
    """A question a command answers by counting (the other SFT family):
    the question and the command that writes the answer."""
    if rng.randrange(2) == 0:
        word = rng.choice(NAMES + ITEMS + PLACES).lower()
        return (f"How many letters are in the word '{word}'?",
                f"echo -n {word} | wc -c > /testbed/answer.txt")
    words = " ".join(rng.choice(ITEMS) for _ in range(rng.randint(2, 7)))
    return (f"How many words are in the text '{words}'?",
            f"echo '{words}' | wc -w > /testbed/answer.txt")


def record(text, answer, split, i):
    return {"data_source": SOURCE,
            "prompt": [{"role": "user", "content": text}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"id": f"arith_{split}_{i:05d}", "split": split,
                           "index": i, "problem_statement": text}}


def demo(text, command):
    """lisa-agent's conversation on a toy-domain task, answered right."""
    call = {"command": command}
    obs = ("Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n"
           f"\nSteps Remaining: {MAX_TURNS - 1}")

    def tool_call(cid, name, args):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": args}}]}
    return {"messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{text}\nSteps Remaining: {MAX_TURNS}"},
        tool_call("call_1", "execute_bash", call),
        {"role": "tool", "tool_call_id": "call_1", "name": "execute_bash",
         "content": obs},
        tool_call("call_2", "submit", {})], "tools": TOOLS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=512)
    ap.add_argument("--val", type=int, default=64)
    ap.add_argument("--sft", type=int, default=400)
    ap.add_argument("--max", type=int, default=50)
    ap.add_argument("--sft-family",
                    choices=("expr", "lookup", "count", "mix"),
                    default="expr")
    a = ap.parse_args()
    if a.max < 3 or a.train < 1 or a.val < 1 or a.sft < 0:
        ap.error("--max is at least 3; --train and --val at least 1")
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    # validation first, then training problems that are not among them
    seen, splits = set(), {}
    for split, n in (("val", a.val), ("train", a.train)):
        recs, misses = [], 0
        while len(recs) < n:
            text, ans = problem(rng, a.max)
            if text in seen:
                misses += 1
                if misses > 10000:
                    raise SystemExit("make_arith: too few distinct problems; "
                                     "raise --max")
                continue
            misses = 0
            seen.add(text)
            recs.append(record(text, ans, split, len(recs)))
        splits[split] = recs
    for split, recs in splits.items():
        with open(os.path.join(a.out, f"{split}.json"), "w") as f:
            json.dump(recs, f, indent=1)
            f.write("\n")
    with open(os.path.join(a.out, "sft.jsonl"), "w") as f:
        for i in range(a.sft):
            fam = a.sft_family
            if fam == "mix":
                fam = ("lookup", "count")[i % 2]
            if fam == "expr":
                text, cmd = expr(rng, a.max)
            elif fam == "lookup":
                text, ans = lookup(rng)
                cmd = f"echo {ans} > /testbed/answer.txt"
            else:
                text, cmd = count(rng)
            f.write(json.dumps(demo(text, cmd)) + "\n")
    print(f"make_arith: {a.train} train, {a.val} val, {a.sft} demonstrations "
          f"in {a.out} (seed {a.seed}, operands up to {a.max})")


if __name__ == "__main__":
    main()
