// writeFiles: creates a batch of new files with their content, owner, mode and mtime in one
// libuv pool task. A snapshot stores thousands of small files; written through fs/promises each
// one cost six pool round trips and their promises on the main thread (open, write, chown, chmod,
// utimes, close), which made the main thread, not the disk, the limit of a snapshot (issue 19).
//
// Each file is created fresh (O_EXCL) and never through a link (O_NOFOLLOW); the caller made
// every parent directory itself. The batch stops at the first failure, which names its path.
#include "write_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <string>
#include <vector>

#include "native_error.h"
#include "promise_worker.h"

extern "C" {
#include "../common/reaper_fs.h"
}

namespace krunbox {
namespace {

struct FileToWrite {
  std::string path;
  const char *data;
  size_t length;
  mode_t mode;
  long long uid;  // < 0: keep the writer's
  long long gid;
  double mtime_ms;  // NaN: leave it
};

// Returns false and fills `failure` on the first failing call.
bool WriteOne(const FileToWrite &f, SyscallFailure &failure) {
  auto fail = [&](const char *syscall) {
    failure = {errno, syscall, f.path};
    return false;
  };
  int fd = open(f.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail("open");
  bool ok = reaper_write_all(fd, f.data, f.length) == 0 || fail("write");
  if (ok && f.uid >= 0 && fchown(fd, static_cast<uid_t>(f.uid), static_cast<gid_t>(f.gid)) != 0) ok = fail("fchown");
  // After fchown, which clears setuid/setgid; the caller never asks for them anyway.
  if (ok && fchmod(fd, f.mode) != 0) ok = fail("fchmod");
  if (ok && !std::isnan(f.mtime_ms)) {
    struct timespec times[2];
    times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(std::floor(f.mtime_ms / 1000));
    times[0].tv_nsec = times[1].tv_nsec = static_cast<long>((f.mtime_ms - std::floor(f.mtime_ms / 1000) * 1000) * 1e6);
    if (futimens(fd, times) != 0) ok = fail("futimens");
  }
  if (close(fd) != 0 && ok) ok = fail("close");
  return ok;
}

class WriteFilesWorker : public PromiseWorker {
 public:
  WriteFilesWorker(Napi::Env env, Napi::Array batch, std::vector<FileToWrite> files)
      : PromiseWorker(env, "krunbox.writeFiles"), files_(std::move(files)) {
    // The buffers' memory must outlive the pool task: hold the array that holds them.
    batch_ = Napi::Persistent(batch.As<Napi::Object>());
  }

 protected:
  void Execute() override {
    for (const FileToWrite &f : files_) {
      if (!WriteOne(f, failure_)) return;
    }
  }
  void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) override {
    if (failure_.syscall == nullptr) {
      deferred.Resolve(env.Undefined());
      return;
    }
    deferred.Reject(failure_.ToError(env, "writeFiles").Value());
  }

 private:
  std::vector<FileToWrite> files_;
  Napi::ObjectReference batch_;
  SyscallFailure failure_;
};

double NumberField(const Napi::Object &o, const char *name, size_t index, double fallback) {
  Napi::Value v = o.Get(name);
  if (v.IsUndefined() || v.IsNull()) return fallback;
  if (!v.IsNumber())
    ThrowInvalid(o.Env(),
                 "writeFiles: files[" + std::to_string(index) + "]." + name + " must be a number, got " + Describe(v));
  return v.As<Napi::Number>().DoubleValue();
}

}  // namespace

Napi::Value WriteFiles(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray())
    ThrowInvalid(env, "writeFiles: expected an array of files, got " + Describe(info[0]));
  Napi::Array batch = info[0].As<Napi::Array>();
  std::vector<FileToWrite> files;
  files.reserve(batch.Length());
  for (uint32_t i = 0; i < batch.Length(); i++) {
    Napi::Value item = batch.Get(i);
    if (!item.IsObject())
      ThrowInvalid(env, "writeFiles: files[" + std::to_string(i) + "] must be an object, got " + Describe(item));
    Napi::Object o = item.As<Napi::Object>();
    Napi::Value path = o.Get("path");
    Napi::Value data = o.Get("data");
    if (!path.IsString())
      ThrowInvalid(env, "writeFiles: files[" + std::to_string(i) + "].path must be a string, got " + Describe(path));
    if (!data.IsBuffer())
      ThrowInvalid(env, "writeFiles: files[" + std::to_string(i) + "].data must be a Buffer, got " + Describe(data));
    Napi::Buffer<char> buffer = data.As<Napi::Buffer<char>>();
    double mode = NumberField(o, "mode", i, 0644);
    if (mode < 0 || mode > 07777 || mode != std::floor(mode))
      ThrowInvalid(env,
                   "writeFiles: files[" + std::to_string(i) + "].mode is out of range: " + Describe(o.Get("mode")));
    files.push_back({path.As<Napi::String>().Utf8Value(), buffer.Data(), buffer.Length(), static_cast<mode_t>(mode),
                     static_cast<long long>(NumberField(o, "uid", i, -1)),
                     static_cast<long long>(NumberField(o, "gid", i, -1)), NumberField(o, "mtimeMs", i, NAN)});
  }
  auto *worker = new WriteFilesWorker(env, batch, std::move(files));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace krunbox
