/*
 * trn_progress tests: the step line of a train and a validation record
 * (rounded values, per-source rewards when there are several, "-" for a
 * missing reward), the live line (counts, tokens, ETA from the rate so
 * far), and the files: step lines appended to progress.log, the live line
 * replaced in progress.now and removed when the step ends. The first test
 * is the usage example.
 */
#include "lisa/lisa_mem.h"
#include "trn_progress.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[64];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/trn_progress_test.XXXXXX");
    cr_assert(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/progress.log", s_dir);
    remove(p);
    snprintf(p, sizeof p, "%s/progress.now", s_dir);
    remove(p);
    rmdir(s_dir);
}

static char *
s_slurp(const char *name)
{
    char p[128];
    snprintf(p, sizeof p, "%s/%s", s_dir, name);
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    static char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static trn_metrics_t *
s_train_record(void)
{
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "train");
    trn_metrics_set(m, "step", 4);
    trn_metrics_set(m, "reward/mean", 0.43751);
    trn_metrics_set(m, "reward/std", 0.12149);
    trn_metrics_set(m, "reward/math_toy/mean", 0.5);
    trn_metrics_set(m, "reward/math_toy/count", 16);
    trn_metrics_set(m, "rollouts/total", 32);
    trn_metrics_set(m, "rollouts/succeeded", 31);
    trn_metrics_set(m, "rollouts/failed", 1);
    trn_metrics_set(m, "actor/entropy", 0.032488462960191547);
    trn_metrics_set(m, "actor/grad_norm", 0.81234);
    trn_metrics_set(m, "time/rollout_s", 3.14159);
    trn_metrics_set(m, "time/train_s", 1.04);
    trn_metrics_set(m, "time/step_s", 4.1947245440001097);
    return m;
}

Test(trn_progress, usage, .init = s_setup, .fini = s_teardown)
{
    trn_progress_t *p = trn_progress_new(s_dir, 20, false);
    cr_assert(p);
    trn_progress_state_t st = {.phase = "rollouts",
                               .step = 5,
                               .total_steps = 20,
                               .done = 8,
                               .total = 32,
                               .failed = 1,
                               .tokens = 3456,
                               .elapsed_s = 72.0};
    trn_progress_live(p, &st);
    cr_assert_str_eq(s_slurp("progress.now"),
                     "  step 5 of 20: rollouts 8/32 (1 failed), 3.5k tokens, "
                     "1m12s, ETA 3m36s\n");
    st.done = 16;
    trn_progress_live(p, &st); /* replaced, not appended */
    cr_assert(strstr(s_slurp("progress.now"), "rollouts 16/32 (1 failed)"));
    cr_assert(strstr(s_slurp("progress.now"), "ETA 1m12s"));
    cr_assert_eq(strchr(s_slurp("progress.now"), '\n')[1], '\0');
    trn_metrics_t *m = s_train_record();
    trn_progress_step(p, m);
    cr_assert_null(s_slurp("progress.now")); /* the step ended */
    trn_progress_step(p, m);
    const char *want = "step 4 of 20  reward 0.438 \u00b10.121  rollouts 31/32 "
                       "(1 failed)  entropy 0.0325  grad_norm 0.812  step "
                       "4.2s (rollouts 3.1s, train 1.0s)\n";
    char both[2048];
    snprintf(both, sizeof both, "%s%s", want, want);
    cr_assert_str_eq(s_slurp("progress.log"), both);
    trn_metrics_destroy(&m);
    trn_progress_destroy(&p);
    cr_assert_null(p);
    trn_progress_destroy(&p);
    /* a second writer appends */
    p = trn_progress_new(s_dir, 20, true);
    m = s_train_record();
    trn_progress_step(p, m);
    trn_metrics_destroy(&m);
    trn_progress_destroy(&p);
    char three[4096];
    snprintf(three, sizeof three, "%s%s", both, want);
    cr_assert_str_eq(s_slurp("progress.log"), three);
}

