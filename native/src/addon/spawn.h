#ifndef KRUNBOX_SPAWN_H
#define KRUNBOX_SPAWN_H

#include <napi.h>

namespace krunbox {

// spawn(options) -> { pid, stdinFd?, stdoutFd?, stderrFd? }; see lib/native.ts.
Napi::Value Spawn(const Napi::CallbackInfo &info);
// spawnAsync(options) -> Promise of the same; the launch runs on the libuv pool.
Napi::Value SpawnAsync(const Napi::CallbackInfo &info);
// pipe() -> { readFd, writeFd }, both close-on-exec.
Napi::Value Pipe(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
