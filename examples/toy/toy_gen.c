/*
 * lisa-toygen: the toy task family of the local run, and the agent
 * trajectories that give the toy model its warm start.
 *
 * Every task hands the agent one file, /testbed/documents/numbers.txt
 * (3 to 12 distinct numbers from 13 to 999, one per line), and asks one of four
 * questions about it; each has its own command (the toy model cannot
 * count, add or read files by itself):
 *   - count: "How many numbers are in ...?"       -> wc -l
 *   - sum:   "Add up the numbers in ..."           -> awk
 *   - first: "What is the first number in ...?"  -> head -n 1
 *   - last:  "What is the last number in ...?"   -> tail -n 1
 * The numbers are distinct and above 12, so the four answers of a file
 * always differ and only the right command earns the reward.
 *
 * The warm start is an imperfect demonstrator: it always runs the right
 * command, but it writes the command's output to /testbed/answer.txt (as
 * the system prompt asks) only with probability --sft-correct (default
 * 0.4), and otherwise to /testbed/result.txt or /testbed/output.txt,
 * then submits. A model fine-tuned on these knows the tools, the call
 * format and which command answers which question, and has picked up the
 * demonstrator's habit; nothing but the reward tells it which file
 * counts. That is what RL learns in the local run: mean reward starts
 * near the demonstrator's rate and rises as the policy learns to write
 * the answer file.
 * Records are verl-format (data_source "math_toy", scored by the reward
 * worker's math-equivalence rule against the exact answer).
 *
 * The warm-start file holds, per conversation, what the agent sends the
 * gateway in the toy domain's compact prompt (system prompt, two tools,
 * "Steps Remaining" notes as lisa-agent appends them):
 * {"messages": [...], "tools": [...], "answer": ..., "files": {...},
 * "correct": true|false} per line, rendered and trained on by lisa-sft.
 *
 * Everything is a function of --seed (splitmix64), so the committed data
 * can be rebuilt byte for byte.
 */
#include "lisa/lisa_toy.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The toy domain's prompt texts (also what lisa-agent sends for
 * data sources starting with "math_toy"; see docs/local-run.md). */
#define S_MAX_TASKS 1000000
#define S_MAX_TURNS 4

typedef struct {
    uint64_t s;
} s_rng_t;

static uint64_t
s_next(s_rng_t *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static long
s_range(s_rng_t *r, long lo, long hi)
{
    return lo + (long) (s_next(r) % (uint64_t) (hi - lo + 1));
}

#define S_FILE   "/testbed/documents/numbers.txt"
#define S_ANSWER "/testbed/answer.txt"
#define S_KINDS  4

/* The four questions and the command that computes each answer (its
 * output then goes to a file: "CMD > /testbed/answer.txt"). */
static const struct {
    const char *name, *problem, *command;
} s_kinds[S_KINDS] = {
    {"count", "How many numbers are in " S_FILE "?", "wc -l < " S_FILE},
    {"sum", "Add up the numbers in " S_FILE ".",
     "awk '{s+=$1} END {print s}' " S_FILE},
    {"first", "What is the first number in " S_FILE "?", "head -n 1 " S_FILE},
    {"last", "What is the last number in " S_FILE "?", "tail -n 1 " S_FILE},
};

/* Where the demonstrator writes its result when it does not write the
 * answer file (its habit that RL has to unlearn). */
static const char *const s_wrong_out[] = {"/testbed/result.txt",
                                          "/testbed/output.txt"};

typedef struct {
    char id[32];
    int kind;
    char answer[32];
    char table[256]; /* numbers.txt */
} s_task_t;

static void
s_make(s_rng_t *r, const char *split, size_t i, s_task_t *t)
{
    snprintf(t->id, sizeof t->id, "toy_%s_%05zu", split, i);
    t->kind = (int) s_range(r, 0, S_KINDS - 1);
    long n = s_range(r, 3, 12), vals[12], sum = 0;
    size_t off = 0;
    for (long k = 0; k < n; k++) {
        int dup;
        do { /* distinct and above 12: the four answers always differ */
            vals[k] = s_range(r, 13, 999);
            dup = 0;
            for (long j = 0; j < k; j++)
                dup |= vals[j] == vals[k];
        } while (dup);
        sum += vals[k];
        off += (size_t) snprintf(t->table + off, sizeof t->table - off, "%ld\n",
                                 vals[k]);
    }
    long ans[S_KINDS] = {n, sum, vals[0], vals[n - 1]};
    snprintf(t->answer, sizeof t->answer, "%ld", ans[t->kind]);
}

/* The verl record of a task. */
static json_t *
s_files(const s_task_t *t)
{
    json_t *files = json_object();
    json_object_set_new(files, "numbers.txt", json_string(t->table));
    return files;
}

static json_t *
s_record(const s_task_t *t, const char *split, size_t i)
{
    json_t *files = s_files(t);
    return json_pack(
        "{s:s,s:[{s:s,s:s}],s:s,s:{s:s,s:s},s:{s:s,s:s,s:I,s:s,s:o}}",
        "data_source", "math_toy", "prompt", "role", "user", "content",
        s_kinds[t->kind].problem, "ability", "math", "reward_model", "style",
        "rule", "ground_truth", t->answer, "extra_info", "id", t->id, "split",
        split, "index", (json_int_t) i, "problem_statement",
        s_kinds[t->kind].problem, "input_files", files);
}

static json_t *
s_call(const char *id, const char *name, json_t *args)
{
    return json_pack("{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:o}}]}", "role", "assistant",
                     "content", "tool_calls", "id", id, "type", "function",
                     "function", "name", name, "arguments", args);
}

/* The conversation of the demonstrator on task t, writing the right
 * command's output to `out`, as lisa-agent builds it for the toy domain
 * (the last message of each request gets "\nSteps Remaining: N"). */
static json_t *
s_trajectory(const s_task_t *t, const char *out)
{
    char user[512], obs[256], cmd[256];
    snprintf(cmd, sizeof cmd, "%s > %s", s_kinds[t->kind].command, out);
    snprintf(user, sizeof user, "%s\nSteps Remaining: %d",
             s_kinds[t->kind].problem, S_MAX_TURNS);
    snprintf(obs, sizeof obs,
             "Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n"
             "\nSteps Remaining: %d",
             S_MAX_TURNS - 1);
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system",
                                          "content", LISA_TOY_SYSTEM));
    json_array_append_new(
        msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    json_array_append_new(msgs, s_call("call_1", "execute_bash",
                                       json_pack("{s:s}", "command", cmd)));
    json_array_append_new(msgs, json_pack("{s:s,s:s,s:s,s:s}", "role", "tool",
                                          "tool_call_id", "call_1", "name",
                                          "execute_bash", "content", obs));
    json_array_append_new(msgs, s_call("call_2", "submit", json_object()));
    json_error_t e;
    json_t *tools = json_loads(LISA_TOY_TOOLS, 0, &e);
    return json_pack("{s:o,s:o,s:s,s:o,s:b}", "messages", msgs, "tools", tools,
                     "answer", t->answer, "files", s_files(t), "correct",
                     strcmp(out, S_ANSWER) == 0);
}