Test(trn_progress, step_lines)
{
    char b[1024];
    trn_metrics_t *m = s_train_record();
    /* two data sources: each one's mean */
    trn_metrics_set(m, "reward/bio/mean", 0.375);
    trn_metrics_set(m, "reward/bio/count", 15);
    trn_progress_step_line(m, 0, b, sizeof b);
    cr_assert(strncmp(b,
                      "step 4  reward 0.438 \u00b10.121 (math_toy 0.500, "
                      "bio 0.375)  rollouts",
                      strlen("step 4  reward 0.438 \u00b10.121 (math_toy "
                             "0.500, bio 0.375)  rollouts")) == 0,
              "%s", b);
    trn_metrics_destroy(&m);
    /* no succeeded rollout, no update */
    m = trn_metrics_new();
    trn_metrics_set(m, "step", 2);
    trn_metrics_set(m, "rollouts/total", 4);
    trn_metrics_set(m, "rollouts/succeeded", 0);
    trn_metrics_set(m, "rollouts/failed", 4);
    trn_metrics_set(m, "update/skipped", 1);
    trn_metrics_set(m, "time/rollout_s", 60.04);
    trn_metrics_set(m, "time/train_s", 0);
    trn_metrics_set(m, "time/step_s", 60.05);
    trn_progress_step_line(m, 3, b, sizeof b);
    cr_assert_str_eq(b, "step 2 of 3  reward -  rollouts 0/4 (4 failed)  no "
                        "update  step 60.0s (rollouts 60.0s, train 0.0s)");
    trn_metrics_destroy(&m);
    /* validation */
    m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "val");
    trn_metrics_set(m, "step", 10);
    trn_metrics_set(m, "val/reward/a/mean", 0.6);
    trn_metrics_set(m, "val/reward/a/count", 10);
    trn_metrics_set(m, "val/reward/b/mean", 0.4);
    trn_metrics_set(m, "val/reward/b/count", 10);
    trn_metrics_set(m, "val/reward/mean", 0.5);
    trn_metrics_set(m, "val/reward/std", 0.5);
    trn_metrics_set(m, "val/rollouts", 20);
    trn_metrics_set(m, "val/failed", 2);
    trn_metrics_set(m, "time/val_s", 12.345);
    trn_progress_step_line(m, 30, b, sizeof b);
    cr_assert_str_eq(b, "step 10 validation: reward 0.500 \u00b10.500 (a "
                        "0.600, b 0.400)  rollouts 20 (2 failed)  12.3s");
    /* a small buffer cuts the line, never overruns */
    char small[12];
    memset(small, 'x', sizeof small);
    trn_progress_step_line(m, 30, small, sizeof small);
    cr_assert_eq(strlen(small), sizeof small - 1);
    trn_metrics_destroy(&m);
}

Test(trn_progress, live_lines)
{
    char b[512];
    trn_progress_state_t st = {.phase = "rollouts",
                               .step = 1,
                               .total_steps = 0,
                               .done = 0,
                               .total = 4,
                               .tokens = 12,
                               .elapsed_s = 5.04};
    trn_progress_live_line(&st, b, sizeof b);
    cr_assert_str_eq(b, "  step 1: rollouts 0/4 (0 failed), 12 tokens, 5.0s, "
                        "ETA -");
    st.phase = "validation";
    st.done = 4;
    st.tokens = 2500000;
    st.elapsed_s = 7300;
    trn_progress_live_line(&st, b, sizeof b);
    cr_assert_str_eq(b, "  step 1 validation: rollouts 4/4 (0 failed), 2.50M "
                        "tokens, 2h01m, ETA 0.0s");
    st.phase = "training";
    st.total_steps = 9;
    st.sequences = 32;
    st.elapsed_s = 61;
    trn_progress_live_line(&st, b, sizeof b);
    cr_assert_str_eq(b, "  step 1 of 9: training on 32 sequences, 1m01s");
}

Test(trn_progress, unwritable_folder_is_no_writer)
{
    cr_assert_null(trn_progress_new("/nonexistent/dir", 1, false));
    trn_progress_live(NULL, &(trn_progress_state_t){.phase = "rollouts"});
    trn_progress_step(NULL, NULL);
}
