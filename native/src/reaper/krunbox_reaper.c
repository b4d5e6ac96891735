/*
 * krunbox-reaper: one small process per sandbox that outlives the host
 * process. It waits for the sandbox process (bwrap or krun-shim) to end, by TTL,
 * idle timeout, crash, or its host's death taking it along, then removes what
 * the sandbox had on the host: its cgroups, its artifacts copied out first, and
 * its state directory, keeping a history line with the reason.
 *
 *   krunbox-reaper <state root>/.reaper-<random>
 *
 * The parameters come in that file (reaper_params.h), so that nothing on the
 * command line or in the environment names the sandbox. The host starts it in
 * a session of its own and never waits for it; when the host ends a sandbox
 * itself it removes the state directory, and the reaper, which gives a living
 * host the time to, then finds nothing to do. It never forks or execs: one task per sandbox, asleep in poll(2) until
 * the sandbox ends (reaper_wait.h). lib/reaper.ts starts it; lib/artifacts.ts
 * and lib/state.ts do the same steps on the host's side, with the same names.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/reaper_cgroup.h"
#include "../common/reaper_fs.h"
#include "reaper_params.h"
#include "reaper_wait.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define EXIT_RECORD_MAX (64 * 1024)
#define MANIFEST_MAX (1024 * 1024)

/* The host's manifest for a sandbox killed before its shutdown archived (lib/artifacts.ts). */
static const char S205_MANIFEST[] =
    "{\"files\":[],\"bytes\":0,\"truncated\":false,\"error\":\"S205\",\"message\":\"the sandbox ended without "
    "archiving its artifacts (killed before its shutdown ran)\"}";

/* Reasons the agent may record in ctl/exit.json, in the order they are looked for. */
static const char *const RECORDED_REASONS[] = {"ttl_expired", "idle_expired", "user_killed", "host_exit"};

/* Nothing of the host's (its sockets, pipes, files) is held open while the sandbox lives. */
static void close_inherited_fds(void) {
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) return;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    int fd = atoi(e->d_name);
    if (fd >= 3 && fd != dirfd(dir)) close(fd);
  }
  closedir(dir);
}

/* crashed, or host_exit when the owner is gone, unless the agent recorded why it ended. */
static const char *end_reason(int ctl, int owner_gone) {
  static char record[EXIT_RECORD_MAX + 1];
  const char *reason = owner_gone ? "host_exit" : "crashed";
  long n = ctl >= 0 ? reaper_read_small(ctl, "exit.json", record, EXIT_RECORD_MAX) : -1;
  for (size_t i = 0; n > 0 && i < sizeof RECORDED_REASONS / sizeof RECORDED_REASONS[0]; i++) {
    char needle[48];
    int len = snprintf(needle, sizeof needle, "\"reason\":\"%s\"", RECORDED_REASONS[i]);
    if (memmem(record, (size_t)n, needle, (size_t)len) != NULL) return RECORDED_REASONS[i];
  }
  return reason;
}

/* s as the inside of a JSON string, escaped as JSON.stringify does; 0 when out is too small. */
static int json_escape(const char *s, char *out, size_t cap) {
  size_t n = 0;
  for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
    char piece[8];
    switch (*c) {
      case '"':
        strcpy(piece, "\\\"");
        break;
      case '\\':
        strcpy(piece, "\\\\");
        break;
      case '\b':
        strcpy(piece, "\\b");
        break;
      case '\f':
        strcpy(piece, "\\f");
        break;
      case '\n':
        strcpy(piece, "\\n");
        break;
      case '\r':
        strcpy(piece, "\\r");
        break;
      case '\t':
        strcpy(piece, "\\t");
        break;
      default:
        if (*c < 0x20) {
          snprintf(piece, sizeof piece, "\\u%04x", *c);
        } else {
          piece[0] = (char)*c;
          piece[1] = '\0';
        }
    }
    size_t len = strlen(piece);
    if (n + len >= cap) return 0;
    memcpy(out + n, piece, len);
    n += len;
  }
  out[n] = '\0';
  return 1;
}

/* The host's manifest for a file over its cap (lib/artifacts.ts: S216, the same words). */
static void write_over_cap_manifest(int to, const char *tmp, const char *dest, const char *to_path,
                                    unsigned long long size, unsigned long long cap) {
  static char path[PATH_MAX * 6 + 1];
  static char manifest[sizeof path + 256];
  if (!json_escape(to_path, path, sizeof path)) return;
  int n = snprintf(manifest, sizeof manifest,
                   "{\"files\":[],\"bytes\":0,\"truncated\":false,\"error\":\"S216\",\"message\":\"%s: cannot copy the "
                   "artifacts there: the archive is %llu bytes, over the cap of %llu\"}",
                   path, size, cap);
  if (n > 0 && (size_t)n < sizeof manifest) reaper_write_new(to, tmp, dest, manifest, (size_t)n);
}

