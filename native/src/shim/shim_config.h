/*
 * krun-shim's configuration. The host writes ONE JSON object to the shim's
 * fd 3 and closes it; the shim reads to EOF. Keys (camelCase, unknown keys are
 * rejected):
 *
 *   libkrunPath   string   dlopen() name or path; default "libkrun.so.1"
 *   logLevel      int      krun_set_log_level, 0..5; default 1 (errors)
 *   cpus          int      required, 1..SHIM_MAX_VCPUS krun_set_vm_config (x86_64: 254, mptable)
 *   memoryMib     int      required, 1..1048576      krun_set_vm_config
 *   rootDir       string   required, absolute        krun_set_root (boot dir holding the agent)
 *   imageDir      string   optional, absolute        krun_add_virtiofs3(tag "krunbox-image", read-only)
 *   ctlDir        string   optional, absolute        krun_add_virtiofs3(tag "krunbox-ctl", writable):
 *                          the sandbox's control dir, where the agent records exit.json / activity.json
 *   bootConfigDir string   optional, absolute        krun_add_virtiofs3(tag "krunbox-boot", read-only):
 *                          holds only the agent's configuration, which needs a channel that carries any bytes
 *   agentPath     string   required, path inside rootDir   krun_set_exec
 *   agentArgs     string[] arguments after the program name   } both travel on the guest kernel command
 *   env           string[] "KEY=VALUE" entries for the agent  } line: checked by shim_cmdline.h
 *   uidMap        string[] optional: run in a new user namespace with these uid_map lines
 *   gidMap        string[] required with uidMap: its gid_map lines (see shim_userns.h)
 *   newuidmap     string   optional, absolute, with newgidmap and uidMap: the setuid helpers that
 *   newgidmap     string   write the maps (a host user's subordinate ids); else the shim writes them
 *   network       bool     default false; false = no TSI (krun_disable_implicit_vsock + krun_add_vsock(ctx, 0))
 *   vsockPort     int      required, 1..4294967295   krun_add_vsock_port2(listen=true)
 *   socketPath    string   required, absolute; libkrun creates it (must not exist)
 *   consoleOutput string   optional; guest console goes to this file (krun_set_console_output)
 */
#ifndef KRUNBOX_SHIM_CONFIG_H
#define KRUNBOX_SHIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define SHIM_IMAGE_TAG "krunbox-image"
#define SHIM_CTL_TAG "krunbox-ctl"
#define SHIM_BOOT_TAG "krunbox-boot"

/* x86_64: libkrun's mptable holds 254 CPUs (src/arch/src/x86_64/mptable.rs, MAX_SUPPORTED_CPUS);
 * krun_set_vm_config takes a u8 elsewhere. */
#if defined(__x86_64__)
#define SHIM_MAX_VCPUS 254
#else
#define SHIM_MAX_VCPUS 255
#endif

struct shim_config {
  const char *libkrun_path;
  uint32_t log_level;
  uint8_t cpus;
  uint32_t memory_mib;
  const char *root_dir;
  const char *image_dir;
  const char *ctl_dir;
  const char *boot_config_dir;
  const char *agent_path;
  const char *const *agent_args; /* NULL-terminated, never NULL */
  const char *const *agent_env;  /* NULL-terminated, never NULL */
  const char *const *uid_map;    /* NULL: no user namespace */
  const char *const *gid_map;
  const char *newuidmap; /* NULL: the maps are written directly */
  const char *newgidmap;
  int network;
  uint32_t vsock_port;
  const char *socket_path;
  const char *console_output;
};

/* Parses and validates; on failure returns -1 and writes a message naming the
 * offending key or value into error (size error_size). */
int shim_config_parse(const char *text, size_t length, struct shim_config *out, char *error, size_t error_size);

#endif
