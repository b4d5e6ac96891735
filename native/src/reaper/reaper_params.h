/*
 * The reaper's parameters: a file the host writes (mode 0600, O_EXCL) into the
 * state root as `.reaper-<random>` before it starts the reaper, so that neither
 * the reaper's command line nor its environment names the sandbox. One field a
 * line, in this order (lib/reaper.ts writes it):
 *   state root (absolute)        sandbox id (a lower-case UUID)
 *   sandbox pid                  its start time (field 22 of /proc/pid/stat)
 *   owner pid or empty           history line prefix (JSON without its '}')
 *   artifacts dir or empty       artifacts byte cap or empty (both or neither)
 *   the artifacts dir's identity at create, `<dev>:<ino>` in decimal, or empty
 *   cgroup dirs, one a line      "end"
 */
#ifndef KRUNBOX_REAPER_PARAMS_H
#define KRUNBOX_REAPER_PARAMS_H

#include <stddef.h>
#include <sys/types.h>

#define REAPER_ID_LEN 36
#define REAPER_MAX_CGROUPS 32

struct reaper_params {
  const char *root;
  char id[REAPER_ID_LEN + 1];
  pid_t pid;
  unsigned long long start;
  pid_t owner; /* 0: none (a detached sandbox) */
  const char *prefix;
  const char *art_to; /* NULL: no artifacts */
  unsigned long long art_max;
  int art_same; /* 1: art_to must be the directory art_dev/art_ino (seen at create) */
  unsigned long long art_dev, art_ino;
  const char *cgroups[REAPER_MAX_CGROUPS];
  size_t n_cgroups;
  char *text; /* the file's bytes; every string above points into it */
};

/* Reads, checks and unlinks the file. 0 when every field is well formed; -1
 * for anything else (unreadable, too long, cut short, a bad field), and the
 * caller then touches nothing. */
int reaper_params_load(const char *file, struct reaper_params *out);

#endif
