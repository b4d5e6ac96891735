// Errors that cross into JS carry a stable S-code in `.code` (lib/errors.ts),
// plus `.errno` (positive) and `.syscall`/`.path` when a system call failed.
// lib/native.ts turns them into SandboxError by code; nothing parses messages.
#ifndef KRUNBOX_NATIVE_ERROR_H
#define KRUNBOX_NATIVE_ERROR_H

#include <napi.h>

#include <string>

namespace krunbox {

constexpr const char *kInvalidArgument = "S001";
constexpr const char *kSpawnFailed = "S304";
constexpr const char *kHostWriteFailed = "S313";
constexpr const char *kInternal = "S500";

Napi::Error CodedError(Napi::Env env, const char *code, const std::string &message, int error_number = 0,
                       const char *syscall = nullptr, const std::string &path = std::string());

// The first system call that failed in a pool task on the host's own files (none while syscall
// is null), and its error for JS: "<path>: <what> <syscall>: <strerror>". S313 when the
// system refused the path (no space, read-only, denied, too long, a file in the way...), which
// the caller can act on; S500 only for what only a bug passes (EINVAL, EBADF, EFAULT).
struct SyscallFailure {
  int error_number = 0;
  const char *syscall = nullptr;
  std::string path;

  Napi::Error ToError(Napi::Env env, const char *what) const;
};

// S001 with a message naming the offending option and value.
[[noreturn]] void ThrowInvalid(Napi::Env env, const std::string &message);

// "number 3.5", "string \"abc\"", "undefined": for messages that name bad values.
std::string Describe(const Napi::Value &value);

}  // namespace krunbox

#endif
