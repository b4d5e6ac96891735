/*
 * krunbox-reset: gives a pooled namespace sandbox a fresh root between two leases, from the
 * host's side (the agent inside holds no CAP_SYS_ADMIN and its seccomp filter refuses every
 * mount call, for good). Run by the host (lib/pool-reset.ts):
 *
 *   krunbox-reset --record <host pid of the sandbox process (bwrap)>
 *   krunbox-reset <host pid of the sandbox process> <image dir on the host> <upper MiB> <record>
 *
 * --record, once before the member's first lease, prints what a lease could change of the agent
 * (reset_init.c), read from the host; each reset then gets that line back and restores it.
 * A reset clones the image's mount on the host (open_tree, read-only) before it joins anything, so no
 * path inside the sandbox is trusted for the new root's lower layer (an fd of the host's mount
 * namespace is refused as an overlay layer: "failed to clone lowerpath"; a detached tree is
 * attached in the sandbox's namespace instead); finds the agent (PID 1 of the sandbox's pid namespace,
 * bwrap's child); joins its mount, pid, ipc and net namespaces through a pidfd, but not its user
 * namespace: the host's root has every capability over them already; and in a child inside the
 * pid namespace:
 *   1. SIGKILLs every process but PID 1 until /proc lists only PID 1 and itself. The child has the
 *      host's credentials and user namespace here, so no process of the lease (the agent's uid, no
 *      CAP_KILL) can signal or ptrace it while it kills them;
 *   2. only then joins the user namespace as the sandbox's root (the new root's files are its);
 *   3. removes every SysV shm/sem/msg object and every POSIX message queue;
 *   4. destroys every TCP socket left in the network namespace (SOCK_DESTROY), TIME_WAIT included;
 *   5. builds a new root as boot does (agent/boot/boot.go, masks.go): a fresh size-capped tmpfs for
 *      the overlay's upper and work dirs, the overlay over the image, /proc, a fresh /dev (the
 *      device nodes bound from the old one, a new devpts), /tmp and /dev/shm tmpfs, the /proc
 *      masks and an empty read-only /sys; pivot_root's into it (which moves the agent's root and
 *      cwd too) and detaches the old root, whose layers are freed with it.
 * Once the child is done, the agent's limits, OOM score, autogroup and coredump filter are put back
 * as recorded (reset_init.c), from the host's side.
 * Exit 0 only when every step succeeded; otherwise 1 and one line on stderr (the host then
 * destroys the sandbox). It never execs anything.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/pidfd.h"
#include "reset_init.h"
#include "reset_ipc.h"
#include "reset_net.h"
#include "reset_root.h"

/** How long the processes of the lease may take to die and be reaped by the agent (ms). */
#define KILL_DEADLINE_MS 5000

void reset_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("krunbox-reset: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  _exit(1);
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/** Whether `pid` is a child of `sandbox` whose innermost pid is 1 (PID 1 of a pid namespace below ours). */
static int is_init_of(pid_t pid, pid_t sandbox) {
  char status[64], line[256];
  snprintf(status, sizeof status, "/proc/%d/status", pid);
  FILE *s = fopen(status, "re");
  if (!s) return 0;
  int init = 0, child = 0;
  while (fgets(line, sizeof line, s)) {
    if (strncmp(line, "PPid:", 5) == 0) child = atoi(line + 5) == sandbox;
    if (strncmp(line, "NSpid:", 6) != 0) continue;
    char *last = strrchr(line, '\t');
    int levels = 0;
    for (char *p = line; *p; p++) levels += *p == '\t';
    init = levels >= 2 && last && atoi(last + 1) == 1;
  }
  fclose(s);
  return init && child;
}

/** The host pid of the sandbox's PID 1: the child of `sandbox` whose innermost pid is 1. */
static pid_t find_init(pid_t sandbox) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", sandbox, sandbox);
  FILE *f = fopen(path, "re");
  if (!f) reset_fail("read %s: %s", path, strerror(errno));
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n")) {
    pid_t child = (pid_t)atoi(tok);
    if (is_init_of(child, sandbox)) return child;
  }
  reset_fail("no PID 1 of a pid namespace among the children of %d", sandbox);
  return -1;
}

/** Whether /proc lists any process but PID 1 and `self`. */
static int others_left(pid_t self) {
  DIR *d = opendir("/proc");
  if (!d) reset_fail("open /proc: %s", strerror(errno));
  int left = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    if (pid != 1 && pid != self) left = 1;
  }
  closedir(d);
  return left;
}

