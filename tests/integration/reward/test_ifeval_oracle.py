"""`lisa-reward score` on instruct_follow records against lm-eval's IFEval
checkers (lm_eval.tasks.ifeval.instructions), the reference for the
instruction families IFEval and IFBench share. A generated corpus of
responses (bullets, sections, titles, placeholders, JSON, quotes, commas,
paragraph and response separators, keywords) is scored by both; every
strict verdict must agree. The oracle's module files are loaded directly so
that lm-eval's heavy imports (torch) are never needed."""

import importlib.util
import json
import os
import random
import subprocess
import sys
import types

import pytest

BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", "build/default"), "bin",
                   "lisa-reward")


def _load_oracle():
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("lm-eval is not installed (scripts/pyenv.sh installs it)")
    root = os.path.join(list(spec.submodule_search_locations)[0], "tasks",
                        "ifeval")
    for name, path in (("lm_eval", None), ("lm_eval.tasks", None),
                       ("lm_eval.tasks.ifeval", root)):
        m = types.ModuleType(name)
        m.__path__ = [path] if path else []
        sys.modules.setdefault(name, m)
    mods = {}
    for name in ("instructions_util", "instructions"):
        full = "lm_eval.tasks.ifeval." + name
        s = importlib.util.spec_from_file_location(
            full, os.path.join(root, name + ".py"))
        mod = importlib.util.module_from_spec(s)
        sys.modules[full] = mod
        s.loader.exec_module(mod)
        mods[name] = mod
    return mods["instructions"]


WORDS = ["alpha", "Beta", "GAMMA", "dog", "cat", "bad", "badly", "Section",
         "SECTION", "it's", "well-known", "P.S.", "p.s.", "P.P.S", "zz",
         "la", "LA", "yes", "no", "maybe", "hello", "Hello,", "answer"]
PIECES = ["\n", "\n\n", " ", " ", " ", ", ", ". ", "! ", "? ", "***",
          "\n***\n", "******", "\n******\n", "* ", "\n* ", "\n- ", "**",
          "*", "[", "]", "[x]", "<<", ">>", "<<T>>", "\"", "Section 1",
          "SECTION 2", "Section two", "My answer is yes.", "My answer is no",
          "{\"a\": 1}", "```json\n", "\n```", "Any other questions?", "\t"]


def _response(rng):
    out = []
    for _ in range(rng.randint(1, 40)):
        out.append(rng.choice(WORDS) if rng.random() < 0.55
                   else rng.choice(PIECES))
    return "".join(out)


REL = ["less than", "at least"]

# (id, kwargs generator): the shared checks lisa implements, minus
# number_sentences and capital_word_frequency (the oracle needs NLTK's Punkt
# data, which is not installed offline) and the language-detector ones,
# which lisa refuses.
CASES = [
    ("keywords:existence", lambda r: {"keywords": r.sample(WORDS[:8], 2)}),
    ("keywords:frequency", lambda r: {"keyword": r.choice(["la", "dog", "a"]),
                                      "frequency": r.randint(1, 4),
                                      "relation": r.choice(REL)}),
    ("keywords:forbidden_words", lambda r: {"forbidden_words":
                                            r.sample(["bad", "dog", "yes",
                                                      "it"], 2)}),
    ("keywords:letter_frequency", lambda r: {"letter": r.choice("azlsA"),
                                             "let_frequency": r.randint(1, 6),
                                             "let_relation": r.choice(REL)}),
    ("length_constraints:number_paragraphs",
     lambda r: {"num_paragraphs": r.randint(1, 4)}),
    ("length_constraints:number_words",
     lambda r: {"num_words": r.randint(1, 30), "relation": r.choice(REL)}),
    ("length_constraints:nth_paragraph_first_word",
     # nth beyond num_paragraphs: the oracle draws a random nth instead
     lambda r: (lambda n: {"num_paragraphs": n,
                           "nth_paragraph": r.randint(1, n),
                           "first_word": r.choice(["hello", "alpha", "dog"])}
                )(r.randint(1, 3))),
    ("detectable_content:number_placeholders",
     lambda r: {"num_placeholders": r.randint(1, 3)}),
    ("detectable_content:postscript",
     lambda r: {"postscript_marker": r.choice(["P.S.", "P.P.S", "Note"])}),
    ("detectable_format:number_bullet_lists",
     lambda r: {"num_bullets": r.randint(0, 3)}),
    ("detectable_format:constrained_response", lambda r: {}),
    ("detectable_format:number_highlighted_sections",
     lambda r: {"num_highlights": r.randint(1, 3)}),
    ("detectable_format:multiple_sections",
     lambda r: {"section_spliter": r.choice(["Section", "SECTION"]),
                "num_sections": r.randint(1, 3)}),
    ("detectable_format:json_format", lambda r: {}),
    ("detectable_format:title", lambda r: {}),
    ("combination:two_responses", lambda r: {}),
    ("combination:repeat_prompt",
     lambda r: {"prompt_to_repeat": r.choice(["alpha", "Beta dog", "la la"])}),
    ("startend:end_checker",
     lambda r: {"end_phrase": r.choice(["Any other questions?", "dog"])}),
    ("startend:quotation", lambda r: {}),
    ("punctuation:no_comma", lambda r: {}),
]

