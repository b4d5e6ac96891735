// Readers for JS arguments and option objects. Each failure throws S001 with
// a message like `spawn: options.args[2] must be a string, got number 3`.
#ifndef KRUNBOX_JS_ARGS_H
#define KRUNBOX_JS_ARGS_H

#include <napi.h>

#include <optional>
#include <string>
#include <vector>

namespace krunbox {

// A string without NUL characters (they cannot reach a C API).
std::string ToCString(const Napi::Value &value, const std::string &name);
// An integer in [min, max].
int64_t ToInteger(const Napi::Value &value, const std::string &name, int64_t min, int64_t max);
std::vector<std::string> ToStringArray(const Napi::Value &value, const std::string &name);

// The option object at info[index]; an empty object if it is undefined.
Napi::Object OptionsAt(const Napi::CallbackInfo &info, size_t index, const std::string &name);
// undefined and null both mean "not given".
bool IsAbsent(const Napi::Value &value);
std::optional<std::string> OptionalString(const Napi::Object &options, const char *key, const std::string &owner);
std::optional<int64_t> OptionalInteger(const Napi::Object &options, const char *key, const std::string &owner,
                                       int64_t min, int64_t max);
bool OptionalBool(const Napi::Object &options, const char *key, const std::string &owner, bool fallback);

}  // namespace krunbox

#endif
