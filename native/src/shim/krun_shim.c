/*
 * krun-shim: one process per microVM.
 *
 * krun_start_enter() takes over the calling process and exit()s with the
 * guest's status, so it can never run inside Node. The host spawns this
 * executable with:
 *   fd 3  the configuration, one JSON object, read to EOF (see shim_config.h)
 *   fd 4  optional boot-error channel (see shim_report.h); close-on-exec here
 * and everything else at fd >= 5 is closed first, so no host descriptor
 * reaches the VMM. libkrun is dlopen()ed (never linked) so the addon and
 * this shim build on hosts without libkrun, and a missing library becomes a
 * structured "dlopen" boot error instead of a loader crash.
 *
 * `krun-shim --check <libkrun>` is the host probe's view of the libraries, from
 * the process and environment libkrun will run in: one JSON line naming every
 * symbol below that is missing, the file the loader actually loaded (its real
 * path carries the version: libkrun.so.1.19.0), whether that build has its
 * init blob (/init.krun), and whether libkrunfw.so.5 loads BY NAME, the way
 * libkrun loads it (src/libkrun/src/lib.rs, `KRUNFW` and KRUNFW_NAME).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "krun_api.h"
#include "shim_cmdline.h"
#include "shim_config.h"
#include "shim_report.h"
#include "shim_userns.h"

#ifndef __NR_close_range
#define __NR_close_range 436
#endif

#define CONFIG_FD 3
#define MAX_CONFIG_BYTES (1024 * 1024)

/* Function pointers typed from the prototypes in krun_api.h. */
struct krun_api {
  __typeof__(krun_set_log_level) *set_log_level;
  __typeof__(krun_create_ctx) *create_ctx;
  __typeof__(krun_set_vm_config) *set_vm_config;
  __typeof__(krun_set_root) *set_root;
  __typeof__(krun_add_virtiofs3) *add_virtiofs3;
  __typeof__(krun_set_exec) *set_exec;
  __typeof__(krun_disable_implicit_vsock) *disable_implicit_vsock;
  __typeof__(krun_add_vsock) *add_vsock;
  __typeof__(krun_add_vsock_port2) *add_vsock_port2;
  __typeof__(krun_set_console_output) *set_console_output;
  __typeof__(krun_start_enter) *start_enter;
};

static void close_fds_from(int first) {
  if (syscall(__NR_close_range, (unsigned)first, ~0U, 0U) == 0) return;
  /* Kernels before 5.9: walk /proc/self/fd, or every possible fd without /proc. */
  DIR *dir = opendir("/proc/self/fd");
  if (dir != NULL) {
    int self = dirfd(dir);
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
      int fd = atoi(entry->d_name);
      if (fd >= first && fd != self) close(fd);
    }
    closedir(dir);
    return;
  }
  struct rlimit limit;
  long max = getrlimit(RLIMIT_NOFILE, &limit) == 0 ? (long)limit.rlim_cur : 65536;
  for (long fd = first; fd < max; fd++) close((int)fd);
}

static char *read_config(size_t *length) {
  size_t cap = 4096, len = 0;
  char *text = malloc(cap);
  if (text == NULL) shim_fail("config", NULL, ENOMEM, "out of memory reading the config");
  for (;;) {
    if (len == cap) {
      if (cap >= MAX_CONFIG_BYTES) shim_fail("config", NULL, EFBIG, "config on fd 3 is larger than 1 MiB");
      cap *= 2;
      text = realloc(text, cap);
      if (text == NULL) shim_fail("config", NULL, ENOMEM, "out of memory reading the config");
    }
    ssize_t n = read(CONFIG_FD, text + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      char message[128];
      snprintf(message, sizeof message, "cannot read the config from fd 3: %s", strerror(e));
      shim_fail("config", NULL, e, message);
    }
    if (n == 0) break;
    len += (size_t)n;
  }
  close(CONFIG_FD);
  *length = len;
  return text;
}

/* SHIM_LIBKRUN_SYMBOLS (krun_api.h), NULL-terminated. */
static const char *const required_symbols[] = {SHIM_LIBKRUN_SYMBOLS, NULL};

#define LIBKRUNFW_NAME "libkrunfw.so.5"

