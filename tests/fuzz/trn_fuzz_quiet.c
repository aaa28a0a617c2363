/*
 * The start of every trainer fuzz target (trn_fuzz_*): only errors are
 * logged, as the targets' refusals are expected and would flood the run.
 */
#include "lisa/lisa_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    lisa_log_set_level(LISA_LOG_ERROR);
    return 0;
}
