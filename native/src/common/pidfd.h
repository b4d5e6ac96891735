/* pidfd system calls for the reaper and krunbox-reset: libc headers older than Linux 5.3's may lack their numbers
 * (the same on every architecture, from the unified table). */
#ifndef KRUNBOX_COMMON_PIDFD_H
#define KRUNBOX_COMMON_PIDFD_H

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

static inline int pidfd_open(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

#endif
