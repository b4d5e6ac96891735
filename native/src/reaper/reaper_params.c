#define _GNU_SOURCE
#include "reaper_params.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far above what the host writes (paths, a prefix with at most 4 KiB of metadata). */
#define PARAMS_MAX_BYTES (64 * 1024)
#define CGROUP_ROOT "/sys/fs/cgroup/"

/* Only files the host would write: `.reaper-*`, regular, ours, private. */
static int open_params(const char *file) {
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  if (strncmp(base, ".reaper-", 8) != 0) return -1;
  int fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0 ||
      st.st_size > PARAMS_MAX_BYTES) {
    close(fd);
    return -1;
  }
  return fd;
}

/* The whole file, NUL-terminated; NULL when unreadable or over the cap. */
static char *read_all(int fd, size_t *length) {
  char *buf = malloc(PARAMS_MAX_BYTES + 1);
  if (buf == NULL) return NULL;
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, PARAMS_MAX_BYTES + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (r > 0 && n + (size_t)r > PARAMS_MAX_BYTES)) {
      free(buf);
      return NULL;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  *length = n;
  return buf;
}

/* Decimal digits only, at most `max`; 0 on success. */
static int parse_number(const char *s, unsigned long long max, unsigned long long *out) {
  if (*s == '\0') return -1;
  unsigned long long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    unsigned d = (unsigned)(*s - '0');
    if (v > (max - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

static int parse_pid(const char *s, pid_t *out) {
  unsigned long long v;
  if (parse_number(s, INT_MAX, &v) != 0 || v == 0) return -1;
  *out = (pid_t)v;
  return 0;
}

/* xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx in lower-case hex: it becomes file names. */
static int valid_id(const char *s) {
  if (strlen(s) != REAPER_ID_LEN) return 0;
  for (int i = 0; i < REAPER_ID_LEN; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
  }
  return 1;
}

/* Absolute, no "." or ".." component, shorter than PATH_MAX. */
static int valid_path(const char *s) {
  if (s[0] != '/' || strlen(s) >= PATH_MAX) return 0;
  for (const char *c = s; (c = strchr(c, '/')) != NULL; c++) {
    if (c[1] == '.' && (c[2] == '/' || c[2] == '\0')) return 0;
    if (c[1] == '.' && c[2] == '.' && (c[3] == '/' || c[3] == '\0')) return 0;
  }
  return 1;
}

/* Its processes get SIGKILL: only a sandbox's own, <root>[/<controller>]/krunbox/<id>[/…]. */
static int valid_cgroup(const char *s, const char *id) {
  if (!valid_path(s) || strncmp(s, CGROUP_ROOT, strlen(CGROUP_ROOT)) != 0) return 0;
  for (const char *k = s; (k = strstr(k, "/krunbox/")) != NULL; k++) {
    const char *rest = k + strlen("/krunbox/");
    if (strncmp(rest, id, REAPER_ID_LEN) == 0 && (rest[REAPER_ID_LEN] == '/' || rest[REAPER_ID_LEN] == '\0')) return 1;
  }
  return 0;
}

/* The history line's head, as JSON.stringify({ id, ... }) starts it: no control characters. */
static int valid_prefix(const char *s, const char *id) {
  static const char head[] = "{\"id\":\"";
  if (strncmp(s, head, sizeof head - 1) != 0 || strncmp(s + sizeof head - 1, id, REAPER_ID_LEN) != 0 ||
      s[sizeof head - 1 + REAPER_ID_LEN] != '"')
    return 0;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c < 0x20 || *c == 0x7f) return 0;
  return 1;
}

static int parse(char *text, size_t length, struct reaper_params *p) {
  /* Every line ends in '\n' (a file cut short does not) and none holds a NUL. */
  if (length == 0 || text[length - 1] != '\n' || memchr(text, '\0', length) != NULL) return -1;
  char *lines[9 + REAPER_MAX_CGROUPS + 1];
  size_t n = 0;
  for (char *line = text; line < text + length;) {
    char *nl = strchr(line, '\n');
    *nl = '\0';
    if (n == sizeof lines / sizeof lines[0]) return -1;
    lines[n++] = line;
    line = nl + 1;
  }
  /* Nine fields, the cgroup dirs, then "end" as the very last line. */
  if (n < 10 || strcmp(lines[n - 1], "end") != 0) return -1;
  for (size_t i = 9; i < n - 1; i++)
    if (strcmp(lines[i], "end") == 0) return -1;

  p->root = lines[0];
  if (!valid_path(p->root) || !valid_id(lines[1])) return -1;
  memcpy(p->id, lines[1], REAPER_ID_LEN + 1);
  if (parse_pid(lines[2], &p->pid) != 0 || parse_number(lines[3], ULLONG_MAX, &p->start) != 0) return -1;
  p->owner = 0;
  if (lines[4][0] != '\0' && parse_pid(lines[4], &p->owner) != 0) return -1;
  p->prefix = lines[5];
  if (!valid_prefix(p->prefix, p->id)) return -1;
  /* Artifacts: a directory and a cap, or neither. */
  p->art_to = NULL;
  p->art_max = 0;
  if ((lines[6][0] == '\0') != (lines[7][0] == '\0')) return -1;
  if (lines[6][0] != '\0') {
    if (!valid_path(lines[6]) || parse_number(lines[7], ULLONG_MAX, &p->art_max) != 0) return -1;
    p->art_to = lines[6];
  }
  /* The identity of the artifacts dir: only with one, as <dev>:<ino>. */
  p->art_same = 0;
  if (lines[8][0] != '\0') {
    char *colon = strchr(lines[8], ':');
    if (p->art_to == NULL || colon == NULL) return -1;
    *colon = '\0';
    if (parse_number(lines[8], ULLONG_MAX, &p->art_dev) != 0 || parse_number(colon + 1, ULLONG_MAX, &p->art_ino) != 0)
      return -1;
    p->art_same = 1;
  }
  p->n_cgroups = 0;
  for (size_t i = 9; i < n - 1; i++) {
    if (!valid_cgroup(lines[i], p->id)) return -1;
    p->cgroups[p->n_cgroups++] = lines[i];
  }
  return 0;
}

int reaper_params_load(const char *file, struct reaper_params *out) {
  int fd = open_params(file);
  if (fd < 0) return -1;
  size_t length = 0;
  char *text = read_all(fd, &length);
  close(fd);
  /* Read (or unreadable): it has served, whatever it holds. */
  unlink(file);
  if (text == NULL) return -1;
  if (parse(text, length, out) != 0) {
    free(text);
    return -1;
  }
  out->text = text;
  return 0;
}
