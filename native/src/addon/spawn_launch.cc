// Launch: clone, the child's set-up up to execve, and the parent's side of it (the user
// namespace's id maps, the status pipe). No JavaScript here: it may run on any thread.
//
// The child shares the parent's memory until it execs (CLONE_VM, as posix_spawn does), on a
// stack of its own: fork() would copy the page tables of the whole Node process, holding its
// memory map locked meanwhile, and every page the main thread then wrote would fault (issue
// 22: a stall of the event loop per create that grew with the process). Unlike posix_spawn the
// parent keeps running (no CLONE_VFORK), because it must write the user namespace's maps while
// the child waits. So the child writes nothing the parent reads: only its own stack and what
// the kernel gives a new process (its fd table and signal handlers are copies). errno is the
// one thing they share (the cloning thread's); each reads it at once after its own failed call.
//
// The child runs only async-signal-safe code: everything it needs (argv, envp, candidate
// paths, cgroup file names) is prepared before clone(). It joins its cgroups itself, so
// whoever calls Launch waits for it; spawnAsync calls it on the libuv pool so that no wait
// in the kernel ever stalls the event loop.
//
// With stagedBinds, the child first makes a private mount namespace (still as the
// caller) with a tmpfs on stagedBinds.dir and each source bound at dir/<index>:
// a program that runs with the namespace's ids (bwrap) can then reach them, whatever
// the permissions of the directories on their real paths.
//
// With userNamespace, the child enters a new user namespace after joining its
// cgroups (as the caller, who may write the cgroup files), the parent writes the
// namespace's uid and gid maps (a process cannot map ids other than its own
// from inside), and the child then becomes the namespace's uid 0: root inside,
// the mapped unprivileged ids outside.
//
// With pidNamespace, the child is PID 1 of a new pid namespace: its end takes down everything
// it left in it, even a process of another session that would otherwise outlive it (bwrap's
// child while it waits for its parent's go-ahead has no parent-death signal yet).
//
// PR_SET_PDEATHSIG follows the thread that forked. Launch runs on the main thread or on a
// libuv pool thread; both live as long as the process.
#include "spawn_launch.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "child_table.h"
#include "idmap_helper.h"

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
constexpr long kPidfdOpen = __NR_pidfd_open;

