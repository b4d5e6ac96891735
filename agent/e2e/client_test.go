package e2e

// A small host-side protocol client for the end-to-end tests (the agent's
// own codec lives in package main and cannot be imported).

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

const (
	tHello, tRequest, tResponse, tError, tEvent = 1, 2, 3, 4, 5
	tData, tOutput, tWindow, tPing, tPong       = 6, 7, 8, 10, 11
	FlagEnd                                     = 1
)

type frame struct {
	stream  uint32
	typ     byte
	flags   byte
	payload []byte
}

func encode(stream uint32, typ, flags byte, p []byte) []byte {
	b := make([]byte, 10+len(p))
	binary.BigEndian.PutUint32(b, uint32(len(p)))
	binary.BigEndian.PutUint32(b[4:], stream)
	b[8], b[9] = typ, flags
	copy(b[10:], p)
	return b
}

type client struct {
	t      testing.TB
	conn   net.Conn
	wmu    sync.Mutex
	mu     sync.Mutex
	next   uint32
	subs   map[uint32]chan frame
	ctrl   chan frame
	closed chan struct{}
}

func dial(t testing.TB, sock string) *client {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &client{t: t, conn: conn, next: 1, subs: map[uint32]chan frame{}, ctrl: make(chan frame, 16), closed: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { conn.Close() })
	c.send(encode(0, tHello, 0, []byte(`{"versionMin":1,"versionMax":1,"client":"e2e"}`)))
	if f := c.ctrlFrame(5 * time.Second); f.typ != tHello {
		t.Fatalf("handshake: %d %s", f.typ, f.payload)
	}
	return c
}

func (c *client) send(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.conn.Write(b)
}

func (c *client) readLoop() {
	defer close(c.closed)
	br := bufio.NewReader(c.conn)
	for {
		var h [10]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return
		}
		f := frame{binary.BigEndian.Uint32(h[4:]), h[8], h[9], make([]byte, binary.BigEndian.Uint32(h[:]))}
		if _, err := io.ReadFull(br, f.payload); err != nil {
			return
		}
		if f.stream == 0 {
			c.ctrl <- f
			continue
		}
		if f.typ == tOutput {
			var w [4]byte
			binary.BigEndian.PutUint32(w[:], uint32(len(f.payload)-17))
			c.send(encode(f.stream, tWindow, 0, w[:]))
		}
		c.mu.Lock()
		ch := c.subs[f.stream]
		c.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
}

func (c *client) ctrlFrame(timeout time.Duration) frame {
	select {
	case f := <-c.ctrl:
		return f
	case <-time.After(timeout):
		c.t.Fatalf("no stream-0 frame within %v", timeout)
	}
	return frame{}
}

func (c *client) open(op string, args map[string]any) (uint32, chan frame) {
	req := map[string]any{"op": op}
	for k, v := range args {
		req[k] = v
	}
	b, _ := json.Marshal(req)
	ch := make(chan frame, 4096)
	c.mu.Lock()
	id := c.next
	c.next += 2
	c.subs[id] = ch
	c.mu.Unlock()
	c.send(encode(id, tRequest, 0, b))
	return id, ch
}

type result struct {
	stdout, stderr []byte
	events         []map[string]any
	final          map[string]any
	isError        bool
}

func collect(t testing.TB, ch chan frame, timeout time.Duration) result {
	t.Helper()
	var r result
	deadline := time.After(timeout)
	for {
		select {
		case f := <-ch:
			switch f.typ {
			case tOutput:
				if f.payload[0] == 1 {
					r.stdout = append(r.stdout, f.payload[17:]...)
				} else {
					r.stderr = append(r.stderr, f.payload[17:]...)
				}
			case tEvent:
				var m map[string]any
				_ = json.Unmarshal(f.payload, &m)
				r.events = append(r.events, m)
			case tResponse, tError:
				_ = json.Unmarshal(f.payload, &r.final)
				r.isError = f.typ == tError
				return r
			}
		case <-deadline:
			t.Fatalf("no final frame within %v", timeout)
		}
	}
}

func (c *client) call(op string, args map[string]any) result {
	c.t.Helper()
	_, ch := c.open(op, args)
	return collect(c.t, ch, 30*time.Second)
}

// run executes argv to completion with follow and returns stdout and the final command.
func (c *client) run(argv ...string) (string, map[string]any) {
	c.t.Helper()
	r := c.call("exec.start", map[string]any{"argv": argv, "follow": true, "timeoutMs": 20000})
	if r.isError {
		c.t.Fatalf("exec.start %v: %v", argv, r.final)
	}
	cmd, _ := r.final["command"].(map[string]any)
	return string(r.stdout), cmd
}
