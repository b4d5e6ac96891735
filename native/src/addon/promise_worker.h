// A libuv pool task whose result settles a promise, and whose completion never throws.
//
// Napi::AsyncWorker's completion turns a C++ exception into a JS one; when the JS environment
// is being torn down (process.exit() with the task in flight, a task queued from an 'exit'
// handler, a worker thread ending) neither settling the promise nor throwing is possible, and
// node-addon-api then throws out of a C callback: std::terminate, the host aborts (exit 134).
// Here the completion settles inside a catch-all; a promise that cannot settle any more has no
// one left to await it, and Discard() releases what the task made (its fds) instead.
//
// While queued, the task keeps the event loop alive (libuv counts it as an active request), so a
// pending promise of this kind never lets the process exit under it.
#ifndef KRUNBOX_PROMISE_WORKER_H
#define KRUNBOX_PROMISE_WORKER_H

#include <napi.h>

namespace krunbox {

class PromiseWorker : public Napi::AsyncWorker {
 public:
  Napi::Promise Promise() { return deferred_.Promise(); }

  void OnWorkComplete(Napi::Env env, napi_status status) override {
    bool settled = false;
    if (status != napi_cancelled) {
      try {
        Napi::HandleScope scope(env);
        Settle(env, deferred_);
        settled = true;
      } catch (...) {
        // The environment cannot run JS any more (or building the answer failed): nobody awaits.
      }
    }
    if (!settled) Discard();
    Destroy();
  }

 protected:
  PromiseWorker(Napi::Env env, const char *name) : Napi::AsyncWorker(env, name), deferred_(env) {}

  // Resolves or rejects `deferred` with the task's outcome; may throw (then Discard runs).
  virtual void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) = 0;
  // Frees what only the promise's value would have handed over (fds); the default holds none.
  virtual void Discard() {}

 private:
  Napi::Promise::Deferred deferred_;
};

}  // namespace krunbox

#endif
