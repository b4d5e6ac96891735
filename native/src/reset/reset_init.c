/*
 * What a lease can change of the agent, PID 1 of the sandbox, and the reset puts back. Commands run as the agent's
 * uid, so from inside (tried, test/security/pool-reuse-init.test.ts) they can write its /proc oom_score_adj (oom_adj
 * is the same value), its autogroup's nice and its coredump_filter: restored here, from the host's side (lowering
 * the autogroup's nice takes CAP_SYS_NICE in the host's namespace). They cannot change its resource limits (the
 * agent's saved gid is its own: agent/boot/caps.go), which could not be put back anyway (raising a hard limit takes
 * CAP_SYS_RESOURCE in the host's namespace, which the host's root may lack): the reset checks they are the
 * recorded ones and fails otherwise. Nor can they change its threads' nice, policy, affinity or I/O priority (EPERM:
 * the agent holds capabilities its commands lack, which the kernel's cap_safe_nice requires) or its timer slack
 * (CAP_SYS_NICE): left alone.
 *
 * The reference is read on the host, from the host's /proc, before the member's first lease, and handed back by the
 * host to each reset: nothing the sandbox can write is ever read as the state to return to.
 */
#define _GNU_SOURCE
#include "reset_init.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "reset_ipc.h"

struct init_state {
  struct rlimit limits[RLIM_NLIMITS];
  int oom_score_adj;
  int has_autogroup;  // a kernel without CONFIG_SCHED_AUTOGROUP has no /proc/<pid>/autogroup
  int autogroup_nice;
  unsigned long coredump_filter;
};

/** The text of /proc/<pid>/<name>, or NULL when it does not exist. */
static char *read_proc(int proc_fd, pid_t pid, const char *name, char *buf, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "%d/%s", pid, name);
  int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return NULL;
  if (fd < 0) reset_fail("open /proc/%s: %s", path, strerror(errno));
  ssize_t n = read(fd, buf, size - 1);
  int err = errno;
  close(fd);
  if (n < 0) reset_fail("read /proc/%s: %s", path, strerror(err));
  buf[n] = 0;
  return buf;
}

static void write_proc(int proc_fd, pid_t pid, const char *name, const char *value) {
  char path[64];
  snprintf(path, sizeof path, "%d/%s", pid, name);
  int fd = openat(proc_fd, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) reset_fail("open /proc/%s: %s", path, strerror(errno));
  ssize_t n = write(fd, value, strlen(value));
  int err = errno;
  close(fd);
  if (n < 0) reset_fail("write %s to /proc/%s: %s", value, path, strerror(err));
}

