#include "process_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "child_table.h"
#include "js_args.h"
#include "native_error.h"

namespace krunbox {
namespace {

Napi::Value Deliver(Napi::Env env, pid_t target, int sig, const char *what) {
  bool delivered = false;
  int error = children::Signal(target, sig, &delivered);
  if (error == EINVAL) ThrowInvalid(env, std::string(what) + ": signal " + std::to_string(sig) + " is not valid");
  if (error != 0) {
    throw CodedError(
        env, kInternal,
        std::string(what) + " " + std::to_string(target < 0 ? -target : target) + " failed: " + strerror(error), error,
        "kill");
  }
  return Napi::Boolean::New(env, delivered);
}

}  // namespace

Napi::Value Kill(const Napi::CallbackInfo &info) {
  // pid 0 and negative pids would address process groups (or everything).
  pid_t pid = static_cast<pid_t>(ToInteger(info[0], "kill: pid", 1, INT32_MAX));
  int sig = static_cast<int>(ToInteger(info[1], "kill: signal", 0, SIGRTMAX));
  return Deliver(info.Env(), pid, sig, "kill");
}

Napi::Value KillGroup(const Napi::CallbackInfo &info) {
  // pgid 1 would be kill(-1): every process we may signal.
  pid_t pgid = static_cast<pid_t>(ToInteger(info[0], "killGroup: pgid", 2, INT32_MAX));
  int sig = static_cast<int>(ToInteger(info[1], "killGroup: signal", 0, SIGRTMAX));
  if (pgid == getpgrp())
    ThrowInvalid(info.Env(), "killGroup: pgid " + std::to_string(pgid) + " is this process's own group");
  return Deliver(info.Env(), -pgid, sig, "killGroup");
}

}  // namespace krunbox
