#include "fd_passing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "js_args.h"
#include "native_error.h"
#include "promise_worker.h"

namespace krunbox {
namespace {

// What a refused handover is: the peer (an agent, untrusted) sent something else.
constexpr const char *kHandoverRefused = "S300";

int IntOption(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof value;
  if (getsockopt(fd, level, name, &value, &size) != 0) return -1;
  return value;
}

// Why `fd` is not an IPv4 TCP listener on 127.0.0.1:port (empty: it is).
std::string NotTheListener(int fd, int port) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return "not a socket";
  if (IntOption(fd, SOL_SOCKET, SO_DOMAIN) != AF_INET) return "not an IPv4 socket";
  if (IntOption(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM || IntOption(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP)
    return "not a TCP socket";
  if (IntOption(fd, SOL_SOCKET, SO_ACCEPTCONN) != 1) return "not listening";
  sockaddr_in addr = {};
  socklen_t size = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &size) != 0 || addr.sin_family != AF_INET ||
      addr.sin_addr.s_addr != htonl(INADDR_LOOPBACK) || ntohs(addr.sin_port) != port)
    return "not bound to 127.0.0.1:" + std::to_string(port);
  return "";
}

// Waits up to timeout_ms for `fd` to be readable: 1 ready, 0 timed out, -1 error (errno).
int WaitReadable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  int ready;
  do ready = poll(&p, 1, timeout_ms);
  while (ready < 0 && errno == EINTR);
  return ready;
}

// A message of one buffer with room for one fd (and no more).
struct OneFdMessage {
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};

  OneFdMessage(void *bytes, size_t size) : iov{bytes, size} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  OneFdMessage(const OneFdMessage &) = delete;
  OneFdMessage &operator=(const OneFdMessage &) = delete;
};

// One message on `sock` (without waiting): its bytes to `data` and the one fd it carries, or -1
// with `why` (the kernel closes any fd past the first: MSG_CTRUNC).
int ReceiveOne(int sock, std::string &data, std::string &why) {
  char buf[4096];
  OneFdMessage m(buf, sizeof buf);
  msghdr &msg = m.msg;
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    why = std::string("recvmsg: ") + strerror(errno);
    return -1;
  }
  int fd = -1;
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
  const char *bad = nullptr;
  if (n == 0 && fd < 0)
    bad = "the channel closed";
  else if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
    bad = "more than one socket, or a message too long";
  else if (fd < 0)
    bad = "a message without a socket";
  if (bad != nullptr) {
    if (fd >= 0) close(fd);
    why = bad;
    return -1;
  }
  data.assign(buf, static_cast<size_t>(n));
  return fd;
}

// Sends `bytes` and a copy of `fd` on `sock` in one message, without waiting; errno on failure.
int SendOne(int sock, int fd, const char *bytes, size_t size) {
  OneFdMessage m(const_cast<char *>(bytes), size);
  msghdr &msg = m.msg;
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n < 0 ? errno : 0;
}

class ReceiveListenerWorker : public PromiseWorker {
 public:
  ReceiveListenerWorker(Napi::Env env, int channel, int port, int timeout_ms)
      : PromiseWorker(env, "krunbox.receiveListener"), channel_(channel), port_(port), timeout_ms_(timeout_ms) {}

 protected:
  void Execute() override {
    int ready = WaitReadable(channel_, timeout_ms_);
    if (ready == 0) return Refuse("nothing came within " + std::to_string(timeout_ms_) + " ms");
    if (ready < 0) return Refuse(std::string("poll: ") + strerror(errno));
    std::string data, why;
    fd_ = ReceiveOne(channel_, data, why);
    if (fd_ < 0) return Refuse(why);
    why = NotTheListener(fd_, port_);
    if (!why.empty()) Refuse("the socket sent is " + why);
  }
  void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) override {
    if (!refusal_.empty()) {
      deferred.Reject(CodedError(env, kHandoverRefused, "proxy listener handover refused: " + refusal_).Value());
      return;
    }
    deferred.Resolve(Napi::Number::New(env, fd_));
    fd_ = -1;  // JS owns it now
  }
  void Discard() override {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  void Refuse(const std::string &why) {
    refusal_ = why;
    Discard();
  }
  int channel_, port_, timeout_ms_;
  int fd_ = -1;
  std::string refusal_;
};

class AcceptFdWorker : public PromiseWorker {
 public:
  AcceptFdWorker(Napi::Env env, int listener, int timeout_ms)
      : PromiseWorker(env, "krunbox.acceptFd"), listener_(listener), timeout_ms_(timeout_ms) {}

