/*
 * The same root agent/boot/boot.go and masks.go build (keep the lists in step with them), made
 * from the host's side in the sandbox's mount namespace. The staging place is the old root's
 * /sys: a mount point, which no process of the sandbox can rename or replace, shadowed by a
 * tmpfs of ours that is both the writable layer (upper/, work/) and the parent of the new
 * root (root/). Inside the new root, every mount point is checked not to be a symlink (the
 * image's own, as boot does); /dev is a fresh tmpfs with the device nodes bound from the old
 * /dev's own mounts, never the old /dev tmpfs the lease could write into.
 */
#define _GNU_SOURCE
#include "reset_root.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "reset_ipc.h"

#define STAGE "/sys"
#define ROOT STAGE "/root"
#define HARDENED (MS_NOSUID | MS_NODEV | MS_NOEXEC)

static const char *const proc_read_only[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
static const char *const proc_masked[] = {"kcore",         "keys",     "key-users",  "timer_list", "sched_debug",
                                          "latency_stats", "kallsyms", "kpagecount", "kpageflags", "kpagecgroup",
                                          "mtrr",          "acpi",     "scsi",       "asound",     "driver"};
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
static const char *const dev_links[][2] = {{"ptmx", "pts/ptmx"},          {"fd", "/proc/self/fd"},
                                           {"stdin", "/proc/self/fd/0"},  {"stdout", "/proc/self/fd/1"},
                                           {"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"}};

static void tmpfs(const char *target, const char *opts) {
  char with_huge[256];
  snprintf(with_huge, sizeof with_huge, "%s,huge=within_size", opts);
  if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, with_huge) == 0) return;
  if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
    reset_fail("mount tmpfs on %s (%s): %s", target, opts, strerror(errno));
}

/** ROOT+name as a real directory (made when missing), never a symlink of the image. */
static void mount_point(char *out, size_t size, const char *name, mode_t mode) {
  snprintf(out, size, ROOT "%s", name);
  struct stat st;
  if (lstat(out, &st) != 0) {
    if (errno != ENOENT) reset_fail("stat %s: %s", name, strerror(errno));
    if (mkdir(out, mode) != 0 || chmod(out, mode) != 0) reset_fail("mkdir %s: %s", name, strerror(errno));
    return;
  }
  if (!S_ISDIR(st.st_mode)) reset_fail("the image has a non-directory at %s", name);
}

static void overlay(int lower) {
  char opts[256];
  if (mkdir(STAGE "/lower", 0755) != 0) reset_fail("mkdir lower: %s", strerror(errno));
  if (syscall(SYS_move_mount, lower, "", AT_FDCWD, STAGE "/lower", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    reset_fail("attach the image: %s", strerror(errno));
  snprintf(opts, sizeof opts, "lowerdir=" STAGE "/lower,upperdir=" STAGE "/upper,workdir=" STAGE "/work");
  char user[300];
  snprintf(user, sizeof user, "%s,userxattr", opts);
  if (mount("overlay", ROOT, "overlay", 0, user) == 0) return;
  int err = errno;
  if (mount("overlay", ROOT, "overlay", 0, opts) != 0)
    reset_fail("mount overlay (%s): %s with userxattr, %s without", opts, strerror(err), strerror(errno));
}

static void bind_read_only(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;  // the kernel lacks it
  if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) != 0) reset_fail("bind %s: %s", path, strerror(errno));
  // Flags inherited from a more privileged namespace are locked: keep them (nosuid,nodev,noexec are in ours).
  if (mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | HARDENED, NULL) != 0)
    reset_fail("remount %s read-only: %s", path, strerror(errno));
}

static void mask(const char *path, const char *dev_null) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  int rc = S_ISDIR(st.st_mode) ? mount("tmpfs", path, "tmpfs", MS_RDONLY | HARDENED, "size=4k,mode=0555")
                               : mount(dev_null, path, NULL, MS_BIND, NULL);
  if (rc != 0) reset_fail("mask %s: %s", path, strerror(errno));
}

