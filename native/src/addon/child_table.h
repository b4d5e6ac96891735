// The pids this addon spawned and whether they have exited. It closes the
// pid-reuse race: the exit waiter marks a child as exited (while it is still
// a zombie) before reaping it, and kill() refuses to signal a pid marked
// exited, so a late kill can never hit an unrelated process that reused the
// pid. Exited entries are kept for the most recent kRetainedExited children.
#ifndef KRUNBOX_CHILD_TABLE_H
#define KRUNBOX_CHILD_TABLE_H

#include <sys/types.h>

namespace krunbox::children {

constexpr size_t kRetainedExited = 4096;

void Add(pid_t pid);

enum class WatchStart { kStarted, kNotOurs, kAlreadyWatched };
WatchStart BeginWatch(pid_t pid);

void MarkExited(pid_t pid);

// kill(2) unless the pid is a child of ours that already exited. Returns 0 or
// an errno; *delivered is false for ESRCH and for exited children.
int Signal(pid_t pid, int sig, bool *delivered);

}  // namespace krunbox::children

#endif
