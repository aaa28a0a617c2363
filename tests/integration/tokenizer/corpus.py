"""Generated test corpus for the tokenizer oracle tests and the benchmark.

Deterministic (seeded) texts that stress every stage of a byte-level BPE
pipeline: code, math/LaTeX, CJK, emoji sequences, combining characters and
NFC cases, whitespace runs of every Unicode space, newlines in all forms,
contractions in both cases, digits, special tokens glued to text, random
code points from every plane, plus real agent trajectories from the seed
samples.
"""
import json
import os
import random
import unicodedata

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>", "<think>",
            "</think>", "<|fim_prefix|>", "<|box_start|>", "<|vision_pad|>"]

CODE = [
    "def f(x, y=3):\n    return x**2 + y  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tbuf[i] = (char) (i & 0xFF);\n}\n",
    '{"name": "execute_bash", "arguments": {"command": "ls -la /testbed"}}',
    "if [ -f \"$HOME/.bashrc\" ]; then\n  source ~/.bashrc\nfi\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n",
    "const x = arr.map((v) => v * 2).filter(Boolean);\r\n",
    "    \n\n\t\t  x = 1\n\n\n",
    "<html><body class='main'>&nbsp;&lt;p&gt;</body></html>",
    "fn main() { println!(\"{:?}\", vec![1u8, 2, 3]); }",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\",42);}\n",
]

MATH = [
    r"\int_0^\infty e^{-x^2}\,dx = \frac{\sqrt{\pi}}{2}",
    r"$$\sum_{k=1}^{n} k = \frac{n(n+1)}{2}$$",
    "E = mc² ≈ 9×10¹⁶ J; ∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−L|<ε",
    r"\begin{align} a &= b + c \\ d &= \alpha\beta\gamma \end{align}",
    "3.14159265358979 + 2.71828 = 5.85987; 1e-10, -0.5, 1,000,000",
    "ℝⁿ → ℂ, ∮ ∇·F dA, ∂²u/∂t² = c²∇²u, ½ ⅓ ¼",
]

NATURAL = [
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see it's what we've done; THEY'LL SAY IT'S OK, 'tis.",
    "Don't WON'T can't I'D you'Re We'VE",
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。",
    "Привет, мир! Ελληνικά κείμενα. שלום עולם. مرحبا بالعالم",
    "हिन्दी पाठ और தமிழ் உரை, ภาษาไทย ไม่มีช่องว่าง",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🏳️‍🌈 😀😃😄 1️⃣ ©️",
    "Café, naïve, façade, résumé, Ångström, Zürich, São Paulo",
    # decomposed forms that NFC composes
    "Cafe\u0301 nai\u0308ve A\u030angstro\u0308m e\u0301\u0301 \u1100\u1161\u11a8",
    "o\u0308\u0304 q\u0323\u0307 s\u0323\u0307 \u0041\u030a\u0301 \u212b \u2126",
    "Ti\u1ebfng Vi\u00ea\u0323t c\u00f3 d\u1ea5u",
    "\u0915\u093c \u0928\u093c \u09a1\u09bc \u0f40\u0fb5 \u05e9\u05c1",
]

SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2000", "\u2003",
          "\u3000", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c",
          "\u200b", "\u180e", "\ufeff"]


def _newer_than_python(c):
    """Unassigned in Python's Unicode database (14.0 here). Letters and
    digits assigned since then are one known difference: PCRE2 10.42
    classifies by Unicode 14, the Oniguruma inside tokenizers by 16, so
    \\p{L} and \\p{N} disagree on them. Corpora leave them out."""
    return unicodedata.category(c) == "Cn"


def _rand_cp(rng):
    """A random code point (not a surrogate, not unassigned) from anywhere
    in Unicode."""
    while True:
        r = rng.random()
        if r < 0.3:
            cp = rng.randrange(0x20, 0x800)
        elif r < 0.7:
            cp = rng.randrange(0x800, 0x10000)
        elif r < 0.9:
            cp = rng.randrange(0x10000, 0x20000)
        else:
            cp = rng.randrange(0x20000, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF and not _newer_than_python(chr(cp)):
            return chr(cp)


def _assigned_cp(rng):
    while True:
        c = _rand_cp(rng)
        if unicodedata.category(c) not in ("Cn", "Co", "Cs"):
            return c


def _whitespace_run(rng):
    return "".join(rng.choice(SPACES) for _ in range(rng.randrange(1, 12)))


def generated(seed=1234, n=1500):
    """n mixed texts: fragments of every family glued with random glue."""
    rng = random.Random(seed)
    families = CODE + MATH + NATURAL
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.randrange(1, 8)):
            k = rng.random()
            if k < 0.35:
                s = rng.choice(families)
                if rng.random() < 0.3:  # cut it anywhere
                    a = rng.randrange(len(s))
                    s = s[a:a + rng.randrange(1, 40)]
                parts.append(s)
            elif k < 0.5:
                parts.append(_whitespace_run(rng))
            elif k < 0.6:
                parts.append(rng.choice(SPECIALS))
            elif k < 0.7:
                parts.append("".join(_rand_cp(rng)
                                     for _ in range(rng.randrange(1, 10))))
            elif k < 0.8:
                parts.append("".join(_assigned_cp(rng)
                                     for _ in range(rng.randrange(1, 10))))
            elif k < 0.9:
                parts.append(str(rng.randrange(10 ** rng.randrange(1, 15))))
            else:
                # a word followed by combining marks
                parts.append(rng.choice("aeiouAEIOUnsc") + "".join(
                    chr(rng.randrange(0x300, 0x370))
                    for _ in range(rng.randrange(1, 4))))
        out.append("".join(parts))
    # fixed edge cases
    out += ["", " ", "\n", "a", "'s", "'S", " 's", "x's", "\u017ft", "'\u017f",
            " " * 1000, "\n" * 300, "\t \n" * 200, "a" * 3000, "1" * 500,
            "<|im_start|><|im_end|>", "<|im_start", "<|im_start|", "<<|im_end|>>",
            "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<think>\n\n</think>\n\n",
            "\u0301", "<|im_end|>\u0301", "e<|im_end|>\u0301"]
    return out


def per_codepoint(step=1, limit=0x30000, group=8):
    """Every code point below `limit` (no surrogates), each in a few
    contexts, so that regex classes and NFC are checked one by one;
    `group` code points share one text (fewer, longer texts run faster
    through both tokenizers)."""
    out, cur = [], []
    for cp in range(0, limit, step):
        if 0xD800 <= cp <= 0xDFFF or _newer_than_python(chr(cp)):
            continue
        c = chr(cp)
        cur.append(f"x{c} {c}{c}1{c}\n{c}'s {c}  a{c}")
        if len(cur) == group:
            out.append("|".join(cur))
            cur = []
    if cur:
        out.append("|".join(cur))
    return out


def seed_samples(root):
    """Real texts: every string found in the seed-sample JSON files."""
    base = os.path.join(root, "tests", "fixtures", "seed-samples")
    texts = []

    def walk(v):
        if isinstance(v, str):
            if v:
                texts.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for dirpath, _, files in os.walk(base):
        for f in sorted(files):
            p = os.path.join(dirpath, f)
            if f.endswith(".json"):
                with open(p, encoding="utf-8") as fh:
                    walk(json.load(fh))
            elif f.endswith(".txt"):
                with open(p, encoding="utf-8") as fh:
                    texts.append(fh.read())
    return texts
