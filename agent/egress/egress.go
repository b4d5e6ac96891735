// Package egress is a sandbox's only way out under a network policy. The sandbox has a
// network namespace of its own with nothing but `lo`; the agent binds its
// 127.0.0.1:<proxy port> (TCP) and 127.0.0.1:53 (UDP and TCP). It hands the proxy's listener to
// the host, which accepts the sandbox's proxy connections itself (handoff.go), and carries each
// resolver connection or query over a unix socket the host listens on in the control
// directory. The host knows the sandbox by the listener or socket a connection arrives on; when
// the host side is gone the proxy port refuses and the resolver's connect fails: the sandbox
// reaches nothing.
package egress

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"krunbox/agent/config"
)

// Config is the relay's part of the boot configuration (nil: no network policy)
// and HostLoopback an allow entry of the host's loopback (a CIDR and its port):
// both generated from the contract (protocol/v1.json bootConfig, agent/config).
type (
	Config       = config.Egress
	HostLoopback = config.HostLoopback
)

// The host's resolver socket, in the control directory.
const DNSSocket = "dns.sock"

const (
	// Resolver connections relayed, and requests for the sandbox's own loopback served, at once.
	maxStreams = 1024
	// UDP queries waiting for the host's answer at once; past it a query is dropped (the
	// client retries), as a busy resolver would.
	maxQueries = 64
	// A query's round trip through the host, at most (the host's own lookups take 4 s at most).
	queryTimeout = 10 * time.Second
	dialTimeout  = 5 * time.Second
)

// Relay holds the sandbox-side listeners.
type Relay struct {
	c       Config
	proxy   *net.TCPListener
	dnsTCP  *net.TCPListener
	dnsUDP  *net.UDPConn
	dirFd   int
	streams int64
	queries int64
}

// Listen binds the sandbox-side ports (port 53 needs CAP_NET_BIND_SERVICE: before the
// privileges are dropped).
func Listen(c *Config) (*Relay, error) {
	if c.ProxyPort < 1 || c.ProxyPort > 65535 || c.DNSPort < 1 || c.DNSPort > 65535 {
		return nil, fmt.Errorf("egress ports %d and %d must be within 1..65535", c.ProxyPort, c.DNSPort)
	}
	if c.HandoffFd <= 0 {
		return nil, fmt.Errorf("egress needs a handoff channel (handoffFd) for the proxy's listener")
	}
	r := &Relay{c: *c, dirFd: -1}
	lo := net.IPv4(127, 0, 0, 1)
	var err error
	if r.proxy, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: lo, Port: c.ProxyPort}); err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1:%d: %v", c.ProxyPort, err)
	}
	if r.dnsTCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: lo, Port: c.DNSPort}); err != nil {
		r.proxy.Close()
		return nil, fmt.Errorf("listen on 127.0.0.1:%d/tcp: %v", c.DNSPort, err)
	}
	if r.dnsUDP, err = net.ListenUDP("udp4", &net.UDPAddr{IP: lo, Port: c.DNSPort}); err != nil {
		r.proxy.Close()
		r.dnsTCP.Close()
		return nil, fmt.Errorf("listen on 127.0.0.1:%d/udp: %v", c.DNSPort, err)
	}
	return r, nil
}

// Serve relays for good; dirFd is the control directory, held open (no path leads there
// after the pivot).
func (r *Relay) Serve(dirFd int) {
	r.dirFd = dirFd
	go r.handOff()
	go r.accept(r.dnsTCP, func(c *net.TCPConn) { r.splice(c, DNSSocket) })
	go r.serveUDP()
}

func (r *Relay) dial(name string) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unix", fmt.Sprintf("/proc/self/fd/%d/%s", r.dirFd, name), dialTimeout)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

func (r *Relay) accept(l *net.TCPListener, serve func(*net.TCPConn)) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			// EMFILE and the like: the sandbox's own doing; back off instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if atomic.AddInt64(&r.streams, 1) > maxStreams {
			atomic.AddInt64(&r.streams, -1)
			c.Close()
			continue
		}
		go func() {
			defer atomic.AddInt64(&r.streams, -1)
			serve(c)
		}()
	}
}

// splice carries c to the host's socket `name`; half-closes pass both ways. A host that is
// not there closes c: nothing else is reachable.
func (r *Relay) splice(c *net.TCPConn, name string) {
	defer c.Close()
	up, err := r.dial(name)
	if err != nil {
		return
	}
	defer up.Close()
	pipe(c, up)
}

// halfCloser is a connection whose write side closes alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// copyBuffers: a relayed connection's copy buffer is reused, not allocated (32 KiB) per
// connection and direction; the TCP side's own copy splices and needs none.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// pipe copies both ways until both have ended; a failed direction ends both. One direction
// runs in the caller's goroutine: a goroutine less per connection.
func pipe(a, b halfCloser) {
	copyOne := func(dst, src halfCloser) {
		buf := copyBuffers.Get().(*[]byte)
		defer copyBuffers.Put(buf)
		if _, err := io.CopyBuffer(dst, src, *buf); err != nil {
			a.Close()
			b.Close()
		} else {
			dst.CloseWrite()
		}
	}
	done := make(chan struct{})
	go func() {
		copyOne(a, b)
		close(done)
	}()
	copyOne(b, a)
	<-done
}

// serveUDP wraps each query in DNS-over-TCP framing (a 2-byte length) on a connection of its
// own to the host's resolver socket, and sends the answer back as a datagram.
func (r *Relay) serveUDP() {
	buf := make([]byte, 65535)
	for {
		n, from, err := r.dnsUDP.ReadFromUDP(buf)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n < 12 || atomic.AddInt64(&r.queries, 1) > maxQueries {
			if n >= 12 {
				atomic.AddInt64(&r.queries, -1)
			}
			continue
		}
		query := make([]byte, 2+n)
		binary.BigEndian.PutUint16(query, uint16(n))
		copy(query[2:], buf[:n])
		go func() {
			defer atomic.AddInt64(&r.queries, -1)
			if answer := r.ask(query); answer != nil {
				r.dnsUDP.WriteToUDP(answer, from)
			}
		}()
	}
}

func (r *Relay) ask(query []byte) []byte {
	up, err := r.dial(DNSSocket)
	if err != nil {
		return nil
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(queryTimeout))
	if _, err := up.Write(query); err != nil {
		return nil
	}
	var size [2]byte
	if _, err := io.ReadFull(up, size[:]); err != nil {
		return nil
	}
	answer := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(up, answer); err != nil {
		return nil
	}
	return answer
}
