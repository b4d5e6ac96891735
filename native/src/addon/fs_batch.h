#ifndef KRUNBOX_FS_BATCH_H
#define KRUNBOX_FS_BATCH_H

#include <napi.h>

namespace krunbox {

// fsBatch([{ op: 'mkdir', path, mode?, existOk? } | { op: 'write', path, data } | { op: 'open', path, flags }
//          | { op: 'listen', path, uid?, gid? } | { op: 'removeCgroup', path } | { op: 'removeTree', path }])
//   -> Promise<number[]> (the fds the opens and listens made, in order), on the libuv pool
Napi::Value FsBatch(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
