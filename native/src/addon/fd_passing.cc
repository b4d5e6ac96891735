#include "fd_passing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

class ReceiveListenerWorker : public PromiseWorker {
 public:
  ReceiveListenerWorker(Napi::Env env, int channel, int port, int timeout_ms)
      : PromiseWorker(env, "krunbox.receiveListener"), channel_(channel), port_(port), timeout_ms_(timeout_ms) {}

 protected:
  void Execute() override {
    pollfd p = {channel_, POLLIN, 0};
    int ready;
    do ready = poll(&p, 1, timeout_ms_);
    while (ready < 0 && errno == EINTR);
    if (ready == 0) return Refuse("nothing came within " + std::to_string(timeout_ms_) + " ms");
    if (ready < 0) return Refuse(std::string("poll: ") + strerror(errno));
    char data[64];
    iovec iov = {data, sizeof data};
    // Room for one fd only: the kernel closes any more a message carries (and says MSG_CTRUNC).
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(channel_, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return Refuse(std::string("recvmsg: ") + strerror(errno));
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c != nullptr && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(&fd_, CMSG_DATA(c), sizeof(int));
    if (n == 0 && fd_ < 0) return Refuse("the channel closed");
    if (msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) return Refuse("more than one socket, or a message too long");
    if (fd_ < 0) return Refuse("a message without a socket");
    std::string why = NotTheListener(fd_, port_);
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
  iovec iov = {bytes.Data(), bytes.Length()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t n;
  do n = sendmsg(channel, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0) throw CodedError(env, kHostWriteFailed, std::string("sendmsg: ") + strerror(errno), errno, "sendmsg");
  return env.Undefined();
}

}  // namespace krunbox
