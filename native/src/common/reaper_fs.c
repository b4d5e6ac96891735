#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reaper_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A tree deeper than this keeps its depths (one fd per level; the next Runtime's sweep removes them). */
#define MAX_DEPTH 256

int reaper_open_dir(int dirfd, const char *name) {
  return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* A regular file to read, never through a link (O_NONBLOCK: a FIFO in its place cannot block us). */
static int open_regular(int dirfd, const char *name, struct stat *st) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    close(fd);
    return -1;
  }
  return fd;
}

int reaper_write_all(int fd, const char *data, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, data, length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    data += n;
    length -= (size_t)n;
  }
  return 0;
}

void reaper_touch_host_exit(const char *root, const char *id) {
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return;
  int dir = reaper_open_dir(rootfd, id);
  int ctl = dir >= 0 ? reaper_open_dir(dir, "ctl") : -1;
  /* O_EXCL: an existing name, a planted link included, is left as it is. */
  int fd = ctl >= 0 ? openat(ctl, "host-exit", O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK | O_CLOEXEC, 0600) : -1;
  if (fd >= 0) close(fd);
  if (ctl >= 0) close(ctl);
  if (dir >= 0) close(dir);
  close(rootfd);
}

long reaper_read_small(int from_dir, const char *name, char *buf, size_t max) {
  struct stat st;
  int fd = open_regular(from_dir, name, &st);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n < max) {
    ssize_t r = read(fd, buf + n, max - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  return (long)n;
}

int reaper_copy_capped(int from_dir, const char *name, int to_dir, const char *tmp, const char *dest,
                       unsigned long long max, unsigned long long *size) {
  static char buf[128 * 1024];
  struct stat st;
  int in = open_regular(from_dir, name, &st);
  if (in < 0) return -1;
  *size = (unsigned long long)st.st_size;
  if (*size > max) {
    close(in);
    return REAPER_OVER_CAP;
  }
  /* O_EXCL: a fresh file; a link or a file planted at the name (another user's) is never opened. */
  int out = openat(to_dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int ok = out >= 0;
  unsigned long long left = max;
  for (;;) {
    /* One byte past the cap tells a file that grew from one that ended there. */
    ssize_t n = ok ? read(in, buf, left < sizeof buf ? (size_t)left + 1 : sizeof buf) : 0;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (unsigned long long)n > left) ok = 0;
    if (n <= 0 || !ok) break;
    ok = reaper_write_all(out, buf, (size_t)n) == 0;
    left -= (unsigned long long)n;
  }
  close(in);
  if (out >= 0) ok = fsync(out) == 0 && close(out) == 0 && ok;
  if (ok && renameat(to_dir, tmp, to_dir, dest) == 0) return 0;
  if (out >= 0) unlinkat(to_dir, tmp, 0);
  return -1;
}

void reaper_write_new(int dirfd, const char *tmp, const char *dest, const char *data, size_t length) {
  int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  int ok = reaper_write_all(fd, data, length) == 0;
  ok = close(fd) == 0 && ok;
  /* link(2), unlike rename(2), fails with EEXIST: a line already there stays. */
  if (ok) linkat(dirfd, tmp, dirfd, dest, 0);
  unlinkat(dirfd, tmp, 0);
}

/* Takes ownership of fd. */
static void empty_dir(int fd, dev_t dev, int depth) {
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    if (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) {
      int sub = reaper_open_dir(dirfd(d), name);
      if (sub >= 0) {
        struct stat st;
        /* Another filesystem mounted here is not ours to empty. */
        if (depth < MAX_DEPTH && fstat(sub, &st) == 0 && st.st_dev == dev) {
          empty_dir(sub, dev, depth + 1);
          unlinkat(dirfd(d), name, AT_REMOVEDIR);
        } else {
          close(sub);
        }
        continue;
      }
      /* ENOTDIR or ELOOP: not a directory after all (a link, say): unlinked below. */
      if (errno != ENOTDIR && errno != ELOOP) continue;
    }
    unlinkat(dirfd(d), name, 0);
  }
  closedir(d);
}

void reaper_empty_dir(int dirfd) {
  struct stat st;
  int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return;
  }
  empty_dir(fd, st.st_dev, 0);
}

void reaper_temp_name(char *out, size_t cap, const char *id, const char *kind) {
  unsigned char r[8] = {0};
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = getrandom(r + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  /* Without randomness the name falls back to the pid and the clock: still O_EXCL, only guessable. */
  if (got < sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long v = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 32);
    memcpy(r, &v, sizeof r);
  }
  snprintf(out, cap, ".%s.%s.%02x%02x%02x%02x%02x%02x%02x%02x.tmp", id, kind, r[0], r[1], r[2], r[3], r[4], r[5], r[6],
           r[7]);
}
