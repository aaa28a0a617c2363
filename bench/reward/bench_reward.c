/*
 * lisa-reward-bench: how many rewards one core computes per second, per
 * rule, on realistic answers (a paragraph of reasoning ending in a boxed
 * answer, multiple-choice explanations, free-text answers). Every input
 * goes through rwd_score, the same path the worker and `score` use,
 * including extraction and the JSON explanation.
 *
 *   lisa-reward-bench [--seconds S] [--dump FILE]
 *
 * --dump writes the math inputs as JSON lines (ground_truth, answer) so a
 * Python reference can be timed on exactly the same inputs (run.sh).
 */
#include "rwd_score.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NCASES 512

typedef struct {
    const char *ds;
    char *answer;
    char *truth;
    const char *extra;
} case_t;

static uint64_t s_rng = 0x9E3779B97F4A7C15ull;

static uint32_t
s_rand(void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return (uint32_t) (s_rng >> 11);
}

static const char *const s_filler[] = {
    "First, note that the expression is symmetric, so we may assume $a \\le "
    "b$. ",
    "Substituting $x = 2$ gives $4 + 2k = 10$, hence $k = 3$. ",
    "By the Pythagorean theorem the hypotenuse has length $\\sqrt{a^2+b^2}$. ",
    "We count the cases separately and add them up. ",
    "Checking the boundary values confirms there are no other solutions. ",
    "The discriminant $b^2 - 4ac$ must be non-negative. ",
};

static char *
s_paragraph(const char *tail)
{
    char buf[4096];
    size_t w = 0;
    int k = 2 + (int) (s_rand() % 5);
    for (int i = 0; i < k; i++)
        w += (size_t) snprintf(buf + w, sizeof buf - w, "%s",
                               s_filler[s_rand() % 6]);
    snprintf(buf + w, sizeof buf - w, "%s", tail);
    return strdup(buf);
}

static void
s_math_case(case_t *c)
{
    char gt[128], ans[160], tail[256];
    int a = (int) (s_rand() % 900) + 1, b = (int) (s_rand() % 11) + 2;
    bool right = s_rand() % 3 != 0;
    switch (s_rand() % 6) {
    case 0:
    case 1: /* AIME-style integer */
        snprintf(gt, sizeof gt, "%d", a);
        snprintf(ans, sizeof ans, "%d", right ? a : a + 1);
        break;
    case 2: /* fraction vs decimal or other spelling */
        snprintf(gt, sizeof gt, "\\frac{%d}{%d}", a, b);
        if (right)
            snprintf(ans, sizeof ans, "\\dfrac{%d}{%d}", 2 * a, 2 * b);
        else
            snprintf(ans, sizeof ans, "%.3f", (double) a / b + 0.01);
        break;
    case 3: /* radicals and pi */
        snprintf(gt, sizeof gt, "%d\\sqrt{%d}", b, 2 + a % 5);
        snprintf(ans, sizeof ans, "\\sqrt{%d}", b * b * (2 + a % 5) + !right);
        break;
    case 4: /* sets / tuples */
        snprintf(gt, sizeof gt, "\\{%d, %d, %d\\}", a, b, a + b);
        snprintf(ans, sizeof ans, "\\{%d,%d,%d\\}", a + b, a,
                 right ? b : b + 1);
        break;
    default: /* expression */
        snprintf(gt, sizeof gt, "(x+%d)^2", b);
        snprintf(ans, sizeof ans, "x^2+%dx+%d", 2 * b, b * b + !right);
        break;
    }
    snprintf(tail, sizeof tail, "Therefore the answer is $\\boxed{%s}$.", ans);
    c->ds = s_rand() % 4 ? "math_mini" : "physics_mini";
    c->answer = s_paragraph(tail);
    c->truth = strdup(gt);
    c->extra = NULL;
}

static void
s_mc_case(case_t *c)
{
    char tail[128], gt[4];
    char L = (char) ('A' + s_rand() % 10), M = s_rand() % 2 ? L : 'B';
    switch (s_rand() % 4) {
    case 0:
        snprintf(tail, sizeof tail, "The answer is (%c).", M);
        break;
    case 1:
        snprintf(tail, sizeof tail, "Answer: %c", M);
        break;
    case 2:
        snprintf(tail, sizeof tail, "{\"answer\": \"%c\"}", M);
        break;
    default:
        snprintf(tail, sizeof tail, "I would pick %c overall.", M);
        break;
    }
    snprintf(gt, sizeof gt, "%c", L);
    c->ds = s_rand() % 2 ? "biomed_mini" : "chem";
    c->answer = s_paragraph(tail);
    c->truth = strdup(gt);
    c->extra = NULL;
}

