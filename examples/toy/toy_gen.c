/*
 * lisa-toygen: the toy task family of the local run, and the agent
 * trajectories that give the toy model its warm start.
 *
 * Four kinds of task, each needing a tool (the toy model cannot add,
 * count or read files by itself):
 *   - arithmetic: "Compute 347*29+18." -> the agent runs
 *     echo $((347*29+18)) > /testbed/answer.txt, then submits;
 *   - lookup: a key=value table in /testbed/documents/table.txt and
 *     "Find the value of k17 in ..." -> grep + cut into the answer file;
 *   - count: "How many lines does /testbed/documents/notes.txt have?"
 *     -> wc -l;
 *   - sum: "Add up the numbers in /testbed/documents/numbers.txt." -> awk.
 * The first two need the model to copy numbers or keys from the prompt
 * into its command (hard for a tiny model); the last two need only the
 * right command for the kind of question. So the warm-started model
 * solves part of the tasks, and RL has room on the rest.
 * Records are verl-format (data_source "math_toy", scored by the reward
 * worker's math-equivalence rule against the exact answer).
 *
 * The warm-start file holds, per task, the conversation a correct agent
 * has with the gateway in the toy domain's compact prompt (system prompt,
 * two tools, "Steps Remaining" notes as lisa-agent appends them):
 * {"messages": [...], "tools": [...], "answer": ..., "files": {...}} per
 * line, rendered and trained on by lisa-sft.
 *
 * Everything is a function of --seed (splitmix64), so the committed data
 * can be rebuilt byte for byte.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The toy domain's prompt texts (also what lisa-agent sends for
 * data sources starting with "math_toy"; see docs/local-run.md). */
static const char s_system[] =
    "You solve tasks with tools. Write the answer to /testbed/answer.txt, "
    "then call submit.";
static const char s_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"execute_bash\","
    "\"description\":\"Run a bash command in /testbed.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":"
    "{\"type\":\"string\",\"description\":\"The command.\"}},"
    "\"required\":[\"command\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"submit\","
    "\"description\":\"Finish the task.\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{},\"required\":[]}}}]";

#define S_MAX_TASKS  1000000
#define S_TABLE_ROWS 8
#define S_MAX_TURNS  4

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

typedef struct {
    char id[32];
    char problem[256];
    char answer[32];
    char command[256];
    char file[16];    /* name of the input file, "" for none */
    char table[1024]; /* its content */
} s_task_t;

static void
s_make_arith(s_rng_t *r, s_task_t *t)
{
    static const char ops[] = "+-*";
    long a = s_range(r, 2, 999), b = s_range(r, 2, 99);
    char o1 = ops[s_range(r, 0, 2)];
    long v = o1 == '+' ? a + b : o1 == '-' ? a - b : a * b;
    char expr[96];
    if (s_range(r, 0, 1)) {
        long c = s_range(r, 1, 99);
        char o2 = ops[s_range(r, 0, 1)]; /* + or - keeps left-to-right */
        v = o2 == '+' ? v + c : v - c;
        snprintf(expr, sizeof expr, "%ld%c%ld%c%ld", a, o1, b, o2, c);
    } else {
        snprintf(expr, sizeof expr, "%ld%c%ld", a, o1, b);
    }
    snprintf(t->problem, sizeof t->problem, "Compute %s.", expr);
    snprintf(t->answer, sizeof t->answer, "%ld", v);
    snprintf(t->command, sizeof t->command,
             "echo $((%s)) > /testbed/answer.txt", expr);
    t->table[0] = 0;
    t->file[0] = 0;
}

static void
s_make_lookup(s_rng_t *r, s_task_t *t)
{
    char keys[S_TABLE_ROWS][8];
    long vals[S_TABLE_ROWS];
    size_t off = 0;
    for (int i = 0; i < S_TABLE_ROWS; i++) {
        int dup;
        do {
            snprintf(keys[i], sizeof keys[i], "%c%ld",
                     (char) ('a' + s_range(r, 0, 25)), s_range(r, 10, 99));
            dup = 0;
            for (int j = 0; j < i; j++)
                dup |= strcmp(keys[i], keys[j]) == 0;
        } while (dup);
        vals[i] = s_range(r, 100, 9999);
        off += (size_t) snprintf(t->table + off, sizeof t->table - off,
                                 "%s=%ld\n", keys[i], vals[i]);
    }
    int k = (int) s_range(r, 0, S_TABLE_ROWS - 1);
    snprintf(t->problem, sizeof t->problem,
             "Find the value of %s in /testbed/documents/table.txt.", keys[k]);
    snprintf(t->answer, sizeof t->answer, "%ld", vals[k]);
    snprintf(t->command, sizeof t->command,
             "grep ^%s= /testbed/documents/table.txt | cut -d= -f2 > "
             "/testbed/answer.txt",
             keys[k]);
    snprintf(t->file, sizeof t->file, "table.txt");
}

static const char *const s_words[] = {"apple", "river", "stone", "cloud",
                                      "lamp",  "green", "quiet", "north",
                                      "seven", "paper", "light", "wind"};

static void
s_make_count(s_rng_t *r, s_task_t *t)
{
    long lines = s_range(r, 2, 30);
    size_t off = 0;
    for (long i = 0; i < lines; i++) {
        long w = s_range(r, 1, 3);
        for (long j = 0; j < w; j++)
            off +=
                (size_t) snprintf(t->table + off, sizeof t->table - off, "%s%s",
                                  j ? " " : "", s_words[s_range(r, 0, 11)]);
        off += (size_t) snprintf(t->table + off, sizeof t->table - off, "\n");
    }
    snprintf(t->problem, sizeof t->problem,
             "How many lines does /testbed/documents/notes.txt have?");
    snprintf(t->answer, sizeof t->answer, "%ld", lines);
    snprintf(t->command, sizeof t->command,
             "wc -l < /testbed/documents/notes.txt > /testbed/answer.txt");
    snprintf(t->file, sizeof t->file, "notes.txt");
}

