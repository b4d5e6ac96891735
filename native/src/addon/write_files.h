#ifndef KRUNBOX_WRITE_FILES_H
#define KRUNBOX_WRITE_FILES_H

#include <napi.h>

namespace krunbox {

// writeFiles([{ path, data, mode, uid?, gid?, mtimeMs? }]) -> Promise<void>, on the libuv pool
Napi::Value WriteFiles(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