static void mount_proc(void) {
  char proc[128], path[192];
  mount_point(proc, sizeof proc, "/proc", 0555);
  // A fresh proc is refused where none is fully visible: the old root's /proc (same pid namespace,
  // its masks and read-only binds coming along) is what remains.
  if (mount("proc", proc, "proc", HARDENED, NULL) != 0 && mount("/proc", proc, NULL, MS_BIND | MS_REC, NULL) != 0)
    reset_fail("mount proc: %s", strerror(errno));
  for (unsigned i = 0; i < sizeof proc_masked / sizeof *proc_masked; i++) {
    snprintf(path, sizeof path, "%s/%s", proc, proc_masked[i]);
    mask(path, ROOT "/dev/null");
  }
  for (unsigned i = 0; i < sizeof proc_read_only / sizeof *proc_read_only; i++) {
    snprintf(path, sizeof path, "%s/%s", proc, proc_read_only[i]);
    bind_read_only(path);
  }
}

static void mount_dev(long upper_mb) {
  char dev[128], path[192], old[64], opts[64];
  mount_point(dev, sizeof dev, "/dev", 0755);
  tmpfs(dev, "mode=0755");
  for (unsigned i = 0; i < sizeof dev_nodes / sizeof *dev_nodes; i++) {
    snprintf(old, sizeof old, "/dev/%s", dev_nodes[i]);
    snprintf(path, sizeof path, "%s/%s", dev, dev_nodes[i]);
    struct stat st;
    if (stat(old, &st) != 0 || !S_ISCHR(st.st_mode)) reset_fail("%s is not the device it was", old);
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) reset_fail("create %s: %s", path, strerror(errno));
    close(fd);
    if (mount(old, path, NULL, MS_BIND, NULL) != 0) reset_fail("bind %s: %s", old, strerror(errno));
  }
  for (unsigned i = 0; i < sizeof dev_links / sizeof *dev_links; i++) {
    snprintf(path, sizeof path, "%s/%s", dev, dev_links[i][0]);
    if (symlink(dev_links[i][1], path) != 0) reset_fail("symlink %s: %s", path, strerror(errno));
  }
  snprintf(path, sizeof path, "%s/pts", dev);
  if (mkdir(path, 0755) != 0) reset_fail("mkdir %s: %s", path, strerror(errno));
  if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620") != 0)
    reset_fail("mount devpts: %s", strerror(errno));
  snprintf(path, sizeof path, "%s/shm", dev);
  if (mkdir(path, 01777) != 0 || chmod(path, 01777) != 0) reset_fail("mkdir %s: %s", path, strerror(errno));
  snprintf(opts, sizeof opts, "size=%ldm,mode=1777", upper_mb);
  tmpfs(path, opts);
}

static void pivot(void) {
  if (chdir(ROOT) != 0) reset_fail("chdir into the new root: %s", strerror(errno));
  // pivot_root(".", ".") stacks the old root over the new one; the lazy unmount of "." removes it.
  if (syscall(SYS_pivot_root, ".", ".") != 0) reset_fail("pivot_root: %s", strerror(errno));
  if (umount2(".", MNT_DETACH) != 0) reset_fail("detach the old root: %s", strerror(errno));
  if (chdir("/") != 0) reset_fail("chdir /: %s", strerror(errno));
}

void reset_root(int lower, long upper_mb) {
  char opts[64], path[128];
  snprintf(opts, sizeof opts, "size=%ldm,mode=0755", upper_mb);
  tmpfs(STAGE, opts);
  if (mkdir(STAGE "/upper", 0755) != 0 || mkdir(STAGE "/work", 0755) != 0 || mkdir(ROOT, 0755) != 0)
    reset_fail("mkdir in the staging tmpfs: %s", strerror(errno));
  overlay(lower);
  mount_dev(upper_mb);  // before /proc: its masks bind the new /dev/null
  mount_proc();
  mount_point(path, sizeof path, "/tmp", 01777);
  snprintf(opts, sizeof opts, "size=%ldm,mode=1777", upper_mb);
  tmpfs(path, opts);
  mount_point(path, sizeof path, "/sys", 0555);
  if (mount("tmpfs", path, "tmpfs", MS_RDONLY | HARDENED, "size=4k,mode=0555") != 0)
    reset_fail("mount an empty /sys: %s", strerror(errno));
  pivot();
}
