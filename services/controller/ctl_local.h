/*
 * ctl_local: sandboxes on this machine with bubblewrap.
 *
 * Each sandbox is `bwrap --unshare-all --die-with-parent` (no network
 * unless the gateway is only reachable by URL): read-only system
 * directories, a private size-limited tmpfs /testbed and /tmp, the
 * gateway's unix socket bound to /run/lisa/gateway.sock and the agent
 * binary to /run/lisa/lisa-agent; no host file is writable. Limits: a
 * cgroup v2 directory per sandbox (memory without swap, pids, CPU) when a
 * writable cgroup root is configured, rlimits otherwise (address space
 * for memory). When the controller runs as root the sandbox drops to an
 * unprivileged uid before bwrap starts.
 *
 * Labels live in <state_dir>/<name>.state (key=value lines, written
 * atomically) with the pid and its start time, so a restarted controller
 * can tell its old sandboxes from recycled pids, list them, and reap them.
 * The sandbox's output goes to <state_dir>/<name>.log.
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
    const char *cgroup_root;    /* "" for rlimits */
    unsigned sandbox_uid;       /* when running as root */
    bool no_memory_rlimit;      /* skip RLIMIT_AS (sanitizer builds) */
} ctl_local_cfg_t;

/* Fills *out with a local backend. LISA_INVALID on bad config, LISA_ERR
 * when the state directory cannot be created. */
lisa_rc_t ctl_local_new(const ctl_local_cfg_t *cfg,
                        ctl_backend_t *out) LISA_NODISCARD;

#endif
