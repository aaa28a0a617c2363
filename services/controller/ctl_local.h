/*
 * ctl_local: sandboxes on this machine with bubblewrap.
 *
 * Each sandbox is `bwrap --unshare-all --die-with-parent` (no network
 * unless the gateway is only reachable by URL): read-only system
 * directories, a read-only root and /dev, and three private tmpfs mounts
 * whose sizes add up to the sandbox's disk (/testbed, /tmp, /dev/shm);
 * the gateway's unix socket bound to /run/lisa/gateway.sock and the agent
 * binary to /run/lisa/lisa-agent; no host file is writable. Limits: a
 * cgroup v2 directory per sandbox (memory without swap, pids, CPU) when a
 * writable cgroup root is configured, rlimits otherwise (address space
 * and data for memory, RLIMIT_NPROC of the sandbox's uid for pids); the
 * largest file (RLIMIT_FSIZE, the disk) and open files (RLIMIT_NOFILE)
 * always. When the controller runs as root each sandbox drops to a uid of
 * its own from a configured range before bwrap starts, so one sandbox's
 * processes never count against another's limit; controllers sharing a
 * range claim uids with flocks in /run/lisa-sandbox-uids. The agent alone keeps
 * the capabilities (inside the sandbox's user namespace) to put its
 * commands in a PID namespace of their own; see agt_jail.h.
 *
 * Labels live in <state_dir>/<name>.state (key=value lines, written
 * atomically) with the pid and its start time, so a restarted controller
 * can tell its old sandboxes from recycled pids, list them, and reap them.
 * The sandbox's output goes through a pipe to <state_dir>/<name>.log,
 * capped per attempt (ctl_logcap).
 */
#ifndef CTL_LOCAL_H
#define CTL_LOCAL_H

#include "ctl_backend.h"

typedef struct {
    const char *controller_id;
    const char *state_dir;      /* created when missing */
    const char *bwrap;          /* path or name looked up in PATH */
    const char *agent_path;     /* host path of lisa-agent */
    const char *sandbox_cmd;    /* non-empty: sh -c this instead of the agent */
    const char *gateway_socket; /* host path, bound in (may be "") */
    const char *gateway_url;    /* used when no socket; shares the network */
    const char *proxy_socket;   /* packages: the gateway's package proxy,
                                   bound to /run/lisa/proxy.sock ("": off) */
    const char *proxy_url;      /* packages: its URL when no socket */
    const char *cgroup_root;    /* "" for rlimits, "auto": ctl_cgroup_auto */
    unsigned sandbox_uid;       /* as root: first uid of the sandboxes' range */
    unsigned sandbox_uids;      /* as root: uids in the range (0: default) */
    uint64_t log_bytes;         /* output kept per attempt (0: default) */
    bool no_memory_rlimit;      /* skip RLIMIT_AS (sanitizer builds) */
} ctl_local_cfg_t;

#define CTL_LOCAL_UID_BASE  700000000u
#define CTL_LOCAL_UIDS      65536u
#define CTL_LOCAL_LOG_BYTES (1024u * 1024u)

/* Fills *out with a local backend. LISA_INVALID on bad config, LISA_ERR
 * when the state directory cannot be created. */
lisa_rc_t ctl_local_new(const ctl_local_cfg_t *cfg,
                        ctl_backend_t *out) LISA_NODISCARD;

#endif
