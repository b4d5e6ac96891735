/*
 * Removing a sandbox's cgroup tree once its process has ended. Whatever is left
 * in it (a workload that outlived the agent) is killed first: a cgroup with a
 * process in it, or with a child cgroup, cannot be removed.
 */
#ifndef KRUNBOX_REAPER_CGROUP_H
#define KRUNBOX_REAPER_CGROUP_H

/* SIGKILLs every process in the tree at `dir` and removes its directories bottom-up, retrying
 * up to `attempts` times, `pause_ns` apart, while the top one is still there (killed processes
 * take a moment to leave). The reaper can wait; the host's libuv pool (fsBatch) cannot. */
#define REAPER_CGROUP_ATTEMPTS 100
#define REAPER_CGROUP_PAUSE_NS (50 * 1000 * 1000L)
void reaper_cgroup_remove(const char *dir, int attempts, long pause_ns);

#endif
