/*
 * agt_seccomp: the system-call filter the model's commands run under.
 *
 * A sandbox's namespaces and dropped capabilities already stop most of
 * what a hostile command could try; the filter closes what they leave
 * open to an unprivileged process of the sandbox's own uid: reading or
 * steering another process (ptrace, process_vm_readv/writev,
 * pidfd_getfd, kcmp), new namespaces (unshare or clone with a namespace
 * flag, setns: a nested user namespace would hand it every capability
 * over fresh mounts), the mount API, and the kernel's large rarely
 * needed surfaces (bpf, perf_event_open, userfaultfd, io_uring, keyrings,
 * modules, kexec, swap, reboot, quotas, accounting). Each of these
 * answers EPERM; clone3, whose flags a classic BPF filter cannot read,
 * answers ENOSYS so that the C library falls back to clone, whose flags
 * it can. A call from another architecture's ABI (x32, 32-bit) kills the
 * process.
 *
 * The program is a classic BPF program written out here (no libseccomp).
 * Building it allocates; applying it is async-signal-safe, so a child
 * between fork and exec may call it.
 */
#ifndef AGT_SECCOMP_H
#define AGT_SECCOMP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct agt_seccomp agt_seccomp_t;

/* The filter for this architecture; NULL where none is written for it
 * (only x86_64 and aarch64 have one). */
agt_seccomp_t *agt_seccomp_new(void);

/* Frees *f and sets it to NULL; safe on NULL and twice. */
void agt_seccomp_destroy(agt_seccomp_t **f);

/* Sets no_new_privs and installs the filter on the calling thread (and
 * what it execs or forks). 0, or -1 with errno. Async-signal-safe. */
int agt_seccomp_apply(const agt_seccomp_t *f);

/* Number of BPF instructions (for tests and the start-up log). */
size_t agt_seccomp_len(const agt_seccomp_t *f);

#endif