 protected:
  void Execute() override {
    // A connection without one socket is skipped: the next one may be the awaited one.
    for (;;) {
      int ready = WaitReadable(listener_, timeout_ms_);
      if (ready <= 0) return;
      int conn = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn < 0) {
        if (errno == EAGAIN || errno == ECONNABORTED || errno == EINTR) continue;
        return;
      }
      std::string why;
      // The sender sent before it could learn of the accept: its message is there, or it never will be.
      if (WaitReadable(conn, timeout_ms_) == 1) fd_ = ReceiveOne(conn, data_, why);
      close(conn);
      if (fd_ >= 0) return;
    }
  }
  void Settle(Napi::Env env, Napi::Promise::Deferred &deferred) override {
    if (fd_ < 0) {
      deferred.Resolve(env.Null());
      return;
    }
    Napi::Object out = Napi::Object::New(env);
    out.Set("fd", Napi::Number::New(env, fd_));
    out.Set("data", Napi::Buffer<char>::Copy(env, data_.data(), data_.size()));
    deferred.Resolve(out);
    fd_ = -1;  // JS owns it now
  }
  void Discard() override {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int listener_, timeout_ms_;
  int fd_ = -1;
  std::string data_;
};

}  // namespace

Napi::Value SocketPair(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string kind = ToCString(info[0], "socketPair: kind");
  if (kind != "seqpacket" && kind != "stream")
    ThrowInvalid(env, "socketPair: kind must be \"seqpacket\" or \"stream\", got \"" + kind + "\"");
  int fds[2];
  int type = (kind == "seqpacket" ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC;
  if (socketpair(AF_UNIX, type, 0, fds) != 0)
    throw CodedError(env, kInternal, std::string("socketpair: ") + strerror(errno), errno, "socketpair");
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, fds[0]));
  out.Set(1u, Napi::Number::New(env, fds[1]));
  return out;
}

Napi::Value ReceiveListener(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int channel = static_cast<int>(ToInteger(info[0], "receiveListener: channelFd", 0, 1 << 30));
  int port = static_cast<int>(ToInteger(info[1], "receiveListener: port", 1, 65535));
  int timeout_ms = static_cast<int>(ToInteger(info[2], "receiveListener: timeoutMs", 0, 1 << 30));
  auto *worker = new ReceiveListenerWorker(env, channel, port, timeout_ms);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value SendFd(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int channel = static_cast<int>(ToInteger(info[0], "sendFd: channelFd", 0, 1 << 30));
  int fd = static_cast<int>(ToInteger(info[1], "sendFd: fd", 0, 1 << 30));
  if (!info[2].IsBuffer()) ThrowInvalid(env, "sendFd: bytes must be a Buffer, got " + Describe(info[2]));
  Napi::Buffer<char> bytes = info[2].As<Napi::Buffer<char>>();
  int error = SendOne(channel, fd, bytes.Data(), bytes.Length());
  if (error != 0) throw CodedError(env, kHostWriteFailed, std::string("sendmsg: ") + strerror(error), error, "sendmsg");
  return env.Undefined();
}

Napi::Value SendFdTo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string path = ToCString(info[0], "sendFdTo: path");
  int fd = static_cast<int>(ToInteger(info[1], "sendFdTo: fd", 0, 1 << 30));
  if (!info[2].IsBuffer()) ThrowInvalid(env, "sendFdTo: bytes must be a Buffer, got " + Describe(info[2]));
  Napi::Buffer<char> bytes = info[2].As<Napi::Buffer<char>>();
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) ThrowInvalid(env, "sendFdTo: path is too long: \"" + path + "\"");
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) throw CodedError(env, kInternal, std::string("socket: ") + strerror(errno), errno, "socket");
  const char *failed = nullptr;
  int error = 0;
  if (connect(sock, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    failed = "connect";
    error = errno;
  } else if ((error = SendOne(sock, fd, bytes.Data(), bytes.Length())) != 0) {
    failed = "sendmsg";
  }
  close(sock);
  if (failed != nullptr)
    throw CodedError(env, kHostWriteFailed, path + ": " + failed + ": " + strerror(error), error, failed, path);
  return env.Undefined();
}

Napi::Value AcceptFd(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int listener = static_cast<int>(ToInteger(info[0], "acceptFd: listenFd", 0, 1 << 30));
  int timeout_ms = static_cast<int>(ToInteger(info[1], "acceptFd: timeoutMs", 0, 1 << 30));
  auto *worker = new AcceptFdWorker(env, listener, timeout_ms);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace krunbox
