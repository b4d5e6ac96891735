#include "native_error.h"

#include <cerrno>
#include <cmath>
#include <cstring>

namespace krunbox {

Napi::Error CodedError(Napi::Env env, const char *code, const std::string &message, int error_number,
                       const char *syscall, const std::string &path) {
  Napi::Error error = Napi::Error::New(env, message);
  error.Set("code", Napi::String::New(env, code));
  if (error_number != 0) error.Set("errno", Napi::Number::New(env, error_number));
  if (syscall != nullptr) error.Set("syscall", Napi::String::New(env, syscall));
  if (!path.empty()) error.Set("path", Napi::String::New(env, path));
  return error;
}

Napi::Error SyscallFailure::ToError(Napi::Env env, const char *what) const {
  std::string message = path + ": " + what + " " + syscall + ": " + strerror(error_number);
  const bool bug = error_number == EINVAL || error_number == EBADF || error_number == EFAULT;
  return CodedError(env, bug ? kInternal : kHostWriteFailed, message, error_number, syscall, path);
}

void ThrowInvalid(Napi::Env env, const std::string &message) { throw CodedError(env, kInvalidArgument, message); }

std::string Describe(const Napi::Value &value) {
  switch (value.Type()) {
    case napi_undefined:
      return "undefined";
    case napi_null:
      return "null";
    case napi_boolean:
      return value.As<Napi::Boolean>().Value() ? "true" : "false";
    case napi_number: {
      double n = value.As<Napi::Number>().DoubleValue();
      if (std::isnan(n)) return "NaN";
      char text[64];
      snprintf(text, sizeof text, "number %.17g", n);
      return text;
    }
    case napi_string: {
      std::string s = value.As<Napi::String>().Utf8Value();
      if (s.size() > 80) s = s.substr(0, 77) + "...";
      return "string \"" + s + "\"";
    }
    case napi_function:
      return "a function";
    case napi_object:
      return value.IsArray() ? "an array" : "an object";
    default:
      return "a " + std::string(value.IsSymbol() ? "symbol" : "bigint");
  }
}

}  // namespace krunbox