N_PER_ID = 150

# Shapes that make the rarer verdicts likely for some ids.
TWEAK = {
    "combination:repeat_prompt":
        lambda r, kw, resp: kw["prompt_to_repeat"] + resp,
    "startend:end_checker": lambda r, kw, resp: resp + kw["end_phrase"],
    "startend:quotation": lambda r, kw, resp: '"' + resp + '"',
    "length_constraints:nth_paragraph_first_word":
        lambda r, kw, resp: "\n\n".join(
            r.choice(["hello", "Hello, there", "'alpha' x", "dog.", resp])
            for _ in range(r.randint(1, 4))),
}


def test_shared_checks_agree_with_lm_eval():
    if not os.access(BIN, os.X_OK):
        pytest.skip("lisa-reward not built")
    rng = random.Random(20260)
    rows, data = [], []
    for iid, gen in CASES:
        for _ in range(N_PER_ID):
            kw, resp = gen(rng), _response(rng)
            if iid in TWEAK and rng.random() < 0.5:
                resp = TWEAK[iid](rng, kw, resp)
            elif rng.random() < 0.1:
                resp = json.dumps({"k": resp})
            rows.append((iid, kw, resp))
            data.append(json.dumps({
                "data_source": "instruct_follow_mini", "answer": resp,
                "ground_truth": json.dumps({"instruction_id_list": [iid],
                                            "kwargs": [kw]})}))
    p = subprocess.run([BIN, "score"], input="\n".join(data).encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert len(out) == len(rows)
    bad, seen = [], {}
    for (iid, kw, resp), o in zip(rows, out):
        cls = REGISTRY[iid]
        inst = cls(iid)
        inst.build_description(**kw)
        want = bool(resp.strip()) and bool(inst.check_following(resp))
        if resp.strip():
            got = o["explanation"]["strict"][0]
        else:
            got = o.get("reward", 0.0) == 1.0  # empty: rule "empty", 0
        seen.setdefault(iid, set()).add(want)
        if got != want:
            bad.append((iid, kw, resp, want, got))
    assert not bad, "%d disagreements, first: %r" % (len(bad), bad[:3])
    # the corpus exercises both verdicts of every id
    one_sided = [i for i, v in seen.items() if len(v) < 2]
    assert not one_sided, one_sided


REGISTRY = {}


@pytest.fixture(autouse=True, scope="module")
def _registry():
    inst = _load_oracle()
    table = {
        "keywords:existence": inst.KeywordChecker,
        "keywords:frequency": inst.KeywordFrequencyChecker,
        "keywords:forbidden_words": inst.ForbiddenWords,
        "keywords:letter_frequency": inst.LetterFrequencyChecker,
        "length_constraints:number_paragraphs": inst.ParagraphChecker,
        "length_constraints:number_words": inst.NumberOfWords,
        "length_constraints:nth_paragraph_first_word":
            inst.ParagraphFirstWordCheck,
        "detectable_content:number_placeholders": inst.PlaceholderChecker,
        "detectable_content:postscript": inst.PostscriptChecker,
        "detectable_format:number_bullet_lists": inst.BulletListChecker,
        "detectable_format:constrained_response":
            inst.ConstrainedResponseChecker,
        "detectable_format:number_highlighted_sections":
            inst.HighlightSectionChecker,
        "detectable_format:multiple_sections": inst.SectionChecker,
        "detectable_format:json_format": inst.JsonFormat,
        "detectable_format:title": inst.TitleChecker,
        "combination:two_responses": inst.TwoResponsesChecker,
        "combination:repeat_prompt": inst.RepeatPromptThenAnswer,
        "startend:end_checker": inst.EndChecker,
        "startend:quotation": inst.QuotationChecker,
        "punctuation:no_comma": inst.CommaChecker,
    }
    REGISTRY.update(table)
    yield