static void *load_libkrun(const struct shim_config *cfg, struct krun_api *api) {
  errno = 0;
  void *lib = dlopen(cfg->libkrun_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    int e = errno != 0 ? errno : ENOENT;
    const char *why = dlerror();
    shim_fail("dlopen", "dlopen", e, why != NULL ? why : cfg->libkrun_path);
  }
  void *symbols[sizeof required_symbols / sizeof *required_symbols];
  for (size_t i = 0; required_symbols[i] != NULL; i++) {
    symbols[i] = dlsym(lib, required_symbols[i]);
    if (symbols[i] == NULL) {
      char message[512];
      snprintf(message, sizeof message, "%s does not export %s (too old, or not libkrun)", cfg->libkrun_path,
               required_symbols[i]);
      shim_fail("dlsym", required_symbols[i], ENOSYS, message);
    }
  }
  api->set_log_level = symbols[0];
  api->create_ctx = symbols[1];
  api->set_vm_config = symbols[2];
  api->set_root = symbols[3];
  api->add_virtiofs3 = symbols[4];
  api->set_exec = symbols[5];
  api->disable_implicit_vsock = symbols[6];
  api->add_vsock = symbols[7];
  api->add_vsock_port2 = symbols[8];
  api->set_console_output = symbols[9];
  api->start_enter = symbols[10];
  return lib;
}

/* 1: the build has its init blob (/init.krun), 0: it has not, -1: unknown (no krun_has_feature,
 * or a release before KRUN_FEATURE_INIT_BLOB: 1.18 and older always built the init in). */
static int has_init_blob(void *lib) {
  __typeof__(krun_has_feature) *has_feature = dlsym(lib, "krun_has_feature");
  if (has_feature == NULL) return -1;
  int32_t rc = has_feature(KRUN_FEATURE_INIT_BLOB);
  return rc < 0 ? -1 : rc > 0;
}

/* The real path of the file the loader loaded for lib (found through one of its symbols). */
static int loaded_file(void *lib, char *out) {
  Dl_info info;
  void *symbol = dlsym(lib, "krun_create_ctx");
  if (symbol == NULL || dladdr(symbol, &info) == 0 || info.dli_fname == NULL) return -1;
  return realpath(info.dli_fname, out) != NULL ? 0 : -1;
}

/* --check: never boots; prints {"libkrun":{"loadable","error","missing":[...],"file","initBlob"},
 * "libkrunfw":{"loadable","error"}}. */
static int check_libraries(const char *libkrun_path) {
  printf("{\"libkrun\":{\"loadable\":");
  void *lib = dlopen(libkrun_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("false,\"error\":");
    shim_print_json_string(stdout, dlerror());
    printf(",\"missing\":[],\"file\":null,\"initBlob\":null}");
  } else {
    printf("true,\"error\":null,\"missing\":[");
    int first = 1;
    for (size_t i = 0; required_symbols[i] != NULL; i++) {
      if (dlsym(lib, required_symbols[i]) != NULL) continue;
      printf("%s\"%s\"", first ? "" : ",", required_symbols[i]);
      first = 0;
    }
    char file[PATH_MAX];
    printf("],\"file\":");
    shim_print_json_string(stdout, loaded_file(lib, file) == 0 ? file : NULL);
    int blob = has_init_blob(lib);
    printf(",\"initBlob\":%s}", blob < 0 ? "null" : blob ? "true" : "false");
  }
  /* By bare name, through the loader's search path, as libkrun does. */
  void *fw = dlopen(LIBKRUNFW_NAME, RTLD_NOW | RTLD_LOCAL);
  printf(",\"libkrunfw\":{\"loadable\":%s,\"error\":", fw != NULL ? "true" : "false");
  if (fw != NULL && dlsym(fw, "krunfw_get_kernel") == NULL) {
    printf("\"%s does not export krunfw_get_kernel\"}", LIBKRUNFW_NAME);
  } else if (fw == NULL) {
    shim_print_json_string(stdout, dlerror());
    printf("}");
  } else {
    printf("null}");
  }
  printf("}\n");
  return 0;
}

/* Checks one libkrun return value; stage is the call name without "krun_". */
static void check(int32_t rc, const char *call, const char *detail) {
  if (rc >= 0) return;
  char message[1024];
  snprintf(message, sizeof message, "%s(%s) returned %d: %s", call, detail, rc, strerror(-rc));
  shim_fail(call + strlen("krun_"), call, -rc, message);
}