#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace krunbox {
namespace {

// What the child reports on the status pipe when it cannot reach exec.
enum class ChildStage : int {
  kSession,
  kProcessGroup,
  kDeathSignal,
  kCgroup,
  kStagedBinds,
  kUserNamespace,
  kSetIds,
  kBoundingSet,
  kChdir,
  kDup,
  kFdSweep,
  kExec
};

struct ChildFailure {
  ChildStage stage;
  int error_number;
  int index;  // cgroupJoinFiles index for kCgroup
};

// RAII owner for the parent's descriptors until they are handed out.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  ~Fd() { Close(); }
  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int Release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

const char *StageSyscall(ChildStage stage) {
  switch (stage) {
    case ChildStage::kSession:
      return "setsid";
    case ChildStage::kProcessGroup:
      return "setpgid";
    case ChildStage::kDeathSignal:
      return "prctl";
    case ChildStage::kCgroup:
      return "write";
    case ChildStage::kStagedBinds:
      return "mount";
    case ChildStage::kUserNamespace:
      return "unshare";
    case ChildStage::kSetIds:
      return "setresuid";
    case ChildStage::kBoundingSet:
      return "prctl";
    case ChildStage::kChdir:
      return "chdir";
    case ChildStage::kDup:
      return "dup2";
    case ChildStage::kFdSweep:
      return "close_range";
    case ChildStage::kExec:
      return "execve";
  }
  return "spawn";
}

std::string FindPathVariable(const std::vector<std::string> &env) {
  for (const std::string &entry : env) {
    if (entry.compare(0, 5, "PATH=") == 0) return entry.substr(5);
  }
  const char *own = getenv("PATH");
  return own != nullptr ? own : "/usr/local/bin:/usr/bin:/bin";
}

std::vector<char *> Pointers(const std::vector<std::string> &strings) {
  std::vector<char *> out;
  out.reserve(strings.size() + 1);
  for (const std::string &s : strings) out.push_back(const_cast<char *>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Everything the child touches, as plain arrays.
struct ChildView {
  char *const *argv;
  char *const *envp;
  const char *const *candidates;
  size_t candidate_count;
  const char *const *cgroup_join_files;
  size_t cgroup_count;
  const char *cwd;
  bool new_session;
  bool pid_namespace;
  int parent_pidfd;  // with pid_namespace: readable once the parent process has ended
  int death_signal;
  pid_t parent;
  const int *sources;  // child fd i gets sources[i]
  int target_count;
  int status_fd;
  const char *stage_dir;  // nullptr: no staged binds
  const char *const *stage_sources;
  const char *const *stage_targets;
  const bool *stage_is_dir;
  size_t stage_count;
  // User namespace hand-shake (-1 without): the child reports its unshare on
  // userns_ready_fd and waits for the parent's byte on userns_mapped_fd.
  int userns_ready_fd;
  int userns_mapped_fd;
  int userns_mapped_parent_fd;  // the parent's end, closed here so its close reads as EOF
  int64_t userns_owner;         // setresuid to it before the unshare (-1: stay who we are)
  // In the user namespace: drop from the bounding set every capability not in bounding_keep.
  bool limit_bounding_set;
  uint64_t bounding_keep;
};

[[noreturn]] void ChildFail(int status_fd, ChildStage stage, int error_number, int index = 0) {
  ChildFailure failure{stage, error_number, index};
  ssize_t ignored = write(status_fd, &failure, sizeof failure);
  (void)ignored;
  _exit(127);
}

// Decimal text of a pid (or fd) followed by a newline; returns its length.
size_t FormatPid(char *out, pid_t pid) {
  char reversed[16];
  size_t n = 0;
  unsigned long value = static_cast<unsigned long>(pid);
  do {
    reversed[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  for (size_t i = 0; i < n; i++) out[i] = reversed[n - 1 - i];
  out[n++] = '\n';
  return n;
}

// Marks every fd >= first close-on-exec (closing them now would also close
// the status pipe, which must survive until exec).
bool SweepFds(int first) {
  if (syscall(__NR_close_range, static_cast<unsigned>(first), ~0U, CLOSE_RANGE_CLOEXEC) == 0) return true;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  rlim_t max = limit.rlim_cur == RLIM_INFINITY ? 1 << 20 : limit.rlim_cur;
  for (rlim_t fd = static_cast<rlim_t>(first); fd < max; fd++) fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
  return true;
}

[[noreturn]] void RunChild(const ChildView &v) {
  int status_fd = v.status_fd;

  // Node ignores SIGPIPE and installs handlers; the child starts clean.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, nullptr);
  }

  if (v.new_session) {
    if (setsid() < 0) ChildFail(status_fd, ChildStage::kSession, errno);
  } else if (setpgid(0, 0) < 0) {
    ChildFail(status_fd, ChildStage::kProcessGroup, errno);
  }

  // "0" is the writer itself. The child has one thread, so a v1 `tasks` file moves all of it,
  // and a kernel moving only the writing thread skips the lock that makes a process-wide move
  // (cgroup.procs, or a pid) wait for an RCU grace period: 0.3 ms instead of 4.7 here.
  for (size_t i = 0; i < v.cgroup_count; i++) {
    int fd = open(v.cgroup_join_files[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0) ChildFail(status_fd, ChildStage::kCgroup, errno, static_cast<int>(i));
    if (write(fd, "0\n", 2) != 2) ChildFail(status_fd, ChildStage::kCgroup, errno, static_cast<int>(i));
    close(fd);
  }

  if (v.stage_dir != nullptr) {
    // Private, so nothing mounted here reaches the host's mount namespace. The sources are
    // opened in it (a bind must come from a mount of this namespace) before the tmpfs may
    // hide them, and bound from their fds.
    if (unshare(CLONE_NEWNS) < 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) {
      ChildFail(status_fd, ChildStage::kStagedBinds, errno);
    }
    int fds[kMaxStagedBinds];
    for (size_t i = 0; i < v.stage_count; i++) {
      fds[i] = open(v.stage_sources[i], O_PATH | O_CLOEXEC);
      if (fds[i] < 0) ChildFail(status_fd, ChildStage::kStagedBinds, errno, static_cast<int>(i));
    }
    if (mount("tmpfs", v.stage_dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0) {
      ChildFail(status_fd, ChildStage::kStagedBinds, errno);
    }
    for (size_t i = 0; i < v.stage_count; i++) {
      char source[32] = "/proc/self/fd/";
      size_t len = strlen(source);
      len += FormatPid(source + len, fds[i]) - 1;  // FormatPid ends with a newline
      source[len] = '\0';
      int made = v.stage_is_dir[i] ? mkdir(v.stage_targets[i], 0755)
                                   : close(open(v.stage_targets[i], O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
      if (made < 0 || mount(source, v.stage_targets[i], nullptr, MS_BIND | MS_REC, nullptr) < 0) {
        ChildFail(status_fd, ChildStage::kStagedBinds, errno, static_cast<int>(i));
      }
      close(fds[i]);
    }
  }

  if (v.userns_ready_fd >= 0) {
    close(v.userns_mapped_parent_fd);
    // The namespace's owner is whoever unshares it. Every capability goes with root here; the
    // namespace gives them back, and the parent (still root) writes the maps.
    if (v.userns_owner >= 0) {
      uid_t owner = static_cast<uid_t>(v.userns_owner);
      if (setresuid(owner, owner, owner) < 0) ChildFail(status_fd, ChildStage::kSetIds, errno);
    }
    if (unshare(CLONE_NEWUSER) < 0) ChildFail(status_fd, ChildStage::kUserNamespace, errno);
    char byte = 1;
    if (write(v.userns_ready_fd, &byte, 1) != 1) ChildFail(status_fd, ChildStage::kUserNamespace, errno);
    // EOF instead of the byte: the parent could not write the maps and gives up on us.
    if (read(v.userns_mapped_fd, &byte, 1) != 1) _exit(127);
    if (setresgid(0, 0, 0) < 0) ChildFail(status_fd, ChildStage::kSetIds, errno);
    // The caller's supplementary groups mean nothing inside; where setgroups is denied they stay.
    if (setgroups(0, nullptr) < 0 && errno != EPERM) ChildFail(status_fd, ChildStage::kSetIds, errno);
    if (setresuid(0, 0, 0) < 0) ChildFail(status_fd, ChildStage::kSetIds, errno);
    // bwrap narrows the bounding set only in a user namespace of its own; in ours everything
    // it execs would start with every capability in it, and the agent then dropped them one
    // at a time on each of its threads (issue 22). One thread here, before execve: cheap.
    if (v.limit_bounding_set) {
      for (int cap = 0; cap < 64; cap++) {
        if ((v.bounding_keep >> cap) & 1) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
          ChildFail(status_fd, ChildStage::kBoundingSet, errno, cap);
      }
    }
  }

  // After any change of ids: the kernel clears the parent-death signal when credentials change.
  if (v.death_signal != 0) {
    if (prctl(PR_SET_PDEATHSIG, v.death_signal) < 0) ChildFail(status_fd, ChildStage::kDeathSignal, errno);
    // The parent may have died between fork and prctl; then nobody would ever
    // send the signal, so deliver it now.
    struct pollfd parent = {v.parent_pidfd, POLLIN, 0};
    bool orphaned = v.pid_namespace ? poll(&parent, 1, 0) != 0 : getppid() != v.parent;
    if (orphaned) {
      kill(getpid(), v.death_signal);
      _exit(127);
    }
  }

  if (v.cwd != nullptr && chdir(v.cwd) < 0) ChildFail(status_fd, ChildStage::kChdir, errno);

  // Two steps so sources and targets may overlap: copy every source above the
  // target range, then dup2 the copies down (dup2 clears close-on-exec).
  int first_free = v.target_count;
  int moved_status = fcntl(status_fd, F_DUPFD_CLOEXEC, first_free);
  if (moved_status < 0) ChildFail(status_fd, ChildStage::kDup, errno);
  status_fd = moved_status;
  int high[3 + kMaxExtraFds];
  for (int i = 0; i < v.target_count; i++) {
    high[i] = fcntl(v.sources[i], F_DUPFD_CLOEXEC, first_free);
    if (high[i] < 0) ChildFail(status_fd, ChildStage::kDup, errno, i);
  }
  for (int i = 0; i < v.target_count; i++) {
    if (dup2(high[i], i) < 0) ChildFail(status_fd, ChildStage::kDup, errno, i);
  }
  if (!SweepFds(first_free)) ChildFail(status_fd, ChildStage::kFdSweep, errno);

  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  int exec_error = ENOENT;
  for (size_t i = 0; i < v.candidate_count; i++) {
    execve(v.candidates[i], v.argv, v.envp);
    if (errno == EACCES) {
      exec_error = EACCES;  // keep looking, like execvp
    } else if (errno != ENOENT && errno != ENOTDIR) {
      exec_error = errno;
      break;
    }
  }
  ChildFail(status_fd, ChildStage::kExec, exec_error);
}

int ChildEntry(void *view) { RunChild(*static_cast<const ChildView *>(view)); }

// The child's stack, unmapped once the child has exec'd or been reaped (then nothing runs on it).
class ChildStack {
 public:
  static constexpr size_t kSize = 256 * 1024;
  ChildStack() { base_ = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0); }
  ChildStack(const ChildStack &) = delete;
  ChildStack &operator=(const ChildStack &) = delete;
  ~ChildStack() {
    if (base_ != MAP_FAILED) munmap(base_, kSize);
  }
  bool ok() const { return base_ != MAP_FAILED; }
  // Stacks grow down on x86-64 and arm64.
  void *top() const { return static_cast<char *>(base_) + kSize; }

 private:
  void *base_;
};

ssize_t ReadFully(int fd, void *buffer, size_t length) {
  size_t got = 0;
  while (got < length) {
    ssize_t n = read(fd, static_cast<char *>(buffer) + got, length - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -1 : static_cast<ssize_t>(got);
    got += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

void Reap(pid_t pid) {
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// Writes one of /proc/<pid>/{uid_map,gid_map} in a single write, as the kernel requires.
// Returns 0 or an errno.
int WriteIdMap(pid_t pid, const char *name, const std::string &map) {
  std::string file = "/proc/" + std::to_string(pid) + "/" + name;
  int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = write(fd, map.data(), map.size());
  int error = n == static_cast<ssize_t>(map.size()) ? 0 : n < 0 ? errno : EIO;
  close(fd);
  return error;
}

// A close-on-exec pipe whose two ends the caller owns; false (errno set) when there is none.
bool OpenPipe(Fd &read_end, Fd &write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return false;
  read_end.fd = fds[0];
  write_end.fd = fds[1];
  return true;
}

LaunchResult Failed(std::string message, int error_number, const char *syscall, std::string path = std::string()) {
  LaunchResult r;
  r.error = std::move(message);
  r.error_number = error_number;
  r.syscall = syscall;
  r.path = std::move(path);
  return r;
}

// Writes the namespace's uid_map, then its gid_map: directly, or through the plan's helpers.
LaunchResult WriteMaps(const Plan &p, pid_t pid) {
  const struct {
    const char *file;
    const std::string &map;
    const std::string &helper;
  } maps[] = {{"uid_map", p.uid_map, p.uid_map_helper}, {"gid_map", p.gid_map, p.gid_map_helper}};
  for (const auto &m : maps) {
    std::string prefix = "spawn " + p.file + " failed writing the user namespace's " + m.file;
    if (m.helper.empty()) {
      int error = WriteIdMap(pid, m.file, m.map);
      if (error != 0) return Failed(prefix + ": " + strerror(error), error, "write", m.file);
    } else {
      int error = 0;
      const char *call = nullptr;
      std::string why = RunIdMapHelper(m.helper, pid, m.map, &error, &call);
      if (!why.empty()) return Failed(prefix + " with " + why, error, call, m.helper);
    }
  }
  return LaunchResult{};
}

LaunchResult ChildFailed(const Plan &p, const ChildFailure &f) {
  std::string what;
  std::string path;
  switch (f.stage) {
    case ChildStage::kCgroup:
      path = p.cgroup_join_files[static_cast<size_t>(f.index)];
      what = "joining cgroup " + path;
      break;
    case ChildStage::kStagedBinds:
      path = p.stage_dir;
      what = "staging its binds in " + path;
      break;
    case ChildStage::kChdir:
      path = *p.cwd;
      what = "changing to cwd " + path;
      break;
    case ChildStage::kExec:
      path = p.file;
      what = "executing " + p.file;
      break;
    default:
      what = std::string("setting up the child (") + StageSyscall(f.stage) + ")";
  }
  return Failed("spawn " + p.file + " failed " + what + ": " + strerror(f.error_number), f.error_number,
                StageSyscall(f.stage), path);
}

}  // namespace

// Like execvp, but decided before fork. Empty PATH entries (meaning ".") are
// skipped on purpose: a sandbox launcher should not run files from its cwd.
std::vector<std::string> Candidates(const std::string &file, const std::vector<std::string> &env) {
  if (file.find('/') != std::string::npos) return {file};
  std::vector<std::string> out;
  std::string path = FindPathVariable(env);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    if (end > start) out.push_back(path.substr(start, end - start) + "/" + file);
    start = end + 1;
  }
  return out;
}

LaunchResult Launch(const Plan &p) {
  // Opened here, on the caller's thread (the libuv pool for spawnAsync), not by the JS side: one
  // task of the pool fewer on the way to every sandbox (issue 22).
  Fd stderr_file;
  if (!p.stderr_file.empty()) {
    stderr_file.fd = open(p.stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (stderr_file.fd < 0)
      return Failed("spawn: cannot open stderrFile " + p.stderr_file + ": " + strerror(errno), errno, "open",
                    p.stderr_file);
  }
  Fd devnull;
  bool need_devnull = false;
  for (int i = 0; i < 3; i++) need_devnull |= p.stdio[i] < 0 && !p.pipe_stdio[i] && !(i == 2 && stderr_file.fd >= 0);
  if (need_devnull) {
    devnull.fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull.fd < 0)
      return Failed(std::string("spawn: cannot open /dev/null: ") + strerror(errno), errno, "open", "/dev/null");
  }

  Fd parent_end[3], child_end[3];
  for (int i = 0; i < 3; i++) {
    if (!p.pipe_stdio[i]) continue;
    // stdin: the child reads the pipe; stdout/stderr: the child writes it.
    if (!(i == 0 ? OpenPipe(child_end[i], parent_end[i]) : OpenPipe(parent_end[i], child_end[i]))) {
      return Failed(std::string("spawn: pipe2 failed: ") + strerror(errno), errno, "pipe2");
    }
  }

  Fd status_read, status_write;
  if (!OpenPipe(status_read, status_write))
    return Failed(std::string("spawn: pipe2 failed: ") + strerror(errno), errno, "pipe2");

  // In a pid namespace of its own the child sees no parent (getppid() is 0): it learns
  // whether this process died before its parent-death signal was set from a pidfd of it.
  Fd self;
  if (p.pid_namespace) {
    self.fd = static_cast<int>(syscall(kPidfdOpen, getpid(), 0));
    if (self.fd < 0)
      return Failed(std::string("spawn: pidfd_open failed (a pid namespace needs Linux 5.3): ") + strerror(errno),
                    errno, "pidfd_open");
  }

  Fd userns_ready_read, userns_ready_write, userns_mapped_read, userns_mapped_write;
  if (!p.uid_map.empty() &&
      (!OpenPipe(userns_ready_read, userns_ready_write) || !OpenPipe(userns_mapped_read, userns_mapped_write))) {
    return Failed(std::string("spawn: pipe2 failed: ") + strerror(errno), errno, "pipe2");
  }

  std::vector<int> sources;
  for (int i = 0; i < 3; i++) {
    sources.push_back(p.pipe_stdio[i]                 ? child_end[i].fd
                      : p.stdio[i] >= 0               ? p.stdio[i]
                      : i == 2 && stderr_file.fd >= 0 ? stderr_file.fd
                                                      : devnull.fd);
  }
  sources.insert(sources.end(), p.extra_fds.begin(), p.extra_fds.end());

  std::vector<char *> argv = Pointers(p.argv_store);
  std::vector<char *> envp = Pointers(p.env_store);
  std::vector<char *> candidates = Pointers(p.candidates);
  std::vector<char *> cgroups = Pointers(p.cgroup_join_files);
  std::vector<char *> stage_sources = Pointers(p.stage_sources);
  std::vector<char *> stage_targets = Pointers(p.stage_targets);
  std::unique_ptr<bool[]> stage_is_dir(new bool[p.stage_is_dir.size() + 1]);
  for (size_t i = 0; i < p.stage_is_dir.size(); i++) stage_is_dir[i] = p.stage_is_dir[i];
  ChildView view{argv.data(),
                 envp.data(),
                 candidates.data(),
                 p.candidates.size(),
                 cgroups.data(),
                 p.cgroup_join_files.size(),
                 p.cwd ? p.cwd->c_str() : nullptr,
                 p.new_session,
                 p.pid_namespace,
                 self.fd,
                 p.death_signal,
                 getpid(),
                 sources.data(),
                 static_cast<int>(sources.size()),
                 status_write.fd,
                 p.stage_dir.empty() ? nullptr : p.stage_dir.c_str(),
                 stage_sources.data(),
                 stage_targets.data(),
                 stage_is_dir.get(),
                 p.stage_targets.size(),
                 userns_ready_write.fd,
                 userns_mapped_read.fd,
                 userns_mapped_write.fd,
                 p.userns_owner,
                 p.limit_bounding_set,
                 p.bounding_keep};

  // Declared before anything the child could still be running on when Launch returns.
  ChildStack stack;
  if (!stack.ok()) return Failed(std::string("spawn: cannot map the child's stack: ") + strerror(errno), errno, "mmap");

  // No signal handler of ours may run in the child before it resets them.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pid_t pid = clone(ChildEntry, stack.top(), CLONE_VM | SIGCHLD | (p.pid_namespace ? CLONE_NEWPID : 0), &view);
  int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);

  status_write.Close();
  self.Close();
  userns_ready_write.Close();
  userns_mapped_read.Close();
  for (Fd &fd : child_end) fd.Close();
  devnull.Close();
  if (pid < 0)
    return Failed(std::string("spawn ") + p.file + " failed: clone: " + strerror(fork_error), fork_error, "clone");

  if (userns_ready_read.fd >= 0) {
    char byte;
    // EOF: the child failed before it unshared; its record is on the status pipe.
    if (ReadFully(userns_ready_read.fd, &byte, 1) == 1) {
      LaunchResult mapped = WriteMaps(p, pid);
      if (!mapped.error.empty()) {
        userns_mapped_write.Close();  // the child exits on EOF
        Reap(pid);
        return mapped;
      }
      if (write(userns_mapped_write.fd, &byte, 1) != 1) {
        int write_error = errno;
        kill(pid, SIGKILL);
        Reap(pid);
        return Failed(std::string("spawn ") + p.file + " failed: " + strerror(write_error), write_error, "write");
      }
    }
    userns_mapped_write.Close();
  }

  // EOF means exec succeeded (the pipe is close-on-exec); a record means it did not.
  ChildFailure failure;
  ssize_t got = ReadFully(status_read.fd, &failure, sizeof failure);
  if (got != 0) {
    Reap(pid);
    if (got != static_cast<ssize_t>(sizeof failure))
      return Failed("spawn " + p.file + " failed: the child died before exec", EIO, "read");
    return ChildFailed(p, failure);
  }
  children::Add(pid);

  LaunchResult result;
  result.pid = pid;
  for (int i = 0; i < 3; i++) {
    if (p.pipe_stdio[i]) result.pipe_fds[i] = parent_end[i].Release();
  }
  return result;
}

}  // namespace krunbox
