#include "shim_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_json.h"

static const char *const empty_list[] = {NULL};

static const char *kind_name(enum json_kind kind) {
  switch (kind) {
    case JSON_NULL:
      return "null";
    case JSON_BOOL:
      return "a boolean";
    case JSON_INT:
      return "an integer";
    case JSON_STRING:
      return "a string";
    case JSON_STRING_ARRAY:
      return "an array";
  }
  return "?";
}

static int want(const struct json_member *m, enum json_kind kind, const char *what, char *error, size_t size) {
  if (m->value.kind == kind) return 0;
  snprintf(error, size, "config key \"%s\" must be %s, got %s", m->key, what, kind_name(m->value.kind));
  return -1;
}

static int want_int(const struct json_member *m, long long min, long long max, long long *out, char *error,
                    size_t size) {
  if (want(m, JSON_INT, "an integer", error, size) < 0) return -1;
  if (m->value.integer < min || m->value.integer > max) {
    snprintf(error, size, "config key \"%s\" must be in %lld..%lld, got %lld", m->key, min, max, m->value.integer);
    return -1;
  }
  *out = m->value.integer;
  return 0;
}

static int want_absolute(const struct json_member *m, const char **out, char *error, size_t size) {
  if (want(m, JSON_STRING, "a string", error, size) < 0) return -1;
  if (m->value.string[0] != '/') {
    snprintf(error, size, "config key \"%s\" must be an absolute path, got \"%s\"", m->key, m->value.string);
    return -1;
  }
  *out = m->value.string;
  return 0;
}

static int want_nonempty(const struct json_member *m, const char **out, char *error, size_t size) {
  if (want(m, JSON_STRING, "a string", error, size) < 0) return -1;
  if (m->value.string[0] == '\0') {
    snprintf(error, size, "config key \"%s\" must not be empty", m->key);
    return -1;
  }
  *out = m->value.string;
  return 0;
}

static int check_env(const struct json_member *env, char *error, size_t size) {
  for (size_t i = 0; env != NULL && i < env->value.count; i++) {
    const char *entry = env->value.strings[i];
    const char *eq = strchr(entry, '=');
    if (eq == NULL || eq == entry) {
      snprintf(error, size, "config env[%zu] must look like KEY=VALUE, got \"%s\"", i, entry);
      return -1;
    }
  }
  return 0;
}

static int want_list(const struct json_member *m, const char *const **out, char *error, size_t size) {
  if (want(m, JSON_STRING_ARRAY, "an array of strings", error, size) < 0) return -1;
  *out = (const char *const *)m->value.strings;
  return 0;
}

int shim_config_parse(const char *text, size_t length, struct shim_config *out, char *error, size_t size) {
  struct json_object object;
  const char *json_error = NULL;
  size_t offset = 0;
  if (json_parse_object(text, length, &object, &json_error, &offset) < 0) {
    snprintf(error, size, "config is not valid JSON: %s at byte %zu", json_error, offset);
    return -1;
  }

  memset(out, 0, sizeof *out);
  out->libkrun_path = "libkrun.so.1";
  out->log_level = 1;
  out->agent_args = empty_list;
  out->agent_env = empty_list;
  const struct json_member *env = NULL;
  int have_cpus = 0, have_memory = 0, have_port = 0;

  for (size_t i = 0; i < object.count; i++) {
    const struct json_member *m = &object.members[i];
    const char *k = m->key;
    long long n = 0;
    int rc;
    if (strcmp(k, "libkrunPath") == 0) {
      rc = want_nonempty(m, &out->libkrun_path, error, size);
    } else if (strcmp(k, "logLevel") == 0) {
      rc = want_int(m, 0, 5, &n, error, size);
      out->log_level = (uint32_t)n;
    } else if (strcmp(k, "cpus") == 0) {
      rc = want_int(m, 1, SHIM_MAX_VCPUS, &n, error, size);
      out->cpus = (uint8_t)n;
      have_cpus = 1;
    } else if (strcmp(k, "memoryMib") == 0) {
      rc = want_int(m, 1, 1048576, &n, error, size);
      out->memory_mib = (uint32_t)n;
      have_memory = 1;
    } else if (strcmp(k, "rootDir") == 0) {
      rc = want_absolute(m, &out->root_dir, error, size);
    } else if (strcmp(k, "imageDir") == 0) {
      rc = want_absolute(m, &out->image_dir, error, size);
    } else if (strcmp(k, "ctlDir") == 0) {
      rc = want_absolute(m, &out->ctl_dir, error, size);
    } else if (strcmp(k, "bootConfigDir") == 0) {
      rc = want_absolute(m, &out->boot_config_dir, error, size);
    } else if (strcmp(k, "uidMap") == 0) {
      rc = want_list(m, &out->uid_map, error, size);
    } else if (strcmp(k, "gidMap") == 0) {
      rc = want_list(m, &out->gid_map, error, size);
    } else if (strcmp(k, "newuidmap") == 0) {
      rc = want_absolute(m, &out->newuidmap, error, size);
    } else if (strcmp(k, "newgidmap") == 0) {
      rc = want_absolute(m, &out->newgidmap, error, size);
    } else if (strcmp(k, "agentPath") == 0) {
      rc = want_nonempty(m, &out->agent_path, error, size);
    } else if (strcmp(k, "agentArgs") == 0) {
      rc = want_list(m, &out->agent_args, error, size);
    } else if (strcmp(k, "env") == 0) {
      rc = want_list(m, &out->agent_env, error, size);
      env = m;
    } else if (strcmp(k, "network") == 0) {
      rc = want(m, JSON_BOOL, "a boolean", error, size);
      out->network = m->value.boolean;
    } else if (strcmp(k, "vsockPort") == 0) {
      rc = want_int(m, 1, 4294967295LL, &n, error, size);
      out->vsock_port = (uint32_t)n;
      have_port = 1;
    } else if (strcmp(k, "socketPath") == 0) {
      rc = want_absolute(m, &out->socket_path, error, size);
    } else if (strcmp(k, "consoleOutput") == 0) {
      rc = want_absolute(m, &out->console_output, error, size);
    } else {
      snprintf(error, size, "unknown config key \"%s\"", k);
      rc = -1;
    }
    if (rc < 0) return -1;
  }

  const char *missing = !have_cpus                 ? "cpus"
                        : !have_memory             ? "memoryMib"
                        : out->root_dir == NULL    ? "rootDir"
                        : out->agent_path == NULL  ? "agentPath"
                        : !have_port               ? "vsockPort"
                        : out->socket_path == NULL ? "socketPath"
                                                   : NULL;
  if (missing != NULL) {
    snprintf(error, size, "config key \"%s\" is required", missing);
    return -1;
  }
  if ((out->uid_map == NULL) != (out->gid_map == NULL)) {
    snprintf(error, size, "config keys \"uidMap\" and \"gidMap\" go together");
    return -1;
  }
  if ((out->newuidmap == NULL) != (out->newgidmap == NULL) || (out->newuidmap != NULL && out->uid_map == NULL)) {
    snprintf(error, size, "config keys \"newuidmap\" and \"newgidmap\" go together, and with \"uidMap\"");
    return -1;
  }
  return check_env(env, error, size);
}