static void
s_make_sum(s_rng_t *r, s_task_t *t)
{
    long n = s_range(r, 2, 12), sum = 0;
    size_t off = 0;
    for (long i = 0; i < n; i++) {
        long v = s_range(r, 1, 999);
        sum += v;
        off += (size_t) snprintf(t->table + off, sizeof t->table - off, "%ld\n",
                                 v);
    }
    snprintf(t->problem, sizeof t->problem,
             "Add up the numbers in /testbed/documents/numbers.txt.");
    snprintf(t->answer, sizeof t->answer, "%ld", sum);
    snprintf(t->command, sizeof t->command,
             "awk '{s+=$1} END {print s}' /testbed/documents/numbers.txt > "
             "/testbed/answer.txt");
    snprintf(t->file, sizeof t->file, "numbers.txt");
}

static void
s_make(s_rng_t *r, const char *split, size_t i, s_task_t *t)
{
    snprintf(t->id, sizeof t->id, "toy_%s_%05zu", split, i);
    switch (s_range(r, 0, 3)) {
    case 0:
        s_make_arith(r, t);
        break;
    case 1:
        s_make_lookup(r, t);
        break;
    case 2:
        s_make_count(r, t);
        break;
    default:
        s_make_sum(r, t);
        break;
    }
}

/* The verl record of a task. */
static json_t *
s_files(const s_task_t *t)
{
    json_t *files = json_object();
    if (t->file[0])
        json_object_set_new(files, t->file, json_string(t->table));
    return files;
}

static json_t *
s_record(const s_task_t *t, const char *split, size_t i)
{
    json_t *files = s_files(t);
    return json_pack(
        "{s:s,s:[{s:s,s:s}],s:s,s:{s:s,s:s},s:{s:s,s:s,s:I,s:s,s:o}}",
        "data_source", "math_toy", "prompt", "role", "user", "content",
        t->problem, "ability", "math", "reward_model", "style", "rule",
        "ground_truth", t->answer, "extra_info", "id", t->id, "split", split,
        "index", (json_int_t) i, "problem_statement", t->problem, "input_files",
        files);
}

static json_t *
s_call(const char *id, const char *name, json_t *args)
{
    return json_pack("{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:o}}]}", "role", "assistant",
                     "content", "tool_calls", "id", id, "type", "function",
                     "function", "name", name, "arguments", args);
}

/* The conversation of a correct agent on task t, as lisa-agent builds it
 * for the toy domain (the last message of each request gets
 * "\nSteps Remaining: N"). */
static json_t *
s_trajectory(const s_task_t *t)
{
    char user[512], obs[256];
    snprintf(user, sizeof user, "%s\nSteps Remaining: %d", t->problem,
             S_MAX_TURNS);
    snprintf(obs, sizeof obs,
             "Exit code: 0\nExecution output of [execute_bash]:\n[STDOUT]\n"
             "\nSteps Remaining: %d",
             S_MAX_TURNS - 1);
    json_t *msgs = json_array();
    json_array_append_new(
        msgs, json_pack("{s:s,s:s}", "role", "system", "content", s_system));
    json_array_append_new(
        msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    json_array_append_new(msgs,
                          s_call("call_1", "execute_bash",
                                 json_pack("{s:s}", "command", t->command)));
    json_array_append_new(msgs, json_pack("{s:s,s:s,s:s,s:s}", "role", "tool",
                                          "tool_call_id", "call_1", "name",
                                          "execute_bash", "content", obs));
    json_array_append_new(msgs, s_call("call_2", "submit", json_object()));
    json_error_t e;
    json_t *tools = json_loads(s_tools, 0, &e);
    return json_pack("{s:o,s:o,s:s,s:o}", "messages", msgs, "tools", tools,
                     "answer", t->answer, "files", s_files(t));
}

static int
s_write_tasks(const char *path, const char *split, size_t n, s_rng_t *r,
              FILE *sft)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        s_task_t t;
        s_make(r, split, i, &t);
        json_array_append_new(arr, s_record(&t, split, i));
        if (sft) {
            json_t *c = s_trajectory(&t);
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
            "[--seed S]\n"
            "  writes DIR/train.json, DIR/val.json (verl records) and, with\n"
            "  --sft N, DIR/sft.jsonl (N warm-start conversations drawn\n"
            "  apart from the train and val tasks)\n");
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

int
main(int argc, char **argv)
{
    const char *out = NULL;
    size_t n_train = 256, n_val = 64, n_sft = 0, seed = 7;
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
    rc |= s_write_tasks(path, "train", n_train, &r, NULL);
    snprintf(path, sizeof path, "%s/val.json", out);
    rc |= s_write_tasks(path, "val", n_val, &r, NULL);
    if (n_sft) {
        snprintf(path, sizeof path, "%s/sft.jsonl", out);
        FILE *f = fopen(path, "w");
        if (!f) {
            fprintf(stderr, "lisa-toygen: cannot write %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
        rc |= s_write_tasks(NULL, "sft", n_sft, &r, f);
        if (fclose(f) != 0)
            rc = 1;
    }
    return rc;
}
