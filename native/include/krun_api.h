/*
 * The subset of libkrun's C API that krunbox uses, declared by hand from
 * libkrun's documented header (include/libkrun.h). Every call returns zero
 * (or a context id for krun_create_ctx) on success and a negative errno on
 * failure.
 *
 * Nothing links against these symbols: krun-shim resolves them with dlsym
 * (native/src/shim/krun_shim.c) and the test double (test/fixtures/libkrun-double)
 * implements them, so the compiler checks both against these prototypes.
 *
 * Availability: krun_disable_implicit_vsock, krun_add_vsock and
 * krun_add_virtiofs3 only exist in recent libkrun releases; the shim treats
 * them as optional symbols and fails closed when a feature needs them.
 */
#ifndef KRUNBOX_KRUN_API_H
#define KRUNBOX_KRUN_API_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 off, 1 error, 2 warn, 3 info, 4 debug, 5 trace */
int32_t krun_set_log_level(uint32_t level);
int32_t krun_create_ctx(void);
int32_t krun_free_ctx(uint32_t ctx_id);
int32_t krun_set_vm_config(uint32_t ctx_id, uint8_t num_vcpus, uint32_t ram_mib);
/* virtio-fs root of the guest; exec paths are relative to it */
int32_t krun_set_root(uint32_t ctx_id, const char *root_path);
int32_t krun_add_virtiofs(uint32_t ctx_id, const char *c_tag, const char *c_path);
int32_t krun_add_virtiofs3(uint32_t ctx_id, const char *c_tag, const char *c_path, uint64_t shm_size, bool read_only);
int32_t krun_set_workdir(uint32_t ctx_id, const char *workdir_path);
/* argv holds the arguments after the program name; both arrays end with NULL.
 * A NULL envp makes libkrun copy the host environment: never pass NULL. */
int32_t krun_set_exec(uint32_t ctx_id, const char *exec_path, const char *const argv[], const char *const envp[]);
int32_t krun_set_env(uint32_t ctx_id, const char *const envp[]);
/* listen=true: libkrun creates the unix socket at c_filepath (must not exist)
 * and forwards host connections to the guest's vsock port. */
int32_t krun_add_vsock_port2(uint32_t ctx_id, uint32_t port, const char *c_filepath, bool listen);
/* Without this, libkrun adds a vsock device with TSI (guest networking
 * through the host's sockets). */
int32_t krun_disable_implicit_vsock(uint32_t ctx_id);
/* Must follow krun_disable_implicit_vsock; tsi_features=0 gives no TSI. */
int32_t krun_add_vsock(uint32_t ctx_id, uint32_t tsi_features);
int32_t krun_set_console_output(uint32_t ctx_id, const char *c_filepath);
/* Returns only on a configuration error; otherwise the VMM owns the process
 * and exit()s with the guest workload's status (125/126/127: guest init). */
int32_t krun_start_enter(uint32_t ctx_id);
/* Since 1.18.0: 1 when this build has the feature, 0 when not, -EINVAL for a feature the
 * release does not know (KRUN_FEATURE_INIT_BLOB is from 1.19.0; before it the init was always
 * built in). Optional: the shim looks it up with dlsym. */
int32_t krun_has_feature(uint64_t feature);
#define KRUN_FEATURE_INIT_BLOB 11

/* Every symbol krun-shim calls, in call order (its api struct takes them by index), as an
 * initializer list: the shim requires each with dlsym, and the host's probe requires the same
 * list before it reports libkrun usable (lib/probe.ts names the release that first has each). */
#define SHIM_LIBKRUN_SYMBOLS                                                                            \
  "krun_set_log_level", "krun_create_ctx", "krun_set_vm_config", "krun_set_root", "krun_add_virtiofs3", \
      "krun_set_exec", "krun_disable_implicit_vsock", "krun_add_vsock", "krun_add_vsock_port2",         \
      "krun_set_console_output", "krun_start_enter"

#ifdef __cplusplus
}
#endif

#endif
