/*
 * ctl_cgroup: finds a cgroup v2 subtree the local backend may put its
 * sandboxes in, when the operator named none (controller.cgroup_root =
 * auto).
 *
 * As root on a host whose unified hierarchy is mounted at /sys/fs/cgroup
 * with the memory, pids and cpu controllers, it makes
 * /sys/fs/cgroup/lisa-<controller id>, enables the three controllers for
 * its children and proves the subtree works before it is used: a probe
 * child cgroup takes every limit the backend writes and a forked process
 * joins it. Anything short of that (cgroup v1, a read-only or
 * undelegated tree, not root) answers NULL and the backend keeps to a uid
 * per sandbox and rlimits, so a host that cannot do it never fails a
 * sandbox's start.
 */
#ifndef CTL_CGROUP_H
#define CTL_CGROUP_H

/* The probed directory (caller frees), or NULL with the reason logged. */
char *ctl_cgroup_auto(const char *controller_id);

/* Removes a directory ctl_cgroup_auto made, once it is empty. */
void ctl_cgroup_release(const char *dir);

#endif
