/*
 * krun-shim's configuration. The host writes ONE JSON object to the shim's
 * fd 3 and closes it; the shim reads to EOF. Keys (camelCase, unknown keys are
 * rejected):
 *
 *   libkrunPath   string   dlopen() name or path; default "libkrun.so.1"
 *   logLevel      int      krun_set_log_level, 0..5; default 1 (errors)
 *   cpus          int      required, 1..255          krun_set_vm_config
 *   memoryMib     int      required, 1..1048576      krun_set_vm_config
 *   rootDir       string   required, absolute        krun_set_root (boot dir holding the agent)
 *   imageDir      string   optional, absolute        krun_add_virtiofs3(tag "krunbox-image", read-only)
 *   ctlDir        string   optional, absolute        krun_add_virtiofs3(tag "krunbox-ctl", writable):
 *                          the sandbox's state dir, where the agent records exit.json / activity.json
 *   agentPath     string   required, path inside rootDir   krun_set_exec
 *   agentArgs     string[] arguments after the program name
 *   env           string[] "KEY=VALUE" entries for the agent (the host env is never passed)
 *   agentConfig   string   exported to the agent as KRUNBOX_AGENT_CONFIG
 *   workdir       string   optional                  krun_set_workdir
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
#define SHIM_AGENT_CONFIG_ENV "KRUNBOX_AGENT_CONFIG"

struct shim_config {
  const char *libkrun_path;
  uint32_t log_level;
  uint8_t cpus;
  uint32_t memory_mib;
  const char *root_dir;
  const char *image_dir;
  const char *ctl_dir;
  const char *agent_path;
  const char *const *agent_args; /* NULL-terminated, never NULL */
  const char *const *agent_env;  /* NULL-terminated, never NULL; includes KRUNBOX_AGENT_CONFIG */
  const char *workdir;
  int network;
  uint32_t vsock_port;
  const char *socket_path;
  const char *console_output;
};

/* Parses and validates; on failure returns -1 and writes a message naming the
 * offending key or value into error (size error_size). */
int shim_config_parse(const char *text, size_t length, struct shim_config *out,
                      char *error, size_t error_size);

#endif
