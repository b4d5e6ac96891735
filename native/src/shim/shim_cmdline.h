/*
 * What may travel on the guest kernel command line. libkrun puts every
 * krun_set_exec envp entry and argument there, each wrapped in '"' with no
 * escaping (src/libkrun/src/lib.rs, collapse_str_array), panics on anything
 * outside printable ASCII (src/kernel/src/cmdline/mod.rs, valid_char, and the
 * unwrap()s in src/vmm/src/builder.rs), and an x86_64 guest kernel keeps only
 * its first 2047 bytes (COMMAND_LINE_SIZE), the virtio device entries
 * included. So the shim refuses, before any libkrun call, every entry the
 * kernel would split, misread or drop; the agent's configuration never goes
 * this way (see krun.ts: the boot-config share).
 */
#ifndef KRUNBOX_SHIM_CMDLINE_H
#define KRUNBOX_SHIM_CMDLINE_H

#include <stddef.h>

/* Bytes of envp, exec path and arguments (with their quotes and separators)
 * that leave room for libkrun's own prolog and device entries in 2047. */
#define SHIM_CMDLINE_BUDGET 1024
/* The kernel hands init at most 32 environment strings, two of them its own. */
#define SHIM_CMDLINE_MAX_ENV 16

/* 0 when every entry may travel; else -1 with a message naming the entry. */
int shim_cmdline_check(const char *exec_path, const char *const *args, const char *const *env, char *error,
                       size_t error_size);

#endif
