#ifndef KRUNBOX_PROCESS_SIGNAL_H
#define KRUNBOX_PROCESS_SIGNAL_H

#include <napi.h>

namespace krunbox {

// kill(pid, signal) -> delivered; killGroup(pgid, signal) -> delivered
Napi::Value Kill(const Napi::CallbackInfo &info);
Napi::Value KillGroup(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
