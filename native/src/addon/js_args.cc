#include "js_args.h"

#include <cmath>

#include "native_error.h"

namespace krunbox {

std::string ToCString(const Napi::Value &value, const std::string &name) {
  if (!value.IsString()) ThrowInvalid(value.Env(), name + " must be a string, got " + Describe(value));
  std::string s = value.As<Napi::String>().Utf8Value();
  if (s.find('\0') != std::string::npos) ThrowInvalid(value.Env(), name + " must not contain NUL characters");
  return s;
}

int64_t ToInteger(const Napi::Value &value, const std::string &name, int64_t min, int64_t max) {
  double n = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : NAN;
  if (!value.IsNumber() || !std::isfinite(n) || std::floor(n) != n || n < static_cast<double>(min) ||
      n > static_cast<double>(max)) {
    ThrowInvalid(value.Env(), name + " must be an integer in " + std::to_string(min) + ".." + std::to_string(max) +
                                  ", got " + Describe(value));
  }
  return static_cast<int64_t>(n);
}

std::vector<std::string> ToStringArray(const Napi::Value &value, const std::string &name) {
  if (!value.IsArray()) ThrowInvalid(value.Env(), name + " must be an array of strings, got " + Describe(value));
  Napi::Array array = value.As<Napi::Array>();
  std::vector<std::string> out;
  out.reserve(array.Length());
  for (uint32_t i = 0; i < array.Length(); i++) {
    out.push_back(ToCString(array.Get(i), name + "[" + std::to_string(i) + "]"));
  }
  return out;
}

bool IsAbsent(const Napi::Value &value) { return value.IsUndefined() || value.IsNull(); }

Napi::Object OptionsAt(const Napi::CallbackInfo &info, size_t index, const std::string &name) {
  Napi::Value value = info[index];
  if (value.IsUndefined()) return Napi::Object::New(info.Env());
  if (!value.IsObject() || value.IsArray() || value.IsFunction()) {
    ThrowInvalid(info.Env(), name + " must be an object, got " + Describe(value));
  }
  return value.As<Napi::Object>();
}

std::optional<std::string> OptionalString(const Napi::Object &options, const char *key, const std::string &owner) {
  Napi::Value value = options.Get(key);
  if (IsAbsent(value)) return std::nullopt;
  return ToCString(value, owner + "." + key);
}

std::optional<int64_t> OptionalInteger(const Napi::Object &options, const char *key, const std::string &owner,
                                       int64_t min, int64_t max) {
  Napi::Value value = options.Get(key);
  if (IsAbsent(value)) return std::nullopt;
  return ToInteger(value, owner + "." + key, min, max);
}

bool OptionalBool(const Napi::Object &options, const char *key, const std::string &owner, bool fallback) {
  Napi::Value value = options.Get(key);
  if (IsAbsent(value)) return fallback;
  if (!value.IsBoolean()) ThrowInvalid(options.Env(), owner + "." + key + " must be a boolean, got " + Describe(value));
  return value.As<Napi::Boolean>().Value();
}

}  // namespace krunbox