/* The agent's archive and manifest, copied out under this process's own temporary names (the
 * host may be collecting at the same time). Either over its cap: no archive, and the host's
 * S216 manifest instead (never a part of it). No archive and no exit record, or an archive
 * without its manifest: the sandbox was killed before its shutdown finished archiving (S205),
 * as lib/artifacts.ts says too. Neither replaces a manifest already there. */
static void collect_artifacts(const struct reaper_params *p, int ctl) {
  /* `to` may be writable by other users: its last component is never a link, it must be the very
   * directory seen at create (a parent swapped for a link since leads elsewhere: refused, and the
   * host's record then says S216), and every name in it is created fresh (O_EXCL) under an
   * unpredictable name, then renamed or linked relative to this fd. */
  int to = open(p->art_to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (to < 0) return;
  struct stat seen;
  if (p->art_same && (fstat(to, &seen) != 0 || (unsigned long long)seen.st_dev != p->art_dev ||
                      (unsigned long long)seen.st_ino != p->art_ino)) {
    close(to);
    return;
  }
  char tmp[128], dest[64];
  unsigned long long size = 0;
  reaper_temp_name(tmp, sizeof tmp, p->id, "tar");
  snprintf(dest, sizeof dest, "%s.tar", p->id);
  int tar = ctl >= 0 ? reaper_copy_capped(ctl, "artifacts.tar", to, tmp, dest, p->art_max, &size) : -1;
  reaper_temp_name(tmp, sizeof tmp, p->id, "json");
  snprintf(dest, sizeof dest, "%s.json", p->id);
  int manifest = tar == 0 ? reaper_copy_capped(ctl, "artifacts.json", to, tmp, dest, MANIFEST_MAX, &size) : -1;
  reaper_temp_name(tmp, sizeof tmp, p->id, "json");
  if (tar == REAPER_OVER_CAP || manifest == REAPER_OVER_CAP) {
    write_over_cap_manifest(to, tmp, dest, p->art_to, size, tar == REAPER_OVER_CAP ? p->art_max : MANIFEST_MAX);
  } else if (tar != 0 || manifest != 0) {
    /* No archive after a clean shutdown (an exit record) is the sandbox choosing not to archive
     * (`when`); an archive without its manifest was cut short like no archive at all. */
    struct stat st;
    int chose_none =
        tar != 0 && ctl >= 0 && fstatat(ctl, "exit.json", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    if (!chose_none) reaper_write_new(to, tmp, dest, S205_MANIFEST, sizeof S205_MANIFEST - 1);
  }
  close(to);
}

/* <root>/.history/<id>.json: a host retiring the sandbox at the same time knows the reason better,
 * so its line is never replaced. */
static void write_history(const struct reaper_params *p, int rootfd, const char *reason) {
  int history = reaper_open_dir(rootfd, ".history");
  if (history < 0) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  long long ended_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
  size_t size = strlen(p->prefix) + 64;
  char *line = malloc(size);
  if (line != NULL) {
    int len = snprintf(line, size, "%s,\"endedAt\":%lld,\"reason\":\"%s\"}", p->prefix, ended_ms, reason);
    char tmp[128], dest[64];
    reaper_temp_name(tmp, sizeof tmp, p->id, "history");
    snprintf(dest, sizeof dest, "%s.json", p->id);
    if (len > 0 && (size_t)len < size) reaper_write_new(history, tmp, dest, line, (size_t)len);
    free(line);
  }
  close(history);
}

/* The sandbox has ended and its cgroups are gone: its state directory goes, unless the host removed it. */
static void retire(const struct reaper_params *p, struct reaper_owner *owner) {
  int rootfd = open(p->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return;
  int dir = reaper_open_dir(rootfd, p->id);
  if (dir < 0) {
    close(rootfd);
    return;
  }
  int ctl = reaper_open_dir(dir, "ctl");
  const char *reason = end_reason(ctl, reaper_owner_gone(owner));
  if (p->art_to != NULL) collect_artifacts(p, ctl);
  write_history(p, rootfd, reason);
  if (ctl >= 0) close(ctl);
  reaper_empty_dir(dir);
  close(dir);
  unlinkat(rootfd, p->id, AT_REMOVEDIR);
  close(rootfd);
}

int main(int argc, char **argv) {
  close_inherited_fds();
  /* The host's terminal or pipes going away must not end us. */
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  if (chdir("/") != 0) return 0;
  if (argc != 2) return 0;

  struct reaper_params params;
  if (reaper_params_load(argv[1], &params) != 0) return 0;
  struct reaper_owner owner;
  reaper_wait(&params, &owner);
  reaper_defer_to_owner(&params, &owner);
  for (size_t i = 0; i < params.n_cgroups; i++)
    reaper_cgroup_remove(params.cgroups[i], REAPER_CGROUP_ATTEMPTS, REAPER_CGROUP_PAUSE_NS);
  retire(&params, &owner);
  return 0;
}
