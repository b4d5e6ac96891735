#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reaper_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "reaper_fs.h"

/* krunbox makes two levels (the sandbox, its agent and workload leaves); a workload may add more. */
#define MAX_DEPTH 32

/* SIGKILL to every pid in this cgroup's cgroup.procs (one decimal a line). */
static void kill_listed(int dirfd) {
  int fd = openat(dirfd, "cgroup.procs", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  long pid = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        if (pid < 100000000) pid = pid * 10 + (buf[i] - '0');
      } else {
        if (pid > 1 && pid != (long)getpid()) kill((pid_t)pid, SIGKILL);
        pid = 0;
      }
    }
  }
  if (pid > 1 && pid != (long)getpid()) kill((pid_t)pid, SIGKILL);
  close(fd);
}

/* Cgroup v2 (Linux 5.14): the whole tree at once, forks in flight included. */
static void kill_all(int dirfd) {
  int fd = openat(dirfd, "cgroup.kill", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  if (write(fd, "1", 1) < 0) {
    /* v1 has no such file; anything else: cgroup.procs below still applies */
  }
  close(fd);
}

/* Depth first: the processes of each cgroup, then its child cgroups, removed bottom-up. Takes fd. */
static void clear_tree(int fd, int depth) {
  kill_listed(fd);
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
    if (depth >= MAX_DEPTH) continue;
    int sub = reaper_open_dir(dirfd(d), e->d_name);
    if (sub < 0) continue;
    clear_tree(sub, depth + 1);
    unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
  }
  closedir(d);
}

void reaper_cgroup_remove(const char *dir, int attempts, long pause_ns) {
  for (int attempt = 0; attempt < attempts; attempt++) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    kill_all(fd);
    clear_tree(fd, 0);
    if (rmdir(dir) == 0 || errno == ENOENT) return;
    struct timespec pause = {0, pause_ns};
    nanosleep(&pause, NULL);
  }
}
