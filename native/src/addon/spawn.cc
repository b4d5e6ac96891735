// spawn() and spawnAsync(): JS options → a Plan (spawn_launch.h), checked on the calling
// thread, then Launch. spawn launches on the main thread and returns the child; spawnAsync
// launches on the libuv pool and returns a promise, so a create never stalls the event loop
// for the fork, the child's cgroup joins or its id maps.
//
// Why not child_process: we need things libuv cannot do between fork and
// exec: PR_SET_PDEATHSIG, joining cgroups before the first instruction runs,
// arbitrary fds at 3..n, and a guaranteed fd sweep. Exit status is collected
// by exit_watch.cc, not by libuv (which only reaps its own children).
#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "child_table.h"
#include "js_args.h"
#include "native_error.h"
#include "promise_worker.h"
#include "spawn_launch.h"

extern char **environ;

namespace krunbox {
namespace {

bool IsOpenFd(int fd) { return fcntl(fd, F_GETFD) != -1; }

Plan ReadPlan(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || info[0].IsArray())
    ThrowInvalid(env, "spawn: options must be an object, got " + Describe(info[0]));
  Napi::Object o = info[0].As<Napi::Object>();
  Plan p;
  p.file = ToCString(o.Get("file"), "spawn: options.file");
  if (p.file.empty()) ThrowInvalid(env, "spawn: options.file must not be empty");
  std::vector<std::string> args =
      IsAbsent(o.Get("args")) ? std::vector<std::string>{} : ToStringArray(o.Get("args"), "spawn: options.args");
  p.argv_store.push_back(OptionalString(o, "argv0", "spawn: options").value_or(p.file));
  p.argv_store.insert(p.argv_store.end(), args.begin(), args.end());

  if (IsAbsent(o.Get("env"))) {
    for (char **e = environ; *e != nullptr; e++) p.env_store.emplace_back(*e);
  } else {
    p.env_store = ToStringArray(o.Get("env"), "spawn: options.env");
    for (size_t i = 0; i < p.env_store.size(); i++) {
      size_t eq = p.env_store[i].find('=');
      if (eq == std::string::npos || eq == 0) {
        ThrowInvalid(env, "spawn: options.env[" + std::to_string(i) + "] must look like KEY=VALUE, got \"" +
                              p.env_store[i] + "\"");
      }
    }
  }
  p.candidates = Candidates(p.file, p.env_store);
  p.cwd = OptionalString(o, "cwd", "spawn: options");

  bool new_session = OptionalBool(o, "newSession", "spawn: options", false);
  bool process_group = OptionalBool(o, "processGroup", "spawn: options", !new_session);
  if (!new_session && !process_group) {
    ThrowInvalid(env, "spawn: options.processGroup=false needs newSession=true (the child must lead its own group)");
  }
  p.new_session = new_session;
  p.pid_namespace = OptionalBool(o, "pidNamespace", "spawn: options", false);
  p.death_signal = static_cast<int>(OptionalInteger(o, "parentDeathSignal", "spawn: options", 0, SIGRTMAX).value_or(0));

  Napi::Value pipes_value = o.Get("createPipes");
  if (!IsAbsent(pipes_value)) {
    if (!pipes_value.IsObject())
      ThrowInvalid(env, "spawn: options.createPipes must be an object, got " + Describe(pipes_value));
    Napi::Object pipes = pipes_value.As<Napi::Object>();
    p.pipe_stdio[0] = OptionalBool(pipes, "stdin", "spawn: options.createPipes", false);
    p.pipe_stdio[1] = OptionalBool(pipes, "stdout", "spawn: options.createPipes", false);
    p.pipe_stdio[2] = OptionalBool(pipes, "stderr", "spawn: options.createPipes", false);
  }

  Napi::Value stdio_value = o.Get("stdio");
  if (!IsAbsent(stdio_value)) {
    if (!stdio_value.IsArray() || stdio_value.As<Napi::Array>().Length() > 3) {
      ThrowInvalid(env, "spawn: options.stdio must be an array of up to 3 fds or nulls, got " + Describe(stdio_value));
    }
    Napi::Array stdio = stdio_value.As<Napi::Array>();
    for (uint32_t i = 0; i < stdio.Length(); i++) {
      Napi::Value slot = stdio.Get(i);
      if (IsAbsent(slot)) continue;
      std::string name = "spawn: options.stdio[" + std::to_string(i) + "]";
      int fd = static_cast<int>(ToInteger(slot, name, 0, INT32_MAX));
      if (p.pipe_stdio[i])
        ThrowInvalid(env, name + " is " + std::to_string(fd) + " but createPipes also asks for a pipe there");
      if (!IsOpenFd(fd)) ThrowInvalid(env, name + " = " + std::to_string(fd) + " is not an open file descriptor");
      p.stdio[i] = fd;
    }
  }

