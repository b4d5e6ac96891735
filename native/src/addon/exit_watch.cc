// One poller thread for every child: it waits on each child's pidfd with epoll
// and reaps a child once its pidfd says it exited. (A thread per child, blocked
// in waitpid, cost the host a thread and its stack mappings per live sandbox,
// and fork() copies every mapping.) Kernels without pidfd_open (before 5.3) get
// one waiter thread per child. Neither may run on the libuv threadpool, whose
// few threads would be exhausted by long-lived sandboxes.
//
// Results reach JS through one thread-safe function per JS environment, shared by
// every watched child: each thread-safe function is a uv_async handle, and libuv
// walks all of them whenever any one fires (a fs call's completion included), so
// one per child made every wake-up of the loop cost O(live sandboxes): 4 % of the
// host's CPU during creates with 1 000 alive. It keeps the loop alive while any
// watch asked for { ref: true } is pending.
//
// Teardown: if the JS environment goes away (process exit, worker exit) while a
// child still runs, Node destroys the thread-safe function. An env cleanup hook
// marks the dispatcher closed under its mutex; a waiting thread checks that flag
// under the same mutex before touching the thread-safe function.
#include "exit_watch.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "child_table.h"
#include "js_args.h"
#include "native_error.h"
#include "signal_names.h"

namespace krunbox {
namespace {

struct Dispatcher;

struct ExitReport {
  pid_t pid = 0;
  bool known = false;  // false if the status was lost (the child was reaped elsewhere)
  int exit_code = -1;  // >= 0 when the child exited
  int signal = 0;      // > 0 when a signal terminated it
};

void DeliverExit(Napi::Env env, Napi::Function, Dispatcher *dispatcher, ExitReport *report);
using ExitFunction = Napi::TypedThreadSafeFunction<Dispatcher, ExitReport, DeliverExit>;

// A watched child's JS side (touched on the JS thread only).
struct Watch {
  Napi::FunctionReference callback;
  bool ref = false;
  uint64_t serial = 0;  // tells this watch from a later one of a reused pid
};

// One per JS environment, kept alive by the environment (instance data) and by
// every waiter it has.
struct Dispatcher {
  ExitFunction tsfn;
  std::mutex mutex;
  bool closing = false;  // env teardown started: never touch tsfn again
  // JS thread only:
  std::unordered_map<pid_t, Watch> watches;
  int refs = 0;  // pending watches with ref: the tsfn is ref'd while > 0
  uint64_t serials = 0;

  void SetRef(Napi::Env env, Watch &watch, bool ref) {
    if (watch.ref == ref) return;
    watch.ref = ref;
    refs += ref ? 1 : -1;
    if (ref && refs == 1) tsfn.Ref(env);
    if (!ref && refs == 0) tsfn.Unref(env);
  }
};

struct Waiter {
  pid_t pid = 0;
  std::shared_ptr<Dispatcher> dispatcher;
};

// On the JS thread while the environment still stands: the callbacks' references go now,
// not from a waiter thread later.
void OnEnvTeardown(void *arg) {
  auto *holder = static_cast<std::shared_ptr<Dispatcher> *>(arg);
  {
    std::lock_guard<std::mutex> lock((*holder)->mutex);
    (*holder)->closing = true;
  }
  (*holder)->watches.clear();
  delete holder;
}

// The environment's dispatcher, made on its first watch.
std::shared_ptr<Dispatcher> DispatcherOf(Napi::Env env) {
  auto *holder = env.GetInstanceData<std::shared_ptr<Dispatcher>>();
  if (holder != nullptr) return *holder;
  auto dispatcher = std::make_shared<Dispatcher>();
  dispatcher->tsfn = ExitFunction::New(env, Napi::Function(), "krunbox.watchExit", 0, 1, dispatcher.get());
  dispatcher->tsfn.Unref(env);
  // Instance data is freed at teardown after the cleanup hooks; the hook holds its own reference.
  env.SetInstanceData(new std::shared_ptr<Dispatcher>(dispatcher));
  napi_add_env_cleanup_hook(env, OnEnvTeardown, new std::shared_ptr<Dispatcher>(dispatcher));
  return dispatcher;
}

void DeliverExit(Napi::Env env, Napi::Function, Dispatcher *dispatcher, ExitReport *raw) {
  std::unique_ptr<ExitReport> report(raw);
  if (env == nullptr) return;  // the environment is being torn down
  auto it = dispatcher->watches.find(report->pid);
  if (it == dispatcher->watches.end()) return;
  Napi::FunctionReference callback = std::move(it->second.callback);
  bool was_ref = it->second.ref;
  dispatcher->watches.erase(it);
  // Everything that calls into N-API is inside the catch-all: during teardown (the loop drained
  // by Node's cleanup) any of these calls may fail, and an exception out of this callback would
  // abort the host.
  try {
    if (was_ref && --dispatcher->refs == 0) dispatcher->tsfn.Unref(env);
    Napi::HandleScope scope(env);
    Napi::Value code = env.Null();
    Napi::Value signal = env.Null();
    if (report->known && report->exit_code >= 0) code = Napi::Number::New(env, report->exit_code);
    if (report->known && report->signal > 0) signal = Napi::String::New(env, SignalName(report->signal));
    callback.Call({code, signal});
  } catch (...) {
    // Env teardown (or a throwing callback) must never abort the process from a waiter.
  }
}

// Reaps the child (blocking until it exits) and reports its status to JS.
void ReapAndReport(const Waiter &waiter) {
  auto report = std::make_unique<ExitReport>();
  report->pid = waiter.pid;
  siginfo_t info;
  int rc;
  do {
    memset(&info, 0, sizeof info);
    // WNOWAIT: leave the zombie in place until the child table knows it exited.
    rc = waitid(P_PID, static_cast<id_t>(waiter.pid), &info, WEXITED | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    children::MarkExited(waiter.pid);
    int status = 0;
    pid_t reaped;
    do {
      reaped = waitpid(waiter.pid, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    if (reaped == waiter.pid) {
      report->known = true;
      if (WIFEXITED(status)) report->exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) report->signal = WTERMSIG(status);
    }
  } else {
    children::MarkExited(waiter.pid);
  }

  Dispatcher &dispatcher = *waiter.dispatcher;
  std::lock_guard<std::mutex> lock(dispatcher.mutex);
  if (!dispatcher.closing && dispatcher.tsfn.NonBlockingCall(report.get()) == napi_ok) report.release();
}

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif

// The one thread that waits for every child with a pidfd. Never destroyed: the thread
// lives until the process exits (the library is pinned, see addon.cc).
class ExitPoller {
 public:
  // nullptr when this kernel has no epoll or the thread cannot start.
  static ExitPoller *Get() {
    static ExitPoller *poller = Start();
    return poller;
  }

  // False when pid gets no pidfd (then the caller waits for it on a thread of its own).
  bool Watch(const Waiter &waiter) {
    int fd = static_cast<int>(syscall(__NR_pidfd_open, waiter.pid, 0));
    if (fd < 0) return false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      by_fd_[fd] = waiter;
    }
    struct epoll_event event = {};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) < 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      by_fd_.erase(fd);
      close(fd);
      return false;
    }
    return true;
  }

