"""Generated tables of (category, ground truth, answer) for the reward
oracle tests: math answers in the spellings models produce, and open-ended
texts for ROUGE-L. Deterministic (seeded) so failures reproduce."""

import random

LETTERS = "ABCDEFGHIJ"


def _frac(rng):
    b = rng.randint(2, 40)
    a = rng.randint(1, 5 * b)
    return a, b


def math_cases(seed=7, per_category=40):
    rng = random.Random(seed)
    out = []

    def add(cat, gt, pred):
        out.append((cat, gt, pred))

    for _ in range(per_category):
        n = rng.randint(-10000, 100000)
        add("int_equal", str(n), str(n))
        add("int_diff", str(n), str(n + rng.choice([-2, -1, 1, 3, 10])))
        m = rng.randint(1000, 9999999)
        add("thousands", str(m), f"{m:,}")
        add("thousands_latex", f"{m:,}".replace(",", "{,}"), str(m))
        a, b = _frac(rng)
        add("frac_plain", f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}")
        add("frac_dfrac", f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a}}}{{{b}}}")
        k = rng.randint(2, 5)
        add("frac_unreduced", f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{a * k}}}{{{b * k}}}")
        add("frac_diff", f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{a + 1}}}{{{b}}}")
        q = a / b
        add("frac_decimal6", f"\\frac{{{a}}}{{{b}}}", f"{q:.6f}")
        add("frac_decimal2", f"\\frac{{{a}}}{{{b}}}", f"{q:.2f}" if abs(q - round(q, 2)) > 1e-9 else f"{q + 0.01:.2f}")
        w = rng.randint(1, 9)
        c, d = rng.randint(1, 6), 7
        add("mixed", f"{w}\\frac{{{c}}}{{{d}}}", f"\\frac{{{w * d + c}}}{{{d}}}")
        p = rng.randint(1, 99)
        add("percent_same", f"{p}\\%", f"{p}")
        add("percent_frac", f"{p / 100:g}", f"{p}\\%")
        r = rng.choice([2, 3, 5, 6, 7])
        s = rng.randint(2, 6)
        add("sqrt_equal", f"{s}\\sqrt{{{r}}}", f"\\sqrt{{{s * s * r}}}")
        add("sqrt_diff", f"{s}\\sqrt{{{r}}}", f"\\sqrt{{{s * s * r + 1}}}")
        add("sqrt_frac", f"\\frac{{\\sqrt{{{r}}}}}{{{s}}}", f"\\sqrt{{{r}}}/{s}")
        add("pi_frac", f"\\frac{{{s}\\pi}}{{{r}}}", f"{s}\\pi/{r}")
        add("pi_decimal6", f"\\frac{{\\pi}}{{{r}}}", f"{3.141592653589793 / r:.6f}")
        add("pi_diff", f"{s}\\pi", f"{s + 1}\\pi")
        e = rng.randint(2, 8)
        mant = rng.randint(11, 99) / 10
        add("sci_times", f"{mant}\\times 10^{{{e}}}", f"{mant * 10 ** e:.0f}")
        add("sci_e", f"{mant * 10 ** e:.0f}", f"{mant}e{e}")
        add("units_text", f"{p}", f"{p}\\text{{ cm}}")
        add("units_plain", f"{p}", f"{p} cm")
        add("units_mathrm", f"{mant}", f"{mant}\\,\\mathrm{{keV}}")
        add("degrees", f"{p}^\\circ", f"{p}")
        add("degrees_brace", f"{p}", f"{p}^{{\\circ}}")
        xs = rng.sample(range(-20, 40), rng.randint(2, 5))
        ys = xs[:]
        rng.shuffle(ys)
        add("set_perm", "\\{" + ",".join(map(str, xs)) + "\\}", "\\{" + ", ".join(map(str, ys)) + "\\}")
        add("set_diff", "\\{" + ",".join(map(str, xs)) + "\\}", "\\{" + ",".join(map(str, xs[:-1] + [xs[-1] + 1])) + "\\}")
        add("list_perm", ",".join(map(str, xs)), ",".join(map(str, ys)))
        big = [rng.randint(100, 999) for _ in range(3)] + [rng.randint(1, 9)]
        add("set_3digit", "\\{" + ", ".join(map(str, big)) + "\\}",
            "\\{" + ",".join(map(str, big[::-1])) + "\\}")
        t = xs[:2]
        add("tuple_same", f"({t[0]},{t[1]})", f"({t[0]}, {t[1]})")
        add("tuple_swap", f"({t[0]},{t[1]})", f"({t[1]},{t[0]})")
        lo, hi = sorted(t)
        add("interval_same", f"[{lo},{hi})", f"[{lo}, {hi})")
        add("interval_diff", f"[{lo},{hi})", f"[{lo},{hi}]")
        a1, a2 = rng.randint(1, 9), rng.randint(1, 9)
        add("poly_equal", f"(x+{a1})(x+{a2})", f"x^2+{a1 + a2}x+{a1 * a2}")
        add("poly_diff", f"(x+{a1})(x+{a2})", f"x^2+{a1 + a2 + 1}x+{a1 * a2}")
        add("poly_square", f"(x+{a1})^2", f"x^2+{2 * a1}x+{a1 * a1}")
        add("frac_expr", f"\\frac{{x}}{{{a1}}}", f"x/{a1}")
        L = rng.choice(LETTERS)
        add("letter_same", L, L)
        add("letter_text", L, f"\\text{{{L}}}")
        add("letter_diff", L, rng.choice([c for c in LETTERS if c != L]))
        add("neg_frac", f"-{s}", f"-\\frac{{{2 * s}}}{{2}}")
        add("assign", f"{p}", f"x = {p}")
        add("decimal_trailing", f"{mant}", f"{mant}0")
        add("text_word", "\\text{" + rng.choice(["Paris", "blue", "yes", "north"]) + "}", rng.choice(["Paris", "blue", "yes", "north"]))
    return out


WORDS = ("the of and to in is was for on that with as by at from it an be "
         "this which or are were has have had not but all they their more "
         "running runs ran cats cat dogs dog quickly quick generalization "
         "generalize relational conditional happiness happy skies sky dying "
         "agreed feed plastered motoring hopping filing conflated troubled "
         "sized controlling electrical hopefulness goodness formality "
         "sensitivity operator predication allowance inference airliner "
         "adjustable defensible irritant replacement dependent adoption "
         "communism activate effective bowdlerize probate cease caresses "
         "ponies ties university universities news innings proceed exceed "
         "1990s 42 3 2023 covid-19 e-mail co-operate naïve café "
         "İstanbul Kelvin").split()


def rouge_cases(seed=11, n=400):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25)))
        if i % 4 == 0:
            p = t
        elif i % 4 == 1:
            ws = t.split()
            rng.shuffle(ws)
            p = " ".join(ws[: max(1, len(ws) - rng.randint(0, 3))])
        else:
            p = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
        if i % 5 == 0:
            p = p.upper() + "!"
        if i % 7 == 0:
            p = p.replace(" ", ", ") + "."
        out.append((t, p))
    return out