/** A column of /proc/<pid>/limits: "unlimited" or a number. */
static int limit_value(const char *text, rlim_t *out) {
  if (strcmp(text, "unlimited") == 0) {
    *out = RLIM_INFINITY;
    return 1;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  *out = (rlim_t)v;
  return errno == 0 && end != text && *end == 0;
}

/** /proc/<pid>/limits: a header, then one line per resource in the kernel's order (RLIMIT_CPU first), its name in
 * the first 26 columns. Read there: prlimit() of the agent needs its ids or CAP_SYS_RESOURCE, which the host's root
 * may lack. */
static void read_limits(int proc_fd, pid_t pid, struct rlimit *limits) {
  char buf[4096], soft[32], hard[32];
  if (!read_proc(proc_fd, pid, "limits", buf, sizeof buf)) reset_fail("no limits of %d", pid);
  char *line = strchr(buf, '\n');
  int r = 0;
  for (; line && line[1] && r < RLIM_NLIMITS; r++) {
    line++;
    if (strlen(line) < 26 || sscanf(line + 26, "%31s %31s", soft, hard) != 2 ||
        !limit_value(soft, &limits[r].rlim_cur) || !limit_value(hard, &limits[r].rlim_max))
      reset_fail("unreadable limit %d of %d", r, pid);
    line = strchr(line, '\n');
  }
  if (r != RLIM_NLIMITS) reset_fail("%d limits of %d listed, not %d", r, pid, RLIM_NLIMITS);
}

static void read_state(int proc_fd, pid_t pid, struct init_state *s) {
  char buf[256];
  memset(s, 0, sizeof *s);
  read_limits(proc_fd, pid, s->limits);
  if (!read_proc(proc_fd, pid, "oom_score_adj", buf, sizeof buf) || sscanf(buf, "%d", &s->oom_score_adj) != 1)
    reset_fail("no oom_score_adj of %d", pid);
  if (!read_proc(proc_fd, pid, "coredump_filter", buf, sizeof buf) || sscanf(buf, "%lx", &s->coredump_filter) != 1)
    reset_fail("no coredump_filter of %d", pid);
  // "/autogroup-<id> nice <n>"
  s->has_autogroup = read_proc(proc_fd, pid, "autogroup", buf, sizeof buf) != NULL;
  if (s->has_autogroup && sscanf(buf, "%*s nice %d", &s->autogroup_nice) != 1)
    reset_fail("unreadable autogroup of %d: %s", pid, buf);
}

void init_state_record(int proc_fd, pid_t pid, char *out, size_t size) {
  struct init_state s;
  read_state(proc_fd, pid, &s);
  size_t n = (size_t)snprintf(out, size, "limits=");
  for (int r = 0; r < RLIM_NLIMITS && n < size; r++)
    n += (size_t)snprintf(out + n, size - n, "%s%llu:%llu", r ? "," : "", (unsigned long long)s.limits[r].rlim_cur,
                          (unsigned long long)s.limits[r].rlim_max);
  if (n < size)
    n += (size_t)snprintf(out + n, size - n, ";oom_score_adj=%d;coredump_filter=%lx;autogroup=", s.oom_score_adj,
                          s.coredump_filter);
  if (n < size && s.has_autogroup) n += (size_t)snprintf(out + n, size - n, "%d", s.autogroup_nice);
  if (n < size && !s.has_autogroup) n += (size_t)snprintf(out + n, size - n, "none");
  if (n >= size) reset_fail("the record of PID 1 is longer than %zu bytes", size);
}

/** Reads `literal` at *p, moving past it; 0 if it is not there. */
static int take(const char **p, const char *literal) {
  size_t n = strlen(literal);
  if (strncmp(*p, literal, n) != 0) return 0;
  *p += n;
  return 1;
}

/** Reads an unsigned decimal (base 10) or hexadecimal (base 16) number at *p; 0 if there is none. */
static int take_number(const char **p, int base, unsigned long long *out) {
  if (**p < '0' || (base == 10 && **p > '9')) return 0;
  char *end;
  errno = 0;
  *out = strtoull(*p, &end, base);
  if (errno != 0 || end == *p) return 0;
  *p = end;
  return 1;
}

static int take_int(const char **p, int *out) {
  int negative = take(p, "-");
  unsigned long long v;
  if (!take_number(p, 10, &v) || v > 1000000) return 0;
  *out = negative ? -(int)v : (int)v;
  return 1;
}

/** Parses what init_state_record made; 0 on anything else. */
static int parse_state(const char *text, struct init_state *s) {
  const char *p = text;
  unsigned long long cur, max, filter;
  memset(s, 0, sizeof *s);
  if (!take(&p, "limits=")) return 0;
  for (int r = 0; r < RLIM_NLIMITS; r++) {
    if ((r && !take(&p, ",")) || !take_number(&p, 10, &cur) || !take(&p, ":") || !take_number(&p, 10, &max)) return 0;
    if (cur > max) return 0;
    s->limits[r] = (struct rlimit){(rlim_t)cur, (rlim_t)max};
  }
  if (!take(&p, ";oom_score_adj=") || !take_int(&p, &s->oom_score_adj)) return 0;
  if (!take(&p, ";coredump_filter=") || !take_number(&p, 16, &filter)) return 0;
  s->coredump_filter = (unsigned long)filter;
  if (!take(&p, ";autogroup=")) return 0;
  s->has_autogroup = !take(&p, "none");
  if (s->has_autogroup && !take_int(&p, &s->autogroup_nice)) return 0;
  return *p == 0;
}

int init_state_valid(const char *reference) {
  struct init_state s;
  return parse_state(reference, &s);
}

/** Puts back what differs (the autogroup's nice takes global locks; the OOM score's write also sets its floor);
 * returns how many it wrote. */
static int apply(int proc_fd, pid_t pid, const struct init_state *want, const struct init_state *now) {
  char value[32];
  int writes = 0;
  if (want->oom_score_adj != now->oom_score_adj) {
    writes++;
    snprintf(value, sizeof value, "%d", want->oom_score_adj);
    write_proc(proc_fd, pid, "oom_score_adj", value);
  }
  if (want->coredump_filter != now->coredump_filter) {
    writes++;
    snprintf(value, sizeof value, "0x%lx", want->coredump_filter);
    write_proc(proc_fd, pid, "coredump_filter", value);
  }
  if (want->has_autogroup && now->has_autogroup && want->autogroup_nice != now->autogroup_nice) {
    writes++;
    snprintf(value, sizeof value, "%d", want->autogroup_nice);
    write_proc(proc_fd, pid, "autogroup", value);
  }
  return writes;
}

void init_state_restore(int proc_fd, pid_t pid, const char *reference) {
  struct init_state want, now;
  if (!parse_state(reference, &want)) reset_fail("the recorded state of PID 1 is malformed");
  read_state(proc_fd, pid, &now);
  if (apply(proc_fd, pid, &want, &now) > 0) read_state(proc_fd, pid, &now);
  for (int r = 0; r < RLIM_NLIMITS; r++)
    if (now.limits[r].rlim_cur != want.limits[r].rlim_cur || now.limits[r].rlim_max != want.limits[r].rlim_max)
      reset_fail("limit %d of PID 1 is no longer the recorded one", r);
  if (now.oom_score_adj != want.oom_score_adj || now.coredump_filter != want.coredump_filter ||
      now.has_autogroup != want.has_autogroup || (want.has_autogroup && now.autogroup_nice != want.autogroup_nice))
    reset_fail("the OOM score, coredump filter or autogroup of PID 1 is not the recorded one after its restore");
}