static void
s_f1_case(case_t *c)
{
    c->ds = "instruct_pretrain";
    c->answer = s_paragraph("The correct options are A and C.");
    c->truth = strdup(s_rand() % 2 ? "A, C" : "A, B, D");
    c->extra = "{\"qa_type\":\"multiple choice\"}";
}

static const char *const s_words[] = {
    "the",      "report",        "finds",       "that",     "airline",
    "industry", "accounts",      "for",         "most",     "complaints",
    "while",    "accommodation", "follows",     "with",     "fewer",
    "cases",    "competition",   "authorities", "reviewed", "markets",
    "in",       "2023",          "and",         "found",    "barriers",
    "to",       "entry"};

static char *
s_words_text(int n)
{
    char buf[8192];
    size_t w = 0;
    for (int i = 0; i < n && w + 32 < sizeof buf; i++)
        w += (size_t) snprintf(buf + w, sizeof buf - w, "%s ",
                               s_words[s_rand() % 27]);
    return strdup(buf);
}

static void
s_rouge_case(case_t *c)
{
    c->ds = "long_context";
    c->answer = s_words_text(40 + (int) (s_rand() % 120));
    c->truth = s_words_text(8 + (int) (s_rand() % 30));
    c->extra = "{\"qa_type\":\"free-form\"}";
}

static double
s_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static double
s_rate(const rwd_scorer_t *s, const case_t *cases, double seconds,
       const char *rule, double *hits)
{
    double t0 = s_cpu(), t;
    uint64_t n = 0, ok = 0;
    do {
        for (int i = 0; i < NCASES; i++, n++) {
            rwd_input_t in = {.data_source = cases[i].ds,
                              .answer = cases[i].answer,
                              .answer_len = strlen(cases[i].answer),
                              .ground_truth = cases[i].truth,
                              .truth_len = strlen(cases[i].truth),
                              .extra_info_json = cases[i].extra};
            rwd_result_t r;
            lisa_rc_t rc = rwd_score(s, &in, &r);
            if (rc != LISA_OK) {
                fprintf(stderr, "%s: %s\n", rule, r.error);
                abort();
            }
            if (r.reward > 0.5)
                ok++;
            rwd_result_clear(&r);
        }
        t = s_cpu() - t0;
    } while (t < seconds);
    *hits = (double) ok / (double) n;
    return (double) n / t;
}

int
main(int argc, char **argv)
{
    double seconds = 1.0;
    const char *dump = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--dump") == 0)
            dump = argv[i + 1];
    }
    static case_t math[NCASES], mc[NCASES], f1[NCASES], rouge[NCASES];
    for (int i = 0; i < NCASES; i++) {
        s_math_case(&math[i]);
        s_mc_case(&mc[i]);
        s_f1_case(&f1[i]);
        s_rouge_case(&rouge[i]);
    }
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f) {
            perror(dump);
            return 1;
        }
        for (int i = 0; i < NCASES; i++) {
            /* Only backslashes and quotes need escaping in these inputs. */
            fputs("{\"ground_truth\":\"", f);
            for (const char *p = math[i].truth; *p; p++)
                fprintf(f, "%s%c", (*p == '\\' || *p == '"') ? "\\" : "", *p);
            fputs("\",\"answer\":\"", f);
            for (const char *p = math[i].answer; *p; p++)
                fprintf(f, "%s%c", (*p == '\\' || *p == '"') ? "\\" : "", *p);
            fputs("\"}\n", f);
        }
        fclose(f);
    }
    rwd_scorer_t *s = rwd_scorer_new(NULL);
    struct {
        const char *name;
        case_t *cases;
    } rules[] = {{"math_equiv", math},
                 {"mc_letter", mc},
                 {"mc_f1", f1},
                 {"rouge_l", rouge}};
    printf("%-12s %14s %10s\n", "rule", "scores/s/core", "reward>0.5");
    for (size_t k = 0; k < 4; k++) {
        double hits;
        double r = s_rate(s, rules[k].cases, seconds, rules[k].name, &hits);
        printf("%-12s %14.0f %9.0f%%\n", rules[k].name, r, 100 * hits);
    }
    rwd_scorer_destroy(&s);
    for (int i = 0; i < NCASES; i++) {
        free(math[i].answer);
        free(math[i].truth);
        free(mc[i].answer);
        free(mc[i].truth);
        free(f1[i].answer);
        free(f1[i].truth);
        free(rouge[i].answer);
        free(rouge[i].truth);
    }
    return 0;
}
