#ifndef KRUNBOX_EXIT_WATCH_H
#define KRUNBOX_EXIT_WATCH_H

#include <napi.h>

namespace krunbox {

// watchExit(pid, callback(exitCode|null, signal|null), { ref? }) -> { ref(), unref() }
Napi::Value WatchExit(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