/* The demonstrator's output file: the answer file with probability
 * `correct`, otherwise one of the wrong ones, uniformly. */
static const char *
s_demo_out(s_rng_t *r, double correct)
{
    double u = (double) (s_next(r) >> 11) / 9007199254740992.0;
    if (u < correct)
        return S_ANSWER;
    return s_wrong_out[s_range(r, 0, 1)];
}

static int
s_write_tasks(const char *path, const char *split, size_t n, s_rng_t *r,
              FILE *sft, double correct)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        s_task_t t;
        s_make(r, split, i, &t);
        json_array_append_new(arr, s_record(&t, split, i));
        if (sft) {
            json_t *c = s_trajectory(&t, s_demo_out(r, correct));
            char *line = json_dumps(c, JSON_COMPACT);
            fprintf(sft, "%s\n", line);
            free(line);
            json_decref(c);
        }
    }
    int rc = 0;
    if (path && json_dump_file(arr, path, JSON_INDENT(1)) != 0) {
        fprintf(stderr, "lisa-toygen: cannot write %s: %s\n", path,
                strerror(errno));
        rc = 1;
    }
    json_decref(arr);
    return rc;
}

static int
s_usage(void)
{
    fprintf(stderr,
            "usage: lisa-toygen --out DIR [--train N] [--val N] [--sft N] "
            "[--sft-correct P] [--seed S]\n"
            "  writes DIR/train.json, DIR/val.json (verl records) and, with\n"
            "  --sft N, DIR/sft.jsonl (N warm-start conversations drawn\n"
            "  apart from the train and val tasks: the right command, its\n"
            "  output written to the answer file with probability P,\n"
            "  default 0.4, else to another file)\n");
    return 2;
}

static int
s_count(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || v > S_MAX_TASKS)
        return -1;
    *out = (size_t) v;
    return 0;
}

static int
s_prob(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= 0.0 && v <= 1.0))
        return -1;
    *out = v;
    return 0;
}

int
main(int argc, char **argv)
{
    const char *out = NULL;
    size_t n_train = 256, n_val = 64, n_sft = 0, seed = 7;
    double correct = 0.4;
    for (int i = 1; i < argc; i += 2) { /* flags come as pairs */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return s_usage();
        int bad = 0;
        if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--train"))
            bad = s_count(v, &n_train);
        else if (!strcmp(a, "--val"))
            bad = s_count(v, &n_val);
        else if (!strcmp(a, "--sft"))
            bad = s_count(v, &n_sft);
        else if (!strcmp(a, "--seed"))
            bad = s_count(v, &seed);
        else if (!strcmp(a, "--sft-correct"))
            bad = s_prob(v, &correct);
        else
            return s_usage();
        if (bad)
            return s_usage();
    }
    if (!out)
        return s_usage();
    char path[4096];
    int rc = 0;
    s_rng_t r = {.s = (uint64_t) seed * 1000003u + 1};
    snprintf(path, sizeof path, "%s/train.json", out);
    rc |= s_write_tasks(path, "train", n_train, &r, NULL, correct);
    snprintf(path, sizeof path, "%s/val.json", out);
    rc |= s_write_tasks(path, "val", n_val, &r, NULL, correct);
    if (n_sft) {
        snprintf(path, sizeof path, "%s/sft.jsonl", out);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "lisa-toygen: cannot write %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
        rc |= s_write_tasks(NULL, "sft", n_sft, &r, f, correct);
        if (fclose(f) != 0)
            rc = 1;
    }
    return rc;
}
