/*
 * agt_jail: keeps the model's commands away from the agent.
 *
 * The agent holds the attempt token; the commands it runs for the model
 * are the sandbox's untrusted code. Three things separate them:
 *   - the agent is not dumpable (main.c sets it before anything reads the
 *     token): another process of the same uid cannot open its
 *     /proc/<pid>/mem, environ or fds, nor ptrace it;
 *   - where the agent holds CAP_SYS_ADMIN, CAP_SYS_CHROOT and
 *     CAP_SYS_PTRACE in the sandbox's user namespace (the local backend's
 *     bubblewrap grants them to the agent; its commands drop them), the
 *     commands run in a PID and mount
 *     namespace of their own with their own /proc: the agent's process is
 *     not in it, so there is no pid to name. Its init (pid 1 there) is a
 *     fork of the agent made before any command, without capabilities,
 *     under the filter, and not dumpable; it only reaps. Background
 *     processes a command leaves live on in that namespace until the
 *     attempt ends, as they would beside the agent;
 *   - every command drops the capabilities it inherited and runs under
 *     no_new_privs and the agt_seccomp filter (no ptrace, no new
 *     namespaces, no mounts, no bpf/keyrings/userfaultfd/perf...).
 * Without the capabilities (Docker and Kubernetes sandboxes, which give
 * the container none) the commands share the agent's PID namespace; the
 * first and last points still hold.
 */
#ifndef AGT_JAIL_H
#define AGT_JAIL_H

#include <stdbool.h>

typedef struct agt_jail agt_jail_t;

/* Builds the filter and, where allowed, the commands' namespace. NULL
 * only when this architecture has no filter. */
agt_jail_t *agt_jail_new(void);

/* Kills the namespace's init (and with it every process in there), frees
 * *j and sets it to NULL; safe on NULL and twice. */
void agt_jail_destroy(agt_jail_t **j);

/* True when commands get a PID namespace of their own. */
bool agt_jail_own_pidns(const agt_jail_t *j);

/* In a child between fork and exec, after setpgid: enters the commands'
 * namespace (forking once more; the calling process then only waits and
 * exits with the command's status, and never returns), drops every
 * capability, applies the filter. 0 in the process that goes on to exec;
 * -1 on failure. Async-signal-safe. */
int agt_jail_enter(const agt_jail_t *j);

#endif
