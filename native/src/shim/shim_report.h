/*
 * krun-shim's boot-error report: before any failing exit the shim writes one
 * JSON line to fd 4 (if open) and a human-readable line to stderr, then exits
 * with SHIM_EXIT_BOOT_ERROR.
 *
 *   {"stage":"set_vm_config","call":"krun_set_vm_config","errno":22,"message":"..."}
 *
 * stage: config | dlopen | dlsym | userns | <krun call without the "krun_" prefix>
 * call:  the libkrun function (or "dlopen"), null for config errors
 * errno: positive errno (libkrun returns it negated)
 */
#ifndef KRUNBOX_SHIM_REPORT_H
#define KRUNBOX_SHIM_REPORT_H

#define SHIM_EXIT_BOOT_ERROR 71
#define SHIM_BOOT_ERROR_FD 4

#include <stdio.h>

/* s as a JSON string literal ("null" for NULL). */
void shim_print_json_string(FILE *out, const char *s);

__attribute__((noreturn)) void shim_fail(const char *stage, const char *call, int error_number, const char *message);

#endif