/** Step 1: every process of the lease dies (stopped and signal-ignoring ones alike) and is reaped. */
static void kill_lease_processes(void) {
  pid_t self = getpid();
  long deadline = now_ms() + KILL_DEADLINE_MS;
  for (;;) {
    // kill(-1) reaches every process of the namespace but PID 1 and the caller, whatever its uid.
    if (kill(-1, SIGKILL) != 0 && errno != ESRCH) reset_fail("kill(-1): %s", strerror(errno));
    if (!others_left(self)) return;
    if (now_ms() > deadline) reset_fail("processes of the lease are still there after %d ms", KILL_DEADLINE_MS);
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
}

/** Whether the namespace `kind` of `pid` is this process's own (the host's). */
static int same_namespace(pid_t pid, const char *kind) {
  char theirs[64], ours[64];
  struct stat a, b;
  snprintf(theirs, sizeof theirs, "/proc/%d/ns/%s", pid, kind);
  snprintf(ours, sizeof ours, "/proc/self/ns/%s", kind);
  if (stat(theirs, &a) != 0 || stat(ours, &b) != 0) reset_fail("stat %s: %s", theirs, strerror(errno));
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/** Whether the process of pidfd is not reaped yet (a zombie counts: its pid is not free for another before). */
static int alive(int pidfd) { return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0; }

/** A pidfd of `init` once it is known to be the sandbox's PID 1, in none of the host's namespaces. */
static int open_init(pid_t sandbox, pid_t init) {
  int pidfd = pidfd_open(init);
  if (pidfd < 0) reset_fail("pidfd_open(%d): %s", init, strerror(errno));
  // The pidfd names one process for good; while it is alive its pid is that process's, so these
  // checks are of the process setns joins (not of another that took a reused pid): never the
  // host's own namespaces, where kill(-1) and pivot_root would hit the host.
  if (!alive(pidfd) || !is_init_of(init, sandbox)) reset_fail("%d is no longer the sandbox's PID 1", init);
  static const char *const kinds[] = {"user", "mnt", "pid", "ipc", "net"};
  for (unsigned i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if (same_namespace(init, kinds[i])) reset_fail("%d shares the host's %s namespace", init, kinds[i]);
  if (!alive(pidfd)) reset_fail("%d ended during the checks", init);
  return pidfd;
}

/** The rest of the reset runs as the sandbox's root: what it makes of the new root is the sandbox's. */
static void become_sandbox_root(int pidfd) {
  if (setns(pidfd, CLONE_NEWUSER) != 0) reset_fail("setns into the user namespace: %s", strerror(errno));
  if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) reset_fail("become the sandbox's root: %s", strerror(errno));
}

static int record(pid_t sandbox) {
  int host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (host_proc < 0) reset_fail("open /proc: %s", strerror(errno));
  pid_t init = find_init(sandbox);
  int pidfd = open_init(sandbox, init);
  char line[INIT_STATE_MAX];
  init_state_record(host_proc, init, line, sizeof line);
  // What was read is of the process the pidfd names only if it is still there: its pid was not reused meanwhile.
  if (!alive(pidfd)) reset_fail("%d ended during the record", init);
  if (printf("%s\n", line) < 0 || fflush(stdout) != 0) reset_fail("write the record: %s", strerror(errno));
  return 0;
}

int main(int argc, char **argv) {
  // Nothing of the sandbox may ever read this process's memory or fds, at any step.
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) reset_fail("PR_SET_DUMPABLE: %s", strerror(errno));
  if (argc == 3 && strcmp(argv[1], "--record") == 0 && atoi(argv[2]) > 1) return record((pid_t)atoi(argv[2]));
  if (argc != 5)
    reset_fail("usage: krunbox-reset --record <sandbox pid> | <sandbox pid> <image dir> <upper MiB> <record>");
  pid_t sandbox = (pid_t)atoi(argv[1]);
  long upper_mb = atol(argv[3]);
  if (sandbox <= 1 || upper_mb <= 0) reset_fail("bad arguments");
  if (!init_state_valid(argv[4])) reset_fail("the record of PID 1 is malformed");
  // Opened on the host, before any namespace is joined: the new root's lower layer.
  int lower = (int)syscall(SYS_open_tree, AT_FDCWD, argv[2], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
  if (lower < 0) reset_fail("open %s: %s", argv[2], strerror(errno));
  // A private copy of the image's mount, read-only before the sandbox's namespaces ever see it.
  struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
  if (syscall(SYS_mount_setattr, lower, "", AT_EMPTY_PATH | AT_RECURSIVE, &ro, sizeof ro) != 0)
    reset_fail("make the image read-only: %s", strerror(errno));
  // The host's /proc: the network namespace's socket counts once joined (reset_net.c), the agent's state
  // (reset_init.c).
  int host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (host_proc < 0) reset_fail("open /proc: %s", strerror(errno));
  pid_t init = find_init(sandbox);
  int pidfd = open_init(sandbox, init);
  // With the host's credentials: the host's root holds CAP_SYS_ADMIN over every namespace of the sandbox.
  if (setns(pidfd, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET) != 0)
    reset_fail("setns into the namespaces of %d: %s", init, strerror(errno));
  pid_t child = fork();
  if (child < 0) reset_fail("fork: %s", strerror(errno));
  if (child == 0) {
    // Inside the pid namespace now: its /proc shows this process.
    kill_lease_processes();
    become_sandbox_root(pidfd);
    reset_ipc();
    reset_net(host_proc);
    reset_root(lower, upper_mb);
    _exit(0);
  }
  int status;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) reset_fail("wait: %s", strerror(errno));
  if (!WIFEXITED(status)) reset_fail("the reset child died of signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  // No process of the lease is left to change it again. By host pid, while the pidfd shows it was not reused.
  if (!alive(pidfd)) reset_fail("%d ended during the reset", init);
  init_state_restore(host_proc, init, argv[4]);
  if (!alive(pidfd)) reset_fail("%d ended during the restore of its state", init);
  return 0;
}
