// krunbox native addon: host probe, supervision of sandbox processes, batched file writes.
// The typed interface is lib/native.ts; VMs themselves run in krun-shim.
#include <dlfcn.h>
#include <napi.h>

#include "exit_watch.h"
#include "fd_passing.h"
#include "fs_batch.h"
#include "probe.h"
#include "process_signal.h"
#include "spawn.h"
#include "write_files.h"

namespace {

// Exit waiter threads outlive the environment that started them (a worker
// can end while its children run). Node dlclose()s an addon when the last
// environment using it goes away, which would unmap the code those threads
// are blocked in; RTLD_NODELETE keeps this library mapped until process exit.
void PinThisLibrary() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&PinThisLibrary), &info) != 0 && info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  PinThisLibrary();
  exports.Set("probe", Napi::Function::New(env, krunbox::Probe, "probe"));
  exports.Set("spawn", Napi::Function::New(env, krunbox::Spawn, "spawn"));
  exports.Set("spawnAsync", Napi::Function::New(env, krunbox::SpawnAsync, "spawnAsync"));
  exports.Set("pipe", Napi::Function::New(env, krunbox::Pipe, "pipe"));
  exports.Set("watchExit", Napi::Function::New(env, krunbox::WatchExit, "watchExit"));
  exports.Set("kill", Napi::Function::New(env, krunbox::Kill, "kill"));
  exports.Set("killGroup", Napi::Function::New(env, krunbox::KillGroup, "killGroup"));
  exports.Set("writeFiles", Napi::Function::New(env, krunbox::WriteFiles, "writeFiles"));
  exports.Set("fsBatch", Napi::Function::New(env, krunbox::FsBatch, "fsBatch"));
  exports.Set("socketPair", Napi::Function::New(env, krunbox::SocketPair, "socketPair"));
  exports.Set("receiveListener", Napi::Function::New(env, krunbox::ReceiveListener, "receiveListener"));
  exports.Set("sendFd", Napi::Function::New(env, krunbox::SendFd, "sendFd"));
  exports.Set("sendFdTo", Napi::Function::New(env, krunbox::SendFdTo, "sendFdTo"));
  exports.Set("acceptFd", Napi::Function::New(env, krunbox::AcceptFd, "acceptFd"));
  return exports;
}

}  // namespace

NODE_API_MODULE(krunbox, Init)
