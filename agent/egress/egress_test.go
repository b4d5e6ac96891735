package egress

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// relayWithHost starts a relay on free ports whose control directory is a temp dir; host, when
// not nil, serves the proxy socket there.
func relayWithHost(t *testing.T, c Config, proxyHost, dnsHost func(net.Conn)) *Relay {
	t.Helper()
	dir := t.TempDir()
	for name, serve := range map[string]func(net.Conn){ProxySocket: proxyHost, DNSSocket: dnsHost} {
		if serve == nil {
			continue
		}
		l, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		serve := serve
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				go serve(conn)
			}
		}()
	}
	c.ProxyPort, c.DNSPort = freePort(t), freePort(t)
	r, err := Listen(&c)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Serve(fd)
	return r
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func dialProxy(t *testing.T, r *Relay) *net.TCPConn {
	c, err := net.Dial("tcp4", r.proxy.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// The client half-closes right after its request (nc does): the host's answer still arrives.
func TestProxyAnswerAfterClientHalfClose(t *testing.T) {
	r := relayWithHost(t, Config{}, func(c net.Conn) {
		defer c.Close()
		got, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(got), "CONNECT example.test:443 ") {
			return
		}
		c.Write([]byte("HTTP/1.1 403 Forbidden\r\n\r\n"))
	}, nil)
	c := dialProxy(t, r)
	c.Write([]byte("CONNECT example.test:443 HTTP/1.1\r\n\r\n"))
	c.CloseWrite()
	got, _ := io.ReadAll(c)
	if string(got) != "HTTP/1.1 403 Forbidden\r\n\r\n" {
		t.Fatalf("got %q", got)
	}
}

// An absolute-form request for the sandbox's own loopback goes there in origin form; one the
// policy names as the host's goes to the host.
func TestProxyOwnLoopback(t *testing.T) {
	local, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	port := local.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := local.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, _ := br.ReadString('\n')
			// The whole head is read before the answer: a close with unread bytes sends a
			// reset, which could overtake the answer on its way back (a flaky failure).
			for rest := line; strings.HasSuffix(line, "HTTP/1.1\r\n") && rest != "\r\n" && rest != ""; {
				rest, _ = br.ReadString('\n')
			}
			c.Write([]byte("local saw " + line))
			c.Close()
		}
	}()
	named := Config{HostLoopback: []HostLoopback{{Net: "127.0.0.1/32", Port: port}}}
	for _, tc := range []struct {
		cfg  Config
		req  string
		want string
	}{
		{Config{}, "GET http://127.0.0.1:" + strconv.Itoa(port) + "/x?y HTTP/1.1\r\nHost: a\r\n\r\n", "local saw GET /x?y HTTP/1.1\r\n"},
		{Config{}, "GET http://LOCALHOST.:" + strconv.Itoa(port) + "/ HTTP/1.1\r\n\r\n", "local saw GET / HTTP/1.1\r\n"},
		{Config{}, "CONNECT [::ffff:127.0.0.1]:" + strconv.Itoa(port) + " HTTP/1.1\r\nHost: a\r\n\r\nhello\n", "HTTP/1.1 200 Connection Established\r\n\r\nlocal saw hello\n"},
		{Config{}, "GET http://127.1:" + strconv.Itoa(port) + "/ HTTP/1.1\r\n\r\n", "host"},
		{named, "GET http://127.0.0.1:" + strconv.Itoa(port) + "/ HTTP/1.1\r\n\r\n", "host"},
	} {
		r := relayWithHost(t, tc.cfg, func(c net.Conn) { c.Write([]byte("host")); c.Close() }, nil)
		c := dialProxy(t, r)
		c.Write([]byte(tc.req))
		got, _ := io.ReadAll(c)
		if string(got) != tc.want {
			t.Errorf("%q: got %q, want %q", tc.req, got, tc.want)
		}
	}
}

// No host side: the sandbox's connection is closed with nothing, its query dropped.
func TestHostGoneFailsClosed(t *testing.T) {
	r := relayWithHost(t, Config{}, nil, nil)
	c := dialProxy(t, r)
	c.Write([]byte("GET http://example.test/ HTTP/1.1\r\n\r\n"))
	if got, _ := io.ReadAll(c); len(got) != 0 {
		t.Fatalf("got %q", got)
	}
	u, err := net.Dial("udp4", r.dnsUDP.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	u.Write(make([]byte, 20))
	u.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := u.Read(make([]byte, 100)); err == nil {
		t.Fatalf("an answer of %d bytes with no host", n)
	}
}

// A UDP query travels after its 2-byte length, and the answer comes back as a datagram.
func TestUDPQueryFramed(t *testing.T) {
	r := relayWithHost(t, Config{}, nil, func(c net.Conn) {
		defer c.Close()
		var size [2]byte
		io.ReadFull(c, size[:])
		q := make([]byte, binary.BigEndian.Uint16(size[:]))
		io.ReadFull(c, q)
		q[2] |= 0x80
		binary.BigEndian.PutUint16(size[:], uint16(len(q)))
		c.Write(append(size[:], q...))
	})
	u, err := net.Dial("udp4", r.dnsUDP.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	q := []byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1}
	u.Write(q)
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, err := u.Read(buf)
	if err != nil || n != len(q) || buf[2] != 0x81 {
		t.Fatalf("answer %x, %v", buf[:n], err)
	}
}
