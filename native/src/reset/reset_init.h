/* What a lease can change of the sandbox's PID 1 (the agent), recorded before the first lease and put back by each
 * reset. */
#ifndef KRUNBOX_RESET_INIT_H
#define KRUNBOX_RESET_INIT_H

#include <stddef.h>
#include <sys/types.h>

/** The longest record init_state_record makes, its NUL included. */
#define INIT_STATE_MAX 1024

/** Writes the state of `pid` (a host pid; proc_fd: the host's /proc) into out as one line without a newline: the
 * reference each reset takes. */
void init_state_record(int proc_fd, pid_t pid, char *out, size_t size);

/** Whether `reference` is a line init_state_record made. */
int init_state_valid(const char *reference);

/** Gives `pid` the state `reference` names, what of it a lease could change, and checks all of it is that state;
 * fails the reset otherwise. */
void init_state_restore(int proc_fd, pid_t pid, const char *reference);

#endif