static void enter_user_namespace(const struct shim_config *cfg) {
  if (cfg->uid_map == NULL) return;
  char error[512];
  if (shim_enter_userns(cfg->uid_map, cfg->gid_map, cfg->newuidmap, cfg->newgidmap, error, sizeof error) < 0)
    shim_fail("userns", NULL, errno, error);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--check") == 0) return check_libraries(argv[2]);
  /* Dying with the host is the spawner's choice (PR_SET_PDEATHSIG survives exec): a detached
   * sandbox must outlive it. */
  close_fds_from(SHIM_BOOT_ERROR_FD + 1);
  /* fd 4 stays open through krun_start_enter (to report its failure) but must
   * not follow an exec; EOF on it tells the host the shim is gone or running. */
  fcntl(SHIM_BOOT_ERROR_FD, F_SETFD, FD_CLOEXEC);

  size_t length;
  char *text = read_config(&length);
  struct shim_config cfg;
  char error[1024];
  if (shim_config_parse(text, length, &cfg, error, sizeof error) < 0) shim_fail("config", NULL, EINVAL, error);
  /* Before libkrun sees it: what it would quote, abort on, or lose is refused here, by name. */
  if (shim_cmdline_check(cfg.agent_path, cfg.agent_args, cfg.agent_env, error, sizeof error) < 0)
    shim_fail("set_exec", "krun_set_exec", EINVAL, error);

  struct krun_api api = {0};
  void *lib = load_libkrun(&cfg, &api);
  enter_user_namespace(&cfg);

  char detail[512];
  snprintf(detail, sizeof detail, "%u", cfg.log_level);
  check(api.set_log_level(cfg.log_level), "krun_set_log_level", detail);

  int32_t ctx_rc = api.create_ctx();
  check(ctx_rc, "krun_create_ctx", "");
  uint32_t ctx = (uint32_t)ctx_rc;
  /* Without its init blob libkrun puts no /init.krun in the guest root: the guest kernel finds no
   * init and the VM ends at boot with status 0, saying nothing. */
  if (has_init_blob(lib) == 0)
    shim_fail("has_feature", "krun_has_feature", ENOENT,
              "this libkrun was built without its init blob (krun_has_feature(KRUN_FEATURE_INIT_BLOB) is 0): the guest "
              "would have no /init.krun; "
              "use a libkrun built with the default \"init-blob\" feature");

  snprintf(detail, sizeof detail, "cpus=%u, memoryMib=%u", cfg.cpus, cfg.memory_mib);
  check(api.set_vm_config(ctx, cfg.cpus, cfg.memory_mib), "krun_set_vm_config", detail);
  check(api.set_root(ctx, cfg.root_dir), "krun_set_root", cfg.root_dir);
  if (cfg.image_dir != NULL)
    check(api.add_virtiofs3(ctx, SHIM_IMAGE_TAG, cfg.image_dir, 0, true), "krun_add_virtiofs3", cfg.image_dir);
  if (cfg.ctl_dir != NULL)
    check(api.add_virtiofs3(ctx, SHIM_CTL_TAG, cfg.ctl_dir, 0, false), "krun_add_virtiofs3", cfg.ctl_dir);
  if (cfg.boot_config_dir != NULL)
    check(api.add_virtiofs3(ctx, SHIM_BOOT_TAG, cfg.boot_config_dir, 0, true), "krun_add_virtiofs3",
          cfg.boot_config_dir);
  check(api.set_exec(ctx, cfg.agent_path, cfg.agent_args, cfg.agent_env), "krun_set_exec", cfg.agent_path);
  if (!cfg.network) {
    check(api.disable_implicit_vsock(ctx), "krun_disable_implicit_vsock", "");
    check(api.add_vsock(ctx, 0), "krun_add_vsock", "tsi_features=0");
  }
  snprintf(detail, sizeof detail, "port=%u, %s", cfg.vsock_port, cfg.socket_path);
  check(api.add_vsock_port2(ctx, cfg.vsock_port, cfg.socket_path, true), "krun_add_vsock_port2", detail);
  if (cfg.console_output != NULL)
    check(api.set_console_output(ctx, cfg.console_output), "krun_set_console_output", cfg.console_output);

  int32_t rc = api.start_enter(ctx);
  /* Only reached when the VMM refused to start. */
  check(rc < 0 ? rc : -EINVAL, "krun_start_enter", "");
  return SHIM_EXIT_BOOT_ERROR;
}
