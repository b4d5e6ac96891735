package egress

// Proxy requests for the sandbox's own loopback stay in the sandbox. Programs that ignore
// no_proxy (busybox wget) send `GET http://127.0.0.1:8080/` to the proxy; on the host that
// would mean the host's loopback, which the policy refuses. The host hands such a request
// back (handoff.go); the relay reads its request line again and serves it from the sandbox's
// loopback, unless the policy names that host loopback address and port (allowHostLoopback).

import (
	"bufio"
	"bytes"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	requestLineMax = 8192
	headerLinesMax = 100
	// As long as the host's proxy waits for a request.
	firstLineTimeout = 10 * time.Second
)

func peekAll(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

func requestLine(line []byte) (method, target, proto string, ok bool) {
	f := strings.Fields(string(bytes.TrimRight(line, "\r\n")))
	if len(f) != 3 || !strings.HasPrefix(f[2], "HTTP/1.") {
		return "", "", "", false
	}
	return f[0], f[1], f[2], true
}

// ownLoopback is the sandbox-side address a request goes to when its destination is a
// loopback address (or localhost) the policy does not name as the host's.
func (r *Relay) ownLoopback(method, target string) (string, bool) {
	var host, port string
	if method == "CONNECT" {
		h, p, err := net.SplitHostPort(target)
		if err != nil {
			return "", false
		}
		host, port = h, p
	} else {
		u, err := url.Parse(target)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return "", false
		}
		host, port = u.Hostname(), u.Port()
		if port == "" {
			port = "80"
		}
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	var ip net.IP
	if name == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	} else if ip = net.ParseIP(name); ip == nil || !(ip.IsLoopback() || ip.IsUnspecified()) {
		return "", false
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	for _, named := range r.c.HostLoopback {
		if _, cidr, err := net.ParseCIDR(named.Net); err == nil && cidr.Contains(ip) && strconv.Itoa(named.Port) == port {
			return "", false
		}
	}
	return net.JoinHostPort(ip.String(), port), true
}

// serveLocal answers a CONNECT itself, or passes an absolute-form request on in origin form.
func serveLocal(c halfCloser, br *bufio.Reader, addr, method, target, proto string) {
	defer c.Close()
	var head []byte
	if method == "CONNECT" {
		c.SetReadDeadline(time.Now().Add(firstLineTimeout))
		for i := 0; ; i++ {
			line, err := br.ReadSlice('\n')
			if err != nil || i == headerLinesMax {
				return
			}
			if len(bytes.TrimRight(line, "\r\n")) == 0 {
				break
			}
		}
		c.SetReadDeadline(time.Time{})
	} else {
		u, _ := url.Parse(target)
		head = []byte(method + " " + u.RequestURI() + " " + proto + "\r\n")
	}
	local, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		c.Write([]byte("HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(err.Error())+1) + "\r\n\r\n" + err.Error() + "\n"))
		return
	}
	lc := local.(*net.TCPConn)
	defer lc.Close()
	if method == "CONNECT" {
		if _, err := c.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
			return
		}
	}
	if _, err := lc.Write(append(head, peekAll(br)...)); err != nil {
		return
	}
	pipe(c, lc)
}