 private:
  explicit ExitPoller(int epoll_fd) : epoll_fd_(epoll_fd) {}

  static ExitPoller *Start() {
    int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) return nullptr;
    auto *poller = new ExitPoller(epoll_fd);
    try {
      std::thread([poller] { poller->Run(); }).detach();
    } catch (const std::system_error &) {
      close(epoll_fd);
      delete poller;
      return nullptr;
    }
    return poller;
  }

  void Run() {
    struct epoll_event events[64];
    for (;;) {
      int n = epoll_wait(epoll_fd_, events, 64, -1);
      for (int i = 0; i < n; i++) {
        int fd = events[i].data.fd;
        Waiter waiter;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          auto it = by_fd_.find(fd);
          if (it == by_fd_.end()) continue;
          waiter = it->second;
          by_fd_.erase(it);
        }
        epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        ReapAndReport(waiter);  // the child has exited: waitpid returns at once
      }
    }
  }

  int epoll_fd_;
  std::mutex mutex_;
  std::unordered_map<int, Waiter> by_fd_;
};

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

  std::shared_ptr<Dispatcher> dispatcher = DispatcherOf(env);
  Watch &watch = dispatcher->watches[pid];
  watch.callback = Napi::Persistent(info[1].As<Napi::Function>());
  watch.serial = ++dispatcher->serials;
  dispatcher->SetRef(env, watch, keep_alive);
  Waiter waiter{pid, dispatcher};

  ExitPoller *poller = ExitPoller::Get();
  try {
    if (poller == nullptr || !poller->Watch(waiter)) std::thread(ReapAndReport, waiter).detach();
  } catch (const std::system_error &e) {
    dispatcher->SetRef(env, watch, false);
    dispatcher->watches.erase(pid);
    throw CodedError(env, kInternal, std::string("watchExit: cannot start a waiter thread: ") + e.what(),
                     e.code().value(), "pthread_create");
  }

  // ref()/unref() toggle whether this child keeps the event loop alive (no-ops once it was reported).
  auto toggle = [dispatcher, pid, serial = watch.serial](bool ref) {
    return [dispatcher, pid, serial, ref](const Napi::CallbackInfo &call) {
      auto it = dispatcher->watches.find(pid);
      if (it != dispatcher->watches.end() && it->second.serial == serial)
        dispatcher->SetRef(call.Env(), it->second, ref);
    };
  };
  Napi::Object handle = Napi::Object::New(env);
  handle.Set("ref", Napi::Function::New(env, toggle(true)));
  handle.Set("unref", Napi::Function::New(env, toggle(false)));
  return handle;
}

}  // namespace krunbox
