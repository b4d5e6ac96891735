#include "shim_cmdline.h"

#include <stdio.h>
#include <string.h>

/* Why one entry cannot travel, or NULL. */
static const char *entry_problem(const char *entry) {
  if (entry[0] == '\0') return "it is empty (the kernel drops empty arguments)";
  for (const unsigned char *p = (const unsigned char *)entry; *p != '\0'; p++) {
    if (*p == ' ') return "it contains a space (the kernel splits the argument there)";
    if (*p == '"') return "it contains a '\"' (libkrun quotes without escaping)";
    if (*p < 0x20 || *p == 0x7f) return "it contains a control character (libkrun aborts the VM on it)";
    if (*p > 0x7f) return "it contains a non-ASCII byte (libkrun aborts the VM on it)";
  }
  return NULL;
}

/* Names the kernel passes to init as environment: no '.', which marks a module parameter. */
static const char *env_problem(const char *entry) {
  const char *eq = strchr(entry, '=');
  if (eq == NULL || eq == entry) return "it is not KEY=VALUE";
  for (const char *p = entry; p < eq; p++) {
    int ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_' || (p > entry && *p >= '0' && *p <= '9');
    if (!ok) return "its name is not [A-Za-z_][A-Za-z0-9_]* (the kernel would not pass it to init as environment)";
  }
  return NULL;
}

static int refuse(char *error, size_t size, const char *what, size_t index, const char *entry, const char *why) {
  snprintf(error, size, "%s[%zu] \"%.80s%s\" cannot travel on the guest kernel command line: %s", what, index, entry,
           strlen(entry) > 80 ? "..." : "", why);
  return -1;
}

int shim_cmdline_check(const char *exec_path, const char *const *args, const char *const *env, char *error,
                       size_t size) {
  size_t used = strlen(exec_path) + strlen(" KRUN_INIT=");
  const char *why = entry_problem(exec_path);
  if (why != NULL) return refuse(error, size, "agentPath", 0, exec_path, why);
  size_t count = 0;
  for (size_t i = 0; env[i] != NULL; i++, count++) {
    if ((why = entry_problem(env[i])) != NULL || (why = env_problem(env[i])) != NULL)
      return refuse(error, size, "env", i, env[i], why);
    used += strlen(env[i]) + 3;
  }
  if (count > SHIM_CMDLINE_MAX_ENV) {
    snprintf(error, size, "env has %zu entries; at most %d reach the guest's init", count, SHIM_CMDLINE_MAX_ENV);
    return -1;
  }
  for (size_t i = 0; args[i] != NULL; i++) {
    if ((why = entry_problem(args[i])) != NULL) return refuse(error, size, "agentArgs", i, args[i], why);
    used += strlen(args[i]) + 3;
  }
  if (used > SHIM_CMDLINE_BUDGET) {
    snprintf(error, size,
             "env and agentArgs take %zu bytes of the guest kernel command line; at most %d fit beside libkrun's own "
             "entries in what the guest keeps",
             used, SHIM_CMDLINE_BUDGET);
    return -1;
  }
  return 0;
}
