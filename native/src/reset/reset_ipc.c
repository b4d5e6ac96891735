/*
 * SysV objects are listed in /proc/sysvipc/{shm,sem,msg} for the reader's ipc namespace (the
 * sandbox's, joined by setns) and removed by id; a segment still attached would only be marked,
 * but every process of the lease is dead by now. POSIX queues live in the namespace's mqueue
 * filesystem: mounted privately (a new instance shows the namespace's queues), emptied, detached.
 */
#define _GNU_SOURCE
#include "reset_ipc.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

enum kind { SHM, SEM, MSG };

/** Removes every object listed in /proc/sysvipc/<name>; returns how many were listed. */
static int remove_all(const char *name, enum kind kind) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/sysvipc/%s", name);
  FILE *f = fopen(path, "re");
  if (!f) reset_fail("open %s: %s", path, strerror(errno));
  int listed = 0;
  if (!fgets(line, sizeof line, f)) line[0] = 0;  // the header
  while (fgets(line, sizeof line, f)) {
    long key;
    int id;
    if (sscanf(line, "%ld %d", &key, &id) != 2) continue;
    listed++;
    int rc = kind == SHM   ? shmctl(id, IPC_RMID, NULL)
             : kind == SEM ? semctl(id, 0, IPC_RMID)
                           : msgctl(id, IPC_RMID, NULL);
    if (rc != 0 && errno != EINVAL && errno != EIDRM) reset_fail("remove SysV %s %d: %s", name, id, strerror(errno));
  }
  fclose(f);
  return listed;
}

static void remove_queues(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) reset_fail("open %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0) reset_fail("remove message queue %s: %s", e->d_name, strerror(errno));
  }
  closedir(d);
}

void reset_ipc(void) {
  static const struct {
    const char *name;
    enum kind kind;
  } all[] = {{"shm", SHM}, {"sem", SEM}, {"msg", MSG}};
  for (unsigned i = 0; i < 3; i++) {
    remove_all(all[i].name, all[i].kind);
    if (remove_all(all[i].name, all[i].kind) != 0)
      reset_fail("SysV %s objects are still listed after removal", all[i].name);
  }
  // A private mount point of our own in the sandbox's /proc-free area: the old root's /sys, an
  // empty read-only tmpfs the workload cannot change, shadowed by a small tmpfs of ours.
  if (mount("tmpfs", "/sys", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0700") != 0)
    reset_fail("mount a staging tmpfs on /sys: %s", strerror(errno));
  if (mkdir("/sys/mq", 0700) != 0) reset_fail("mkdir /sys/mq: %s", strerror(errno));
  if (mount("mqueue", "/sys/mq", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
    reset_fail("mount mqueue: %s", strerror(errno));
  remove_queues("/sys/mq");
  if (umount2("/sys/mq", MNT_DETACH) != 0 || umount2("/sys", MNT_DETACH) != 0)
    reset_fail("detach the mqueue mount: %s", strerror(errno));
}
