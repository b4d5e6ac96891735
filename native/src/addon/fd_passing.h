// Sockets handed between the host and a sandbox's agent over a unix seqpacket channel
// (lib/network/proxy-handoff.ts, agent/egress/handoff.go): the agent's proxy listener comes to
// the host, so the host accepts the sandbox's proxy connections itself (no relay hop), and the
// host hands a request for the sandbox's own loopback back to the agent.
#ifndef KRUNBOX_FD_PASSING_H
#define KRUNBOX_FD_PASSING_H

#include <napi.h>

namespace krunbox {

// socketPair(kind: 'seqpacket' | 'stream') -> [fd, fd], both close-on-exec.
Napi::Value SocketPair(const Napi::CallbackInfo &info);

// receiveListener(channelFd, port, timeoutMs) -> Promise<fd>, on the libuv pool: the one socket
// the peer sends, kept only if it is an IPv4 TCP socket listening on 127.0.0.1:port; anything
// else (no socket, several, a file, another kind of socket) is closed and the promise rejects.
Napi::Value ReceiveListener(const Napi::CallbackInfo &info);

// sendFd(channelFd, fd, bytes): one message carrying `bytes` and a copy of `fd`, without
// waiting (a peer that does not read makes it fail, EAGAIN, never block).
Napi::Value SendFd(const Napi::CallbackInfo &info);

// sendFdTo(path, fd, bytes): connects to the unix stream socket at `path`, sends `bytes` and a copy
// of `fd` in one message, and closes the connection (the detached sandbox's handoff end to the
// network keeper, lib/network/keeper.ts).
Napi::Value SendFdTo(const Napi::CallbackInfo &info);

// acceptFd(listenFd, timeoutMs) -> Promise<{ fd, data } | null>, on the libuv pool: the next
// connection on a unix stream listener, its first message's bytes and the one socket it carries
// (null when none came within the time; a connection without exactly one socket is closed and
// skipped).
Napi::Value AcceptFd(const Napi::CallbackInfo &info);

}  // namespace krunbox

#endif
