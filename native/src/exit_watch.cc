// One waiter thread per child (node-pty's model): waitpid() blocks, so it
// must not run on the libuv threadpool, whose few threads would be exhausted
// by long-lived sandboxes. The result reaches JS through a thread-safe
// function, which is unref'd unless the caller asks for { ref: true }.
//
// Teardown: if the JS environment goes away (process exit, worker exit)
// while a child still runs, the thread-safe function is destroyed by Node.
// A per-waiter env cleanup hook, registered after the thread-safe function
// (hooks run newest first), marks the waiter closed under its mutex; the
// thread checks that flag under the same mutex before touching the
// thread-safe function, and otherwise just exits.
#include "exit_watch.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "child_table.h"
#include "js_args.h"
#include "native_error.h"
#include "signal_names.h"

namespace krunbox {
namespace {

struct Waiter;

struct ExitReport {
  bool known = false;  // false if the status was lost (the child was reaped elsewhere)
  int exit_code = -1;  // >= 0 when the child exited
  int signal = 0;      // > 0 when a signal terminated it
  std::shared_ptr<Waiter> waiter;
};

void DeliverExit(Napi::Env env, Napi::Function callback, std::nullptr_t *, ExitReport *report);
using ExitFunction = Napi::TypedThreadSafeFunction<std::nullptr_t, ExitReport, DeliverExit>;

struct Waiter {
  pid_t pid = 0;
  ExitFunction tsfn;
  std::mutex mutex;
  bool closing = false;   // env teardown started: never touch tsfn again
  bool released = false;  // the thread released tsfn
  std::shared_ptr<Waiter> *cleanup_arg = nullptr;  // owned by the cleanup hook while registered
};

void OnEnvTeardown(void *arg) {
  auto *holder = static_cast<std::shared_ptr<Waiter> *>(arg);
  {
    std::lock_guard<std::mutex> lock((*holder)->mutex);
    (*holder)->closing = true;
  }
  delete holder;
}

void DeliverExit(Napi::Env env, Napi::Function callback, std::nullptr_t *, ExitReport *raw) {
  std::unique_ptr<ExitReport> report(raw);
  if (env == nullptr) return;  // the environment is being torn down
  Waiter &waiter = *report->waiter;
  if (waiter.cleanup_arg != nullptr) {
    napi_remove_env_cleanup_hook(env, OnEnvTeardown, waiter.cleanup_arg);
    delete waiter.cleanup_arg;
    waiter.cleanup_arg = nullptr;
  }
  if (callback == nullptr) return;
  Napi::Value code = env.Null();
  Napi::Value signal = env.Null();
  if (report->known && report->exit_code >= 0) code = Napi::Number::New(env, report->exit_code);
  if (report->known && report->signal > 0) signal = Napi::String::New(env, SignalName(report->signal));
  try {
    callback.Call({code, signal});
  } catch (const Napi::Error &) {
    // Env teardown (or a throwing callback) must never abort the process from a waiter.
  }
}

void WaitForExit(std::shared_ptr<Waiter> waiter) {
  auto report = std::make_unique<ExitReport>();
  report->waiter = waiter;
  siginfo_t info;
  int rc;
  do {
    memset(&info, 0, sizeof info);
    // WNOWAIT: leave the zombie in place until the child table knows it exited.
    rc = waitid(P_PID, static_cast<id_t>(waiter->pid), &info, WEXITED | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    children::MarkExited(waiter->pid);
    int status = 0;
    pid_t reaped;
    do {
      reaped = waitpid(waiter->pid, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    if (reaped == waiter->pid) {
      report->known = true;
      if (WIFEXITED(status)) report->exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) report->signal = WTERMSIG(status);
    }
  } else {
    children::MarkExited(waiter->pid);
  }

  std::lock_guard<std::mutex> lock(waiter->mutex);
  if (!waiter->closing) {
    if (waiter->tsfn.NonBlockingCall(report.get()) == napi_ok) report.release();
    waiter->tsfn.Release();
  }
  waiter->released = true;
}

}  // namespace

Napi::Value WatchExit(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  pid_t pid = static_cast<pid_t>(ToInteger(info[0], "watchExit: pid", 1, INT32_MAX));
  if (!info[1].IsFunction()) ThrowInvalid(env, "watchExit: callback must be a function, got " + Describe(info[1]));
  Napi::Object options = OptionsAt(info, 2, "watchExit: options");
  bool keep_alive = OptionalBool(options, "ref", "watchExit: options", false);

  switch (children::BeginWatch(pid)) {
    case children::WatchStart::kNotOurs:
      ThrowInvalid(env, "watchExit: pid " + std::to_string(pid) + " is not a running child started by spawn()");
    case children::WatchStart::kAlreadyWatched:
      ThrowInvalid(env, "watchExit: pid " + std::to_string(pid) + " is already watched");
    case children::WatchStart::kStarted:
      break;
  }

  auto waiter = std::make_shared<Waiter>();
  waiter->pid = pid;
  waiter->tsfn = ExitFunction::New(env, info[1].As<Napi::Function>(), "krunbox.watchExit", 0, 1, nullptr);
  if (!keep_alive) waiter->tsfn.Unref(env);
  waiter->cleanup_arg = new std::shared_ptr<Waiter>(waiter);
  napi_add_env_cleanup_hook(env, OnEnvTeardown, waiter->cleanup_arg);

  try {
    std::thread(WaitForExit, waiter).detach();
  } catch (const std::system_error &e) {
    napi_remove_env_cleanup_hook(env, OnEnvTeardown, waiter->cleanup_arg);
    delete waiter->cleanup_arg;
    waiter->cleanup_arg = nullptr;
    waiter->tsfn.Release();
    throw CodedError(env, kInternal, std::string("watchExit: cannot start a waiter thread: ") + e.what(),
                     e.code().value(), "pthread_create");
  }

  // ref()/unref() toggle whether this child keeps the event loop alive.
  Napi::Object handle = Napi::Object::New(env);
  handle.Set("ref", Napi::Function::New(env, [waiter](const Napi::CallbackInfo &call) {
    std::lock_guard<std::mutex> lock(waiter->mutex);
    if (!waiter->released && !waiter->closing) waiter->tsfn.Ref(call.Env());
  }));
  handle.Set("unref", Napi::Function::New(env, [waiter](const Napi::CallbackInfo &call) {
    std::lock_guard<std::mutex> lock(waiter->mutex);
    if (!waiter->released && !waiter->closing) waiter->tsfn.Unref(call.Env());
  }));
  return handle;
}

}  // namespace krunbox
