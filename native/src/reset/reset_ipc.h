/* Step 2 of krunbox-reset: no SysV IPC object nor POSIX message queue of the lease is left. */
#ifndef KRUNBOX_RESET_IPC_H
#define KRUNBOX_RESET_IPC_H

/** Removes every SysV shm, sem and msg object of the current ipc namespace and every POSIX queue; fails the reset
 * otherwise. */
void reset_ipc(void);

void reset_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#endif