  std::optional<std::string> stderr_file = OptionalString(o, "stderrFile", "spawn: options");
  if (stderr_file) {
    if (stderr_file->empty() || (*stderr_file)[0] != '/')
      ThrowInvalid(env, "spawn: options.stderrFile must be an absolute path, got \"" + *stderr_file + "\"");
    if (p.stdio[2] >= 0 || p.pipe_stdio[2])
      ThrowInvalid(
          env, "spawn: options.stderrFile \"" + *stderr_file + "\" but stdio[2] or createPipes.stderr is given too");
    p.stderr_file = *stderr_file;
  }

  Napi::Value extra_value = o.Get("extraFds");
  if (!IsAbsent(extra_value)) {
    if (!extra_value.IsArray())
      ThrowInvalid(env, "spawn: options.extraFds must be an array of fds, got " + Describe(extra_value));
    Napi::Array extra = extra_value.As<Napi::Array>();
    if (extra.Length() > kMaxExtraFds)
      ThrowInvalid(
          env, "spawn: options.extraFds has " + std::to_string(extra.Length()) + " entries, at most 64 are allowed");
    for (uint32_t i = 0; i < extra.Length(); i++) {
      std::string name = "spawn: options.extraFds[" + std::to_string(i) + "]";
      int fd = static_cast<int>(ToInteger(extra.Get(i), name, 0, INT32_MAX));
      if (!IsOpenFd(fd)) ThrowInvalid(env, name + " = " + std::to_string(fd) + " is not an open file descriptor");
      p.extra_fds.push_back(fd);
    }
  }

  Napi::Value cgroups = o.Get("cgroupJoinFiles");
  if (!IsAbsent(cgroups)) {
    p.cgroup_join_files = ToStringArray(cgroups, "spawn: options.cgroupJoinFiles");
    for (size_t i = 0; i < p.cgroup_join_files.size(); i++) {
      if (p.cgroup_join_files[i].empty() || p.cgroup_join_files[i][0] != '/') {
        ThrowInvalid(env, "spawn: options.cgroupJoinFiles[" + std::to_string(i) + "] must be an absolute path, got \"" +
                              p.cgroup_join_files[i] + "\"");
      }
    }
  }

  Napi::Value userns = o.Get("userNamespace");
  if (!IsAbsent(userns)) {
    if (!userns.IsObject())
      ThrowInvalid(env, "spawn: options.userNamespace must be an object, got " + Describe(userns));
    Napi::Object maps = userns.As<Napi::Object>();
    p.uid_map = ToCString(maps.Get("uidMap"), "spawn: options.userNamespace.uidMap");
    p.gid_map = ToCString(maps.Get("gidMap"), "spawn: options.userNamespace.gidMap");
    if (p.uid_map.empty() || p.gid_map.empty())
      ThrowInvalid(env, "spawn: options.userNamespace needs a non-empty uidMap and gidMap");
    Napi::Value owner = maps.Get("owner");
    if (!IsAbsent(owner)) p.userns_owner = ToInteger(owner, "spawn: options.userNamespace.owner", 1, 4294967294);
    Napi::Value helpers = maps.Get("helpers");
    if (!IsAbsent(helpers)) {
      if (!helpers.IsObject())
        ThrowInvalid(env, "spawn: options.userNamespace.helpers must be an object, got " + Describe(helpers));
      Napi::Object h = helpers.As<Napi::Object>();
      p.uid_map_helper = ToCString(h.Get("uid"), "spawn: options.userNamespace.helpers.uid");
      p.gid_map_helper = ToCString(h.Get("gid"), "spawn: options.userNamespace.helpers.gid");
      for (const std::string *helper : {&p.uid_map_helper, &p.gid_map_helper}) {
        if (helper->empty() || (*helper)[0] != '/')
          ThrowInvalid(env, "spawn: options.userNamespace.helpers must be absolute paths, got \"" + *helper + "\"");
      }
    }
  }

  Napi::Value bounding = o.Get("boundingCapabilities");
  if (!IsAbsent(bounding)) {
    if (p.uid_map.empty())
      ThrowInvalid(env,
                   "spawn: options.boundingCapabilities needs options.userNamespace (only there is the child root)");
    if (!bounding.IsArray())
      ThrowInvalid(
          env, "spawn: options.boundingCapabilities must be an array of capability numbers, got " + Describe(bounding));
    Napi::Array caps = bounding.As<Napi::Array>();
    p.limit_bounding_set = true;
    for (uint32_t i = 0; i < caps.Length(); i++) {
      int cap = static_cast<int>(
          ToInteger(caps.Get(i), "spawn: options.boundingCapabilities[" + std::to_string(i) + "]", 0, 63));
      p.bounding_keep |= uint64_t{1} << cap;
    }
  }

