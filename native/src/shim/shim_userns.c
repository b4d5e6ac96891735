#define _GNU_SOURCE
#include "shim_userns.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  if (n == (ssize_t)strlen(text)) return 0;
  errno = n < 0 ? e : EIO;
  return -1;
}

static void join_lines(const char *const *lines, char *out, size_t size) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; lines[i] != NULL && len < size; i++)
    len += (size_t)snprintf(out + len, size - len, "%s\n", lines[i]);
}

/* The helper stays in the parent namespace: only there may a process map
 * more than its own uid (a root host's subordinate range). */
static int write_maps(pid_t target, const char *uid_text, const char *gid_text, const char **step) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/setgroups", (int)target);
  *step = "setgroups";
  if (write_file(path, "deny") < 0 && errno != ENOENT) return -1;
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)target);
  *step = "uid_map";
  if (write_file(path, uid_text) < 0) return -1;
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)target);
  *step = "gid_map";
  return write_file(path, gid_text);
}

/* Runs newuidmap or newgidmap for target with the map's lines as its arguments
 * ("inside outside count" each); they check the ranges against /etc/subuid
 * and /etc/subgid. 0, or -1 with errno. */
static int run_map_helper(const char *helper, pid_t target, const char *const *map) {
  char pid_text[16], words[512];
  char *argv[2 + 3 * 5 + 1];
  int argc = 0;
  snprintf(pid_text, sizeof pid_text, "%d", (int)target);
  argv[argc++] = (char *)helper;
  argv[argc++] = pid_text;
  size_t used = 0;
  for (size_t i = 0; map[i] != NULL; i++) {
    size_t len = strlen(map[i]);
    if (used + len + 1 > sizeof words) {
      errno = E2BIG;
      return -1;
    }
    char *line = memcpy(words + used, map[i], len + 1);
    used += len + 1;
    for (char *save = NULL, *w = strtok_r(line, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
      if (argc == (int)(sizeof argv / sizeof argv[0]) - 1) {
        errno = E2BIG;
        return -1;
      }
      argv[argc++] = w;
    }
  }
  argv[argc] = NULL;
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    execv(helper, argv);
    _exit(127);
  }
  int status;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  errno = EPERM;
  return -1;
}

/* The helpers write both maps; setgroups stays as it is (newgidmap decides). */
static int map_with_helpers(pid_t target, const char *const *uid_map, const char *const *gid_map, const char *newuidmap,
                            const char *newgidmap, const char **step) {
  *step = "the uid map (newuidmap)";
  if (run_map_helper(newuidmap, target, uid_map) < 0) return -1;
  *step = "the gid map (newgidmap)";
  return run_map_helper(newgidmap, target, gid_map);
}

int shim_enter_userns(const char *const *uid_map, const char *const *gid_map, const char *newuidmap,
                      const char *newgidmap, char *error, size_t size) {
  char uid_text[512], gid_text[512];
  join_lines(uid_map, uid_text, sizeof uid_text);
  join_lines(gid_map, gid_text, sizeof gid_text);
  /* libkrun opens /dev/kvm itself, after this: keep its group, the only way a
   * mapped-down root still reaches it (a user keeps the groups it has). */
  struct stat kvm;
  if (geteuid() == 0 && stat("/dev/kvm", &kvm) == 0 && setgroups(1, &kvm.st_gid) < 0) {
    snprintf(error, size, "setgroups(kvm gid %u): %s", (unsigned)kvm.st_gid, strerror(errno));
    return -1;
  }
  int parent_death = 0;
  prctl(PR_GET_PDEATHSIG, &parent_death);
  pid_t parent = getppid();

  int go[2], done[2];
  if (pipe2(go, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) {
    snprintf(error, size, "pipe: %s", strerror(errno));
    return -1;
  }
  pid_t self = getpid();
  pid_t helper = fork();
  if (helper < 0) {
    snprintf(error, size, "fork: %s", strerror(errno));
    return -1;
  }
  if (helper == 0) {
    char byte;
    close(go[1]);
    int status = 0;
    const char *step = "wait";
    if (read(go[0], &byte, 1) != 1)
      status = EPIPE;
    else if (newuidmap != NULL ? map_with_helpers(self, uid_map, gid_map, newuidmap, newgidmap, &step) < 0
                               : write_maps(self, uid_text, gid_text, &step) < 0)
      status = errno;
    char report[160];
    snprintf(report, sizeof report, "%c%s", status == 0 ? 0 : 1, step);
    ssize_t ignored = write(done[1], report, status == 0 ? 1 : strlen(report + 1) + 1);
    (void)ignored;
    _exit(status == 0 ? 0 : (status & 0x7f) | 0x80);
  }
  close(go[0]);
  close(done[1]);
  int unshare_errno = unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
  ssize_t ignored = write(go[1], unshare_errno == 0 ? "g" : "", unshare_errno == 0 ? 1 : 0);
  (void)ignored;
  close(go[1]);
  char report[160] = {0};
  ssize_t got = read(done[0], report, sizeof report - 1);
  close(done[0]);
  int status;
  while (waitpid(helper, &status, 0) < 0 && errno == EINTR) {
  }
  if (unshare_errno != 0) {
    errno = unshare_errno;
    snprintf(error, size, "unshare(CLONE_NEWUSER): %s", strerror(errno));
    return -1;
  }
  if (got != 1 || report[0] != 0) {
    int e = WIFEXITED(status) && (WEXITSTATUS(status) & 0x80) ? WEXITSTATUS(status) & 0x7f : EIO;
    errno = e;
    snprintf(error, size, "writing %s of the VM's user namespace (uid map \"%.60s\"): %s",
             got > 1 ? report + 1 : "the maps", uid_map[0] != NULL ? uid_map[0] : "", strerror(e));
    return -1;
  }
  if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0) {
    snprintf(error, size, "becoming uid/gid 0 of the VM's user namespace (is 0 mapped?): %s", strerror(errno));
    return -1;
  }
  /* A credential change clears the parent-death signal: arm it again. */
  if (parent_death != 0) {
    prctl(PR_SET_PDEATHSIG, parent_death);
    if (getppid() != parent) raise(parent_death);
  }
  return 0;
}
