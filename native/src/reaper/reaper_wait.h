/*
 * Waiting for the sandbox process to end, with no periodic wake-up: a pidfd
 * (pidfd_open, Linux 5.3) becomes readable when its process exits, zombie or
 * not, and poll(2) sleeps on it. Each process is named by pid and start time
 * (field 22 of /proc/pid/stat), checked after the pidfd is open so that the
 * pidfd is pinned to that very process and not to a later one with its pid.
 * Without pidfds (ENOSYS), /proc/pid/stat is read once a second instead.
 */
#ifndef KRUNBOX_REAPER_WAIT_H
#define KRUNBOX_REAPER_WAIT_H

#include <sys/types.h>

#include "reaper_params.h"

/* Seconds a sandbox with artifacts has, once its owner is gone, to archive them and end. */
#define REAPER_HOST_EXIT_GRACE_S 30
/* How long a living owner has to retire an ended sandbox before the reaper does. */
#define REAPER_OWNER_GRACE_MS 10000

struct reaper_owner {
  pid_t pid; /* 0: none */
  int pidfd; /* -1: none, or without pidfds */
  unsigned long long start;
  int gone;
};

/* Returns once the sandbox process has ended. When the owner ends first and
 * the sandbox has artifacts, asks its agent to shut down (ctl/host-exit) and
 * SIGKILLs it if it has not ended REAPER_HOST_EXIT_GRACE_S later. */
void reaper_wait(const struct reaper_params *p, struct reaper_owner *owner);

/* An owner that lives retires the sandbox itself, reading why it ended from its control dir
 * first: returns once the entry is gone (then the reaper has nothing left to do), the owner has
 * ended, or REAPER_OWNER_GRACE_MS have passed (a host that does not retire it after all). Checks
 * at growing intervals, a handful of wake-ups in all; returns at once without a living owner. */
void reaper_defer_to_owner(const struct reaper_params *p, struct reaper_owner *owner);

/* Whether the owner given in the parameters has ended by now. */
int reaper_owner_gone(struct reaper_owner *owner);

#endif
