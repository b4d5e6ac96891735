#ifndef KRUNBOX_PROBE_H
#define KRUNBOX_PROBE_H

#include <napi.h>

namespace krunbox {

// probe({ libkrunPath? }) -> HostProbe (see lib/native.ts)
Napi::Value Probe(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