  Napi::Value staged = o.Get("stagedBinds");
  if (!IsAbsent(staged)) {
    if (!staged.IsObject()) ThrowInvalid(env, "spawn: options.stagedBinds must be an object, got " + Describe(staged));
    Napi::Object binds = staged.As<Napi::Object>();
    p.stage_dir = ToCString(binds.Get("dir"), "spawn: options.stagedBinds.dir");
    if (p.stage_dir.empty() || p.stage_dir[0] != '/')
      ThrowInvalid(env, "spawn: options.stagedBinds.dir must be an absolute path, got \"" + p.stage_dir + "\"");
    std::vector<std::string> sources = ToStringArray(binds.Get("sources"), "spawn: options.stagedBinds.sources");
    if (sources.size() > kMaxStagedBinds) {
      ThrowInvalid(env, "spawn: options.stagedBinds.sources has " + std::to_string(sources.size()) +
                            " entries, at most " + std::to_string(kMaxStagedBinds) + " are allowed");
    }
    for (size_t i = 0; i < sources.size(); i++) {
      struct stat st;
      if (sources[i].empty() || sources[i][0] != '/' || stat(sources[i].c_str(), &st) < 0) {
        int error = sources[i].empty() || sources[i][0] != '/' ? EINVAL : errno;
        throw CodedError(env, kSpawnFailed,
                         "spawn: stagedBinds.sources[" + std::to_string(i) + "] \"" + sources[i] +
                             "\" is not an absolute path to an existing file: " + strerror(error),
                         error, "stat", sources[i]);
      }
      p.stage_sources.push_back(sources[i]);
      p.stage_is_dir.push_back(S_ISDIR(st.st_mode));
      p.stage_targets.push_back(p.stage_dir + "/" + std::to_string(i));
    }
  }
  return p;
}

Napi::Object ResultObject(Napi::Env env, const LaunchResult &r) {
  Napi::Object result = Napi::Object::New(env);
  result.Set("pid", Napi::Number::New(env, r.pid));
  const char *names[3] = {"stdinFd", "stdoutFd", "stderrFd"};
  for (int i = 0; i < 3; i++) {
    if (r.pipe_fds[i] >= 0) result.Set(names[i], Napi::Number::New(env, r.pipe_fds[i]));
  }
  return result;
}

Napi::Error LaunchError(Napi::Env env, const LaunchResult &r) {
  return CodedError(env, kSpawnFailed, r.error, r.error_number, r.syscall, r.path);
}

// Launch on a libuv pool thread; the promise settles on the main thread. A launch whose promise
// can no longer settle (its environment is being torn down: a worker thread terminated, the
// process exiting) has no one left to watch the child or read its pipes: the child is killed and
// reaped and its fds closed, rather than left running with nothing of ours attached.
class LaunchWorker : public PromiseWorker {
 public:
  LaunchWorker(Napi::Env env, Plan plan) : PromiseWorker(env, "krunbox.spawn"), plan_(std::move(plan)) {}

 protected:
  void Execute() override { result_ = Launch(plan_); }

  void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) override {
    if (result_.error.empty()) {
      deferred.Resolve(ResultObject(env, result_));
    } else {
      deferred.Reject(LaunchError(env, result_).Value());
    }
  }

  void Discard() override {
    for (int &fd : result_.pipe_fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    if (!result_.error.empty() || result_.pid <= 0) return;
    pid_t pid = result_.pid;
    // Claimed first, so no exit watcher can reap (and a reused pid never be signalled) meanwhile.
    if (children::BeginWatch(pid) != children::WatchStart::kStarted) return;
    bool delivered = false;
    children::Signal(pid, SIGKILL, &delivered);
    siginfo_t info;
    // Marked exited while still a zombie (as exit_watch.cc does), then reaped.
    while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    children::MarkExited(pid);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

 private:
  Plan plan_;
  LaunchResult result_;
};

}  // namespace

Napi::Value Spawn(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  LaunchResult r = Launch(ReadPlan(info));
  if (!r.error.empty()) throw LaunchError(env, r);
  return ResultObject(env, r);
}

Napi::Value SpawnAsync(const Napi::CallbackInfo &info) {
  // Bad options throw here, synchronously, like spawn's; only the launch is deferred.
  auto *worker = new LaunchWorker(info.Env(), ReadPlan(info));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value Pipe(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0)
    throw CodedError(env, kInternal, std::string("pipe2 failed: ") + strerror(errno), errno, "pipe2");
  Napi::Object result = Napi::Object::New(env);
  result.Set("readFd", Napi::Number::New(env, fds[0]));
  result.Set("writeFd", Napi::Number::New(env, fds[1]));
  return result;
}

}  // namespace krunbox
