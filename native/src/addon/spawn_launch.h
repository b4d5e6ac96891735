// The part of spawn that needs no JavaScript: what to start (a Plan, read from JS
// options on the main thread) and starting it (Launch), which may run on any thread.
// spawn.cc runs Launch on the main thread (spawn) or on the libuv pool (spawnAsync).
#ifndef KRUNBOX_SPAWN_LAUNCH_H
#define KRUNBOX_SPAWN_LAUNCH_H

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace krunbox {

constexpr size_t kMaxExtraFds = 64;
constexpr size_t kMaxStagedBinds = 16;

struct Plan {
  std::string file;
  std::vector<std::string> candidates;  // absolute or relative paths to try with execve
  std::vector<std::string> argv_store;
  std::vector<std::string> env_store;
  std::vector<std::string> cgroup_join_files;
  std::optional<std::string> cwd;
  bool new_session = false;
  // CLONE_NEWPID: the child is PID 1 of a namespace of its own, and when it dies the kernel
  // kills every process still in it (needs CAP_SYS_ADMIN in the caller's user namespace).
  bool pid_namespace = false;
  int death_signal = 0;
  int stdio[3] = {-1, -1, -1};  // -1: /dev/null
  std::string stderr_file;      // appended to (created 0600) as the child's stderr; "": none
  std::vector<int> extra_fds;
  bool pipe_stdio[3] = {false, false, false};
  // Staged binds: the tmpfs directory ("" for none), and per source its path, whether it
  // is a directory, and where it is bound (<dir>/<index>).
  std::string stage_dir;
  std::vector<std::string> stage_sources;
  std::vector<bool> stage_is_dir;
  std::vector<std::string> stage_targets;
  // Kernel map text ("inside outside count" lines); empty: no new user namespace.
  std::string uid_map;
  std::string gid_map;
  // Absolute paths of newuidmap/newgidmap, which write the maps for a user that is not root
  // (its subordinate ids); empty: the maps are written to /proc/<pid> directly.
  std::string uid_map_helper;
  std::string gid_map_helper;
  // The host uid that owns the new user namespace (-1: the caller's). The kernel charges the
  // namespace's per-user budgets (inotify instances and watches, processes, message queues) to
  // its owner in the parent namespace as well: a uid of the sandbox's own keeps them off root's.
  int64_t userns_owner = -1;
  // With a user namespace: the capabilities (bit n = capability n) left in the bounding set.
  bool limit_bounding_set = false;
  uint64_t bounding_keep = 0;
};

// What Launch reports: a pid and the parent ends of the pipes asked for, or why it failed
// (an S304 for JS: message, errno, the failing system call and the path it concerned).
struct LaunchResult {
  pid_t pid = -1;
  int pipe_fds[3] = {-1, -1, -1};
  std::string error;  // empty: started
  int error_number = 0;
  const char *syscall = nullptr;
  std::string path;
};

// Forks, runs the plan in the child up to execve, and returns once the child has exec'd or
// failed (the failed child is reaped). Blocking (the child's cgroup joins, the id maps), so
// callers that must not stall run it off the event loop. A started child is in the child
// table, to be reaped by watchExit.
LaunchResult Launch(const Plan &plan);

// Like execvp's PATH search, decided before fork.
std::vector<std::string> Candidates(const std::string &file, const std::vector<std::string> &env);

}  // namespace krunbox

#endif
