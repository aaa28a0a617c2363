/*
 * agt_seccomp: a classic BPF program over struct seccomp_data.
 *
 * Layout: check the architecture (another ABI kills), load the number,
 * refuse x32 numbers, then one `jeq nr; ret EPERM` pair per refused call
 * (short jumps only, so no offset can overflow its 8 bits), the clone and
 * unshare flag checks and a final allow. Numbers come from the C
 * library's <sys/syscall.h>; a call this architecture lacks is skipped.
 */
#define _GNU_SOURCE /* CLONE_NEW*, syscall */
#include "agt_seccomp.h"

#include "lisa/lisa_mem.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define S_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define S_ARCH AUDIT_ARCH_AARCH64
#endif

#define S_MAX_INSNS 256u

/* Namespace flags of clone(2) and unshare(2). CLONE_NEWTIME shares its
 * bit with clone's exit-signal field, so only unshare checks it. */
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#define S_NS_FLAGS                                                             \
    ((uint32_t) (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | \
                 CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET))

struct agt_seccomp {
    struct sock_filter insn[S_MAX_INSNS];
    unsigned short len;
};

#ifdef S_ARCH
/* Calls refused with EPERM. */
static const long s_denied[] = {
    SYS_ptrace,
    SYS_process_vm_readv,
    SYS_process_vm_writev,
    SYS_kcmp,
    SYS_setns,
    SYS_mount,
    SYS_umount2,
    SYS_pivot_root,
    SYS_chroot,
    SYS_bpf,
    SYS_keyctl,
    SYS_add_key,
    SYS_request_key,
    SYS_userfaultfd,
    SYS_perf_event_open,
    SYS_kexec_load,
    SYS_init_module,
    SYS_finit_module,
    SYS_delete_module,
    SYS_open_by_handle_at,
    SYS_name_to_handle_at,
    SYS_swapon,
    SYS_swapoff,
    SYS_reboot,
    SYS_acct,
    SYS_quotactl,
    SYS_syslog,
    SYS_vhangup,
    SYS_lookup_dcookie,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
#ifdef SYS_pidfd_getfd
    SYS_pidfd_getfd,
#endif
#ifdef SYS_process_madvise
    SYS_process_madvise,
#endif
#ifdef SYS_io_uring_setup
    SYS_io_uring_setup,
    SYS_io_uring_enter,
    SYS_io_uring_register,
#endif
#ifdef SYS_fsopen
    SYS_fsopen,
    SYS_fsconfig,
    SYS_fsmount,
    SYS_fspick,
    SYS_move_mount,
    SYS_open_tree,
#endif
#ifdef SYS_mount_setattr
    SYS_mount_setattr,
#endif
#ifdef SYS_quotactl_fd
    SYS_quotactl_fd,
#endif
#ifdef SYS_iopl
    SYS_iopl,
    SYS_ioperm,
#endif
#ifdef SYS_uselib
    SYS_uselib,
#endif
};

static void
s_emit(agt_seccomp_t *f, uint16_t code, uint32_t k, uint8_t jt, uint8_t jf)
{
    if (f->len < S_MAX_INSNS)
        f->insn[f->len++] = (struct sock_filter){code, jt, jf, k};
}

/* Offset of the low 32 bits of argument 0. */
static uint32_t
s_arg0_lo(void)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return (uint32_t) offsetof(struct seccomp_data, args[0]);
#else
    return (uint32_t) offsetof(struct seccomp_data, args[0]) + 4u;
#endif
}

/* if (nr == `nr` && (arg0 & mask)) return EPERM; leaves nr loaded. */
static void
s_flag_check(agt_seccomp_t *f, long nr, uint32_t mask)
{
    const uint32_t eperm = SECCOMP_RET_ERRNO | ((uint32_t) EPERM & 0xffffu);
    s_emit(f, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) nr, 0, 4);
    s_emit(f, BPF_LD | BPF_W | BPF_ABS, s_arg0_lo(), 0, 0);
    s_emit(f, BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1);
    s_emit(f, BPF_RET | BPF_K, eperm, 0, 0);
    s_emit(f, BPF_RET | BPF_K, SECCOMP_RET_ALLOW, 0, 0);
}

static void
s_build(agt_seccomp_t *f)
{
    const uint32_t eperm = SECCOMP_RET_ERRNO | ((uint32_t) EPERM & 0xffffu);
    const uint32_t enosys = SECCOMP_RET_ERRNO | ((uint32_t) ENOSYS & 0xffffu);
    s_emit(f, BPF_LD | BPF_W | BPF_ABS,
           (uint32_t) offsetof(struct seccomp_data, arch), 0, 0);
    s_emit(f, BPF_JMP | BPF_JEQ | BPF_K, S_ARCH, 1, 0);
    s_emit(f, BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS, 0, 0);
    s_emit(f, BPF_LD | BPF_W | BPF_ABS,
           (uint32_t) offsetof(struct seccomp_data, nr), 0, 0);
#if defined(__x86_64__)
    /* x32 system calls carry bit 30 in the number. */
    s_emit(f, BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
    s_emit(f, BPF_RET | BPF_K, eperm, 0, 0);
#endif
    for (size_t i = 0; i < sizeof s_denied / sizeof s_denied[0]; i++) {
        s_emit(f, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) s_denied[i], 0, 1);
        s_emit(f, BPF_RET | BPF_K, eperm, 0, 0);
    }
#ifdef SYS_clone3
    s_emit(f, BPF_JMP | BPF_JEQ | BPF_K, (uint32_t) SYS_clone3, 0, 1);
    s_emit(f, BPF_RET | BPF_K, enosys, 0, 0);
#endif
    s_flag_check(f, SYS_unshare, S_NS_FLAGS | (uint32_t) CLONE_NEWTIME);
    s_flag_check(f, SYS_clone, S_NS_FLAGS);
    s_emit(f, BPF_RET | BPF_K, SECCOMP_RET_ALLOW, 0, 0);
}
#endif

agt_seccomp_t *
agt_seccomp_new(void)
{
#ifdef S_ARCH
    agt_seccomp_t *f = lisa_calloc(1, sizeof *f);
    s_build(f);
    return f;
#else
    return NULL;
#endif
}

void
agt_seccomp_destroy(agt_seccomp_t **f)
{
    if (f)
        lisa_free(f);
}

int
agt_seccomp_apply(const agt_seccomp_t *f)
{
    if (!f) {
        errno = EINVAL;
        return -1;
    }
    struct sock_fprog prog = {
        .len = f->len,
        .filter = (struct sock_filter *) (uintptr_t) f->insn,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
        return -1;
    return 0;
}

size_t
agt_seccomp_len(const agt_seccomp_t *f)
{
    return f ? f->len : 0;
}
