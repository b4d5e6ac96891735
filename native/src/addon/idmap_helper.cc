// A host user that is not root may map into a user namespace only its own id; shadow's setuid
// newuidmap and newgidmap may also map the ranges /etc/subuid and /etc/subgid give the user
// (they check the request against those files, so nothing else can be mapped this way).
//
// The helper is started with posix_spawn (glibc clones with CLONE_VM|CLONE_VFORK and runs only
// its own async-signal-safe steps before exec: no copy of the Node process's memory, no code of
// ours in the child), with stdin and stdout on /dev/null, default signal handling and an empty
// signal mask (Node ignores SIGPIPE and pool threads may block signals), and a minimal
// environment. Its stderr goes to a pipe that is read only after it exited: any process forked
// meanwhile (another spawn on another thread) may hold a copy of the write end until it execs,
// so waiting for EOF could wait on that process. A map error is one line, far below a pipe's
// capacity, so the helper never blocks on it.
#include "idmap_helper.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

namespace krunbox {
namespace {

constexpr size_t kStderrKept = 512;

// What the helper wrote on stderr (at most kStderrKept bytes), trimmed, on one line.
std::string Drain(int fd) {
  std::string text;
  char buffer[kStderrKept];
  while (text.size() < kStderrKept) {
    ssize_t n = read(fd, buffer, kStderrKept - text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  for (char &c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  size_t end = text.find_last_not_of(' ');
  return end == std::string::npos ? std::string() : text.substr(0, end + 1);
}

std::string Status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

std::string RunIdMapHelper(const std::string &helper, pid_t pid, const std::string &map, int *error_number,
                           const char **syscall) {
  *error_number = 0;
  *syscall = nullptr;
  std::vector<std::string> args{helper, std::to_string(pid)};
  std::istringstream words(map);
  for (std::string word; words >> word;) args.push_back(word);
  std::string command;
  for (const std::string &a : args) command += (command.empty() ? "" : " ") + a;
  if (args.size() < 5 || (args.size() - 2) % 3 != 0) {
    *error_number = EINVAL;
    return command + ": the map is not lines of \"inside outside count\"";
  }
  std::vector<char *> argv;
  for (std::string &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char path_entry[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char locale_entry[] = "LC_ALL=C";
  char *envp[] = {path_entry, locale_entry, nullptr};

  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) < 0) {
    *error_number = errno;
    *syscall = "pipe2";
    return command + ": pipe2: " + strerror(*error_number);
  }
  // The read end only: the helper's stderr stays blocking.
  int flags = fcntl(err_pipe[0], F_GETFL);
  if (flags >= 0) fcntl(err_pipe[0], F_SETFL, flags | O_NONBLOCK);
  int err_write = err_pipe[1];

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_write, 2);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  sigdelset(&all, SIGKILL);
  sigdelset(&all, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t helper_pid = -1;
  int spawn_error = posix_spawn(&helper_pid, helper.c_str(), &actions, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(err_write);
  if (spawn_error != 0) {
    close(err_pipe[0]);
    *error_number = spawn_error;
    *syscall = "posix_spawn";
    return command + ": cannot run " + helper + ": " + strerror(spawn_error);
  }

  int status = 0;
  while (waitpid(helper_pid, &status, 0) < 0) {
    if (errno == EINTR) continue;
    int wait_error = errno;
    close(err_pipe[0]);
    *error_number = wait_error;
    *syscall = "waitpid";
    return command + ": waitpid: " + strerror(wait_error);
  }
  std::string said = Drain(err_pipe[0]);
  close(err_pipe[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return std::string();
  return command + " " + Status(status) + (said.empty() ? std::string() : ": " + said);
}

}  // namespace krunbox
