#define _GNU_SOURCE
#include "reaper_wait.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/pidfd.h"
#include "../common/reaper_fs.h"

/* 0 and the start time of a process that runs; -1 when it is gone or a zombie. */
static int proc_start(pid_t pid, unsigned long long *start) {
  char path[32], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* The name (field 2) may hold anything: the fields resume after its last ')'. */
  char *s = strrchr(buf, ')');
  if (s == NULL || s[1] != ' ') return -1;
  s += 2;
  if (*s == 'Z' || *s == 'X') return -1;
  /* s is field 3 (state); the start time is field 22. */
  for (int field = 3; field < 22; field++) {
    s = strchr(s, ' ');
    if (s == NULL) return -1;
    s++;
  }
  unsigned long long v = 0;
  if (*s < '0' || *s > '9') return -1;
  for (; *s >= '0' && *s <= '9'; s++) v = v * 10 + (unsigned)(*s - '0');
  *start = v;
  return 0;
}

/* The process runs and, when `start` is given, is the one that started then. */
static int alive(pid_t pid, const unsigned long long *start) {
  unsigned long long now;
  return proc_start(pid, &now) == 0 && (start == NULL || now == *start);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A pidfd for pid if it is (still) the process that started at `start`; -1 and
 * errno ESRCH when that process is gone, other errnos when pidfds do not work. */
static int pinned_pidfd(pid_t pid, const unsigned long long *start) {
  int fd = pidfd_open(pid);
  if (fd < 0) return -1;
  if (!alive(pid, start)) {
    close(fd);
    errno = ESRCH;
    return -1;
  }
  return fd;
}

/* The owner's end, noticed: a sandbox with artifacts is asked to shut down and gets a deadline. */
static long long owner_ended(const struct reaper_params *p, struct reaper_owner *owner) {
  owner->gone = 1;
  if (p->art_to == NULL) return -1;
  reaper_touch_host_exit(p->root, p->id);
  return now_ms() + REAPER_HOST_EXIT_GRACE_S * 1000LL;
}

/* Old kernels: /proc/pid/stat once a second; the pid is signalled only after its start time is re-checked. */
static void wait_polling(const struct reaper_params *p, struct reaper_owner *owner, long long kill_at) {
  while (alive(p->pid, &p->start)) {
    if (owner->pid != 0 && !owner->gone && !alive(owner->pid, &owner->start)) kill_at = owner_ended(p, owner);
    if (kill_at >= 0 && now_ms() >= kill_at && alive(p->pid, &p->start)) kill(p->pid, SIGKILL);
    struct timespec second = {1, 0};
    nanosleep(&second, NULL);
  }
}

void reaper_wait(const struct reaper_params *p, struct reaper_owner *owner) {
  owner->pid = p->owner;
  owner->pidfd = -1;
  owner->gone = 0;
  long long kill_at = -1;
  if (owner->pid != 0) {
    /* Its identity is the process running now (the host that just started us). */
    if (proc_start(owner->pid, &owner->start) != 0) {
      kill_at = owner_ended(p, owner);
    } else {
      owner->pidfd = pinned_pidfd(owner->pid, &owner->start);
      if (owner->pidfd < 0 && errno == ESRCH) kill_at = owner_ended(p, owner);
    }
  }
  int sandbox = pinned_pidfd(p->pid, &p->start);
  if (sandbox < 0) {
    if (errno == ESRCH) return;
    wait_polling(p, owner, kill_at);
    return;
  }
  if (owner->pid != 0 && !owner->gone && owner->pidfd < 0) {
    /* pidfds work for one and not the other: nothing sensible left but polling. */
    close(sandbox);
    wait_polling(p, owner, kill_at);
    return;
  }
  for (;;) {
    struct pollfd fds[2] = {{.fd = sandbox, .events = POLLIN}, {.fd = owner->pidfd, .events = POLLIN}};
    nfds_t nfds = owner->pidfd >= 0 ? 2 : 1;
    int timeout = -1;
    if (kill_at >= 0) {
      long long left = kill_at - now_ms();
      timeout = left < 0 ? 0 : (int)left;
    }
    int n = poll(fds, nfds, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      /* ENOMEM and the like: try again a little later rather than spin. */
      struct timespec pause = {1, 0};
      nanosleep(&pause, NULL);
      continue;
    }
    if (fds[0].revents != 0) break;
    if (nfds == 2 && fds[1].revents != 0) {
      kill_at = owner_ended(p, owner);
      /* Closed only now: an observer that sees one pidfd left knows the sandbox was asked. */
      close(owner->pidfd);
      owner->pidfd = -1;
    }
    if (kill_at >= 0 && now_ms() >= kill_at) {
      syscall(SYS_pidfd_send_signal, sandbox, SIGKILL, NULL, 0);
      kill_at = -1;
    }
  }
  close(sandbox);
}

static int entry_exists(const struct reaper_params *p) {
  char path[4200];
  struct stat st;
  if (snprintf(path, sizeof path, "%s/%s", p->root, p->id) >= (int)sizeof path) return 0;
  return lstat(path, &st) == 0 || errno != ENOENT;
}

void reaper_defer_to_owner(const struct reaper_params *p, struct reaper_owner *owner) {
  if (owner->pid == 0) return;
  long long deadline = now_ms() + REAPER_OWNER_GRACE_MS;
  int pause = 10;
  while (!reaper_owner_gone(owner) && entry_exists(p)) {
    long long left = deadline - now_ms();
    if (left <= 0) return;
    int timeout = left < pause ? (int)left : pause;
    if (owner->pidfd >= 0) {
      struct pollfd fd = {.fd = owner->pidfd, .events = POLLIN};
      poll(&fd, 1, timeout);
    } else {
      struct timespec ts = {timeout / 1000, (timeout % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (pause < 1000) pause *= 2;
  }
}

int reaper_owner_gone(struct reaper_owner *owner) {
  if (owner->pid == 0 || owner->gone) return owner->gone;
  if (owner->pidfd >= 0) {
    struct pollfd fd = {.fd = owner->pidfd, .events = POLLIN};
    owner->gone = poll(&fd, 1, 0) > 0;
  } else {
    owner->gone = !alive(owner->pid, &owner->start);
  }
  return owner->gone;
}
