/*
 * The reaper's file steps. What lies under a sandbox's directory may have been
 * written by the sandbox (its control dir is shared with it), so every name
 * there is opened relative to its directory's fd with O_NOFOLLOW: a symlink the
 * sandbox planted is never followed, for reading, writing or removing.
 * The addon's fsBatch and writeFiles use them too: hence common/, not reaper/.
 */
#ifndef KRUNBOX_REAPER_FS_H
#define KRUNBOX_REAPER_FS_H

#include <stddef.h>

/* All of data to fd, through short writes and EINTR; 0, or -1 (errno from the failing write). */
int reaper_write_all(int fd, const char *data, size_t length);

/* openat(dirfd, name) of a directory, never through a symlink; -1 if there is none. */
int reaper_open_dir(int dirfd, const char *name);

/* <root>/<id>/ctl/host-exit, created empty (the agent polls for it); nothing when it cannot be. */
void reaper_touch_host_exit(const char *root, const char *id);

/* Up to `max` bytes of regular file `name` in from_dir (never through a link), NUL-terminated in
 * buf (which holds max + 1); the byte count, or -1 when there is no such file. */
long reaper_read_small(int from_dir, const char *name, char *buf, size_t max);

/* What reaper_copy_capped answers for a file larger than its cap: nothing is copied. */
#define REAPER_OVER_CAP (-2)

/* Copies regular file `name` in from_dir (never through a link), of at most `max` bytes, to `tmp`
 * in to_dir (created O_EXCL: nothing there is ever opened), then renames it to `dest`. 0 when copied; REAPER_OVER_CAP,
 * with its size in *size, when it is larger; -1 when there was no such file or the copy failed (or the file grew past
 * the cap meanwhile). Never leaves tmp, nor a part of the file. */
int reaper_copy_capped(int from_dir, const char *name, int to_dir, const char *tmp, const char *dest,
                       unsigned long long max, unsigned long long *size);

/* A temporary name `.<id>.<kind>.<16 random hex>.tmp` in out (cap bytes): nobody who sees the id
 * in ps can plant anything at it beforehand, and it is always created O_EXCL. */
void reaper_temp_name(char *out, size_t cap, const char *id, const char *kind);

/* Writes data to `tmp` (a fresh file, O_EXCL) in dirfd and links it to `dest`, which it never replaces; tmp is removed.
 */
void reaper_write_new(int dirfd, const char *tmp, const char *dest, const char *data, size_t length);

/* Empties the directory open at dirfd, depth first, never following a link or crossing into
 * another filesystem; what cannot be removed stays. */
void reaper_empty_dir(int dirfd);

#endif
