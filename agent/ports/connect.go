package ports

// port.connect (PROTOCOL.md "Ports"): the host reaches a TCP port on the
// sandbox's loopback through the agent connection, so it needs no network
// of its own (network: false works, and so does a VM without TSI).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

// portDialTimeout bounds a connect to a listener whose backlog is full (the
// kernel keeps retrying the SYN); a refused or accepted connect is immediate.
const portDialTimeout = 30 * time.Second

// Connect (port.connect) dials 127.0.0.1:port inside the sandbox, answers EVENT
// {type: "connected"}, then relays bytes both ways (port_relay.go) and
// answers RESPONSE {toService, fromService} once both directions have ended.
func Connect(s protocol.Stream, r *protocol.PortConnectRequest) {
	if r.Port < 1 || r.Port > 65535 {
		_ = s.Fail(protocol.BadArgumentError("port", "must be an integer 1-65535, got "+strconv.FormatInt(r.Port, 10)))
		return
	}
	port := int(r.Port)
	tc, oe := dialSandboxPort(s.Context(), port)
	if oe != nil {
		_ = s.Fail(oe)
		return
	}
	defer tc.Close()
	if s.Event(protocol.PortConnectConnectedEvent{Type: protocol.EventConnected}) != nil {
		return
	}
	toService, fromService, oe := relayPort(s, tc, port)
	if oe != nil {
		_ = s.Fail(oe)
		return
	}
	_ = s.Respond(protocol.PortConnectResponse{ToService: toService, FromService: fromService})
}

// dialSandboxPort connects to 127.0.0.1:port in the agent's network namespace,
// which is the sandbox's.
func dialSandboxPort(ctx context.Context, port int) (*net.TCPConn, *protocol.OpError) {
	d := net.Dialer{Timeout: portDialTimeout}
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		return c.(*net.TCPConn), nil
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		oe := protocol.PortRefusedError(port, "nothing listens there (connection refused)")
		oe.Errno = "ECONNREFUSED"
		return nil, oe
	case ctx.Err() != nil:
		return nil, protocol.AbortedError(fmt.Sprintf("connect to port %d", port), "was abandoned by the host")
	case isTimeout(err):
		return nil, protocol.TimedOutError(fmt.Sprintf("port %d in the sandbox", port), fmt.Sprintf("did not accept a connection within %s", portDialTimeout))
	default:
		return nil, protocol.PortRefusedError(port, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
