// fsBatch: a short list of file-system calls (mkdir, write a small file, open) run in order in
// one libuv pool task. Each fs/promises call is a task of its own, and handing a task to the pool
// wakes one of its threads: on this kind of host (a virtual CPU woken by an interrupt) that cost
// the main thread 50-80 us a call, and a create's cgroups alone took 16 calls (issue 22).
//
// listen makes a unix socket listening at a path (new, never over an existing file), 0600 and owned
// by the uid/gid given: the sandbox's agent inherits it, so the host may connect before the agent is up.
//
// Nothing follows a link at the last component (O_NOFOLLOW). The batch stops at the first
// failure, closes the fds it opened, and rejects naming the call and its path. removeCgroup and
// removeTree are best effort and never fail; they are the reaper's own steps: the cgroup tree's
// processes killed and its directories removed bottom-up (reaper_cgroup_remove), retried every
// 2 ms for up to 100 ms, not the reaper's 50 ms apart, which would hold a pool thread that long;
// a directory and all under it, never through a link nor into another filesystem
// (reaper_empty_dir).
#include "fs_batch.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "native_error.h"
#include "promise_worker.h"

extern "C" {
#include "../common/reaper_cgroup.h"
#include "../common/reaper_fs.h"
}

namespace krunbox {
namespace {

enum class OpKind { kMkdir, kWrite, kOpenRead, kOpenWrite, kRemoveCgroup, kRemoveTree, kListen };

// A connection the host makes before the agent accepts waits in this queue.
constexpr int kListenBacklog = 64;

constexpr int kRemoveCgroupAttempts = 50;
constexpr long kRemoveCgroupPauseNs = 2 * 1000 * 1000;

struct FsOp {
  OpKind kind = OpKind::kMkdir;
  std::string path;
  std::string data;            // kWrite
  mode_t mode = 0755;          // kMkdir
  bool exist_ok = false;       // kMkdir
  int64_t uid = -1, gid = -1;  // kListen: the socket file's owner (-1: the caller's)
};

// A unix socket listening at op.path, its fd to `fds`. The socket's mode becomes the file's at
// bind (never a chmod by path); bind makes the file (EADDRINUSE over anything there), then its
// owner (lchown: never through a link), then listen. A failure after bind removes the file.
bool Listen(const FsOp &op, std::vector<int> &fds, SyscallFailure &failure) {
  auto fail = [&](const char *syscall) {
    failure = {errno, syscall, op.path};
    return false;
  };
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (op.path.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return fail("bind");
  }
  memcpy(addr.sun_path, op.path.c_str(), op.path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  const char *failed = nullptr;
  if (fchmod(fd, 0600) != 0) {
    failed = "fchmod";
  } else if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    failed = "bind";
  }
  const bool bound = failed == nullptr;
  const bool owned = op.uid >= 0 || op.gid >= 0;
  if (bound && owned && lchown(op.path.c_str(), static_cast<uid_t>(op.uid), static_cast<gid_t>(op.gid)) != 0) {
    failed = "lchown";
  } else if (failed == nullptr && listen(fd, kListenBacklog) != 0) {
    failed = "listen";
  }
  if (failed == nullptr) {
    fds.push_back(fd);
    return true;
  }
  fail(failed);
  close(fd);
  if (bound) unlink(op.path.c_str());
  return false;
}

// Runs one op; an open's fd goes to `fds`. False (and `failure`) on error.
bool RunOne(const FsOp &op, std::vector<int> &fds, SyscallFailure &failure) {
  auto fail = [&](const char *syscall) {
    failure = {errno, syscall, op.path};
    return false;
  };
  switch (op.kind) {
    case OpKind::kMkdir:
      if (mkdir(op.path.c_str(), op.mode) != 0 && !(errno == EEXIST && op.exist_ok)) return fail("mkdir");
      return true;
    case OpKind::kWrite: {
      int fd = open(op.path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return fail("open");
      bool ok = reaper_write_all(fd, op.data.data(), op.data.size()) == 0 || fail("write");
      close(fd);
      return ok;
    }
    case OpKind::kOpenRead:
    case OpKind::kOpenWrite: {
      int fd = open(op.path.c_str(), (op.kind == OpKind::kOpenRead ? O_RDONLY : O_WRONLY) | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return fail("open");
      fds.push_back(fd);
      return true;
    }
    case OpKind::kListen:
      return Listen(op, fds, failure);
    case OpKind::kRemoveCgroup:
      reaper_cgroup_remove(op.path.c_str(), kRemoveCgroupAttempts, kRemoveCgroupPauseNs);
      return true;
    case OpKind::kRemoveTree: {
      int fd = open(op.path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return true;
      reaper_empty_dir(fd);
      close(fd);
      rmdir(op.path.c_str());
      return true;
    }
  }
  return true;
}

class FsBatchWorker : public PromiseWorker {
 public:
  FsBatchWorker(Napi::Env env, std::vector<FsOp> ops) : PromiseWorker(env, "krunbox.fsBatch"), ops_(std::move(ops)) {}

 protected:
  void Execute() override {
    for (const FsOp &op : ops_) {
      if (RunOne(op, fds_, failure_)) continue;
      for (int fd : fds_) close(fd);
      fds_.clear();
      return;
    }
  }
  void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) override {
    if (failure_.syscall != nullptr) {
      deferred.Reject(failure_.ToError(env, "fsBatch").Value());
      return;
    }
    Napi::Array fds = Napi::Array::New(env, fds_.size());
    for (size_t i = 0; i < fds_.size(); i++) fds.Set(static_cast<uint32_t>(i), Napi::Number::New(env, fds_[i]));
    deferred.Resolve(fds);
    fds_.clear();  // JS owns them now
  }
  void Discard() override {
    for (int fd : fds_) close(fd);
    fds_.clear();
  }

 private:
  std::vector<FsOp> ops_;
  std::vector<int> fds_;
  SyscallFailure failure_;
};

std::string StringField(const Napi::Object &o, const char *name, size_t index) {
  Napi::Value v = o.Get(name);
  if (!v.IsString())
    ThrowInvalid(o.Env(),
                 "fsBatch: ops[" + std::to_string(index) + "]." + name + " must be a string, got " + Describe(v));
  return v.As<Napi::String>().Utf8Value();
}

FsOp ParseOp(const Napi::Value &item, size_t i) {
  Napi::Env env = item.Env();
  std::string where = "fsBatch: ops[" + std::to_string(i) + "]";
  if (!item.IsObject()) ThrowInvalid(env, where + " must be an object, got " + Describe(item));
  Napi::Object o = item.As<Napi::Object>();
  std::string kind = StringField(o, "op", i);
  FsOp op;
  op.kind = OpKind::kMkdir;
  op.path = StringField(o, "path", i);
  if (op.path.empty() || op.path[0] != '/')
    ThrowInvalid(env, where + ".path must be absolute, got \"" + op.path + "\"");
  if (kind == "mkdir") {
    Napi::Value mode = o.Get("mode");
    if (!mode.IsUndefined()) {
      double m = mode.IsNumber() ? mode.As<Napi::Number>().DoubleValue() : -1;
      if (m < 0 || m > 07777 || m != std::floor(m))
        ThrowInvalid(env, where + ".mode is out of range: " + Describe(mode));
      op.mode = static_cast<mode_t>(m);
    }
    op.exist_ok = o.Get("existOk").ToBoolean().Value();
  } else if (kind == "write") {
    op.kind = OpKind::kWrite;
    op.data = StringField(o, "data", i);
  } else if (kind == "open") {
    std::string flags = StringField(o, "flags", i);
    if (flags != "r" && flags != "w") ThrowInvalid(env, where + ".flags must be \"r\" or \"w\", got \"" + flags + "\"");
    op.kind = flags == "r" ? OpKind::kOpenRead : OpKind::kOpenWrite;
  } else if (kind == "listen") {
    op.kind = OpKind::kListen;
    const std::pair<const char *, int64_t *> owner[] = {{"uid", &op.uid}, {"gid", &op.gid}};
    for (const auto &[field, target] : owner) {
      Napi::Value id = o.Get(field);
      if (id.IsUndefined()) continue;
      double v = id.IsNumber() ? id.As<Napi::Number>().DoubleValue() : -1;
      if (v < 0 || v > 4294967294.0 || v != std::floor(v))
        ThrowInvalid(env, where + "." + field + " is out of range: " + Describe(id));
      *target = static_cast<int64_t>(v);
    }
  } else if (kind == "removeCgroup") {
    op.kind = OpKind::kRemoveCgroup;
  } else if (kind == "removeTree") {
    op.kind = OpKind::kRemoveTree;
  } else {
    ThrowInvalid(
        env, where +
                 ".op must be \"mkdir\", \"write\", \"open\", \"listen\", \"removeCgroup\" or \"removeTree\", got \"" +
                 kind + "\"");
  }
  return op;
}

}  // namespace

Napi::Value FsBatch(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray())
    ThrowInvalid(env, "fsBatch: expected an array of ops, got " + Describe(info[0]));
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<FsOp> ops;
  ops.reserve(list.Length());
  for (uint32_t i = 0; i < list.Length(); i++) ops.push_back(ParseOp(list.Get(i), i));
  auto *worker = new FsBatchWorker(env, std::move(ops));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace krunbox
