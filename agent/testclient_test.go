package main

// A minimal host side of the protocol for tests: handshake, requests, and
// automatic WINDOW grants for consumed OUTPUT/DATA (as the real host does).

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"krunbox/agent/protocol"
)

type tclient struct {
	t      testing.TB
	conn   net.Conn
	wmu    sync.Mutex
	mu     sync.Mutex
	nextID uint32
	subs   map[uint32]*tstream
	ctrl   chan protocol.Frame // stream 0
	closed chan struct{}
}

type tstream struct {
	c          *tclient
	id         uint32
	frames     chan protocol.Frame
	autoCredit atomic.Bool
}

func dialRaw(t testing.TB, path string) *tclient {
	t.Helper()
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		conn, err = net.Dial("unix", path)
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	c := &tclient{t: t, conn: conn, nextID: 1, subs: map[uint32]*tstream{}, ctrl: make(chan protocol.Frame, 64), closed: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { conn.Close() })
	return c
}

// dialAgent connects and completes the handshake.
func dialAgent(t testing.TB, path, token string) (*tclient, map[string]any) {
	t.Helper()
	c := dialRaw(t, path)
	hello := map[string]any{"versionMin": 1, "versionMax": 1, "client": "test"}
	if token != "" {
		hello["token"] = token
	}
	c.sendJSON(0, protocol.FtHello, 0, hello)
	f := c.ctrlFrame(5 * time.Second)
	if f.Type != protocol.FtHello {
		t.Fatalf("handshake: got frame type %#x %s", f.Type, f.Payload)
	}
	var h map[string]any
	if err := json.Unmarshal(f.Payload, &h); err != nil {
		t.Fatal(err)
	}
	return c, h
}

func (c *tclient) ctrlFrame(timeout time.Duration) protocol.Frame {
	c.t.Helper()
	select {
	case f := <-c.ctrl:
		return f
	case <-c.closed:
		// The read loop queues a last frame before it sees EOF: hand that over first.
		select {
		case f := <-c.ctrl:
			return f
		default:
			return protocol.Frame{Type: 0}
		}
	case <-time.After(timeout):
		c.t.Fatalf("no frame on stream 0 within %v", timeout)
	}
	return protocol.Frame{}
}

func (c *tclient) readLoop() {
	defer close(c.closed)
	br := bufio.NewReader(c.conn)
	for {
		f, err := protocol.ReadFrame(br)
		if err != nil {
			return
		}
		if f.Stream == 0 {
			c.ctrl <- f
			continue
		}
		c.mu.Lock()
		s := c.subs[f.Stream]
		c.mu.Unlock()
		if s == nil {
			continue
		}
		if s.autoCredit.Load() {
			n := len(f.Payload)
			if f.Type == protocol.FtOutput {
				n -= protocol.OutputHeaderLen
			}
			if (f.Type == protocol.FtOutput || f.Type == protocol.FtData) && n > 0 {
				c.sendRaw(protocol.EncodeFrame(f.Stream, protocol.FtWindow, 0, protocol.WindowPayload(uint32(n))))
			}
		}
		s.frames <- f
	}
}

func (c *tclient) sendRaw(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.conn.Write(b)
}

func (c *tclient) sendJSON(stream uint32, typ, flags byte, v any) {
	b, _ := json.Marshal(v)
	c.sendRaw(protocol.EncodeFrame(stream, typ, flags, b))
}

// request opens a stream with REQUEST {op, ...args}; the client grants credit for what it receives.
func (c *tclient) request(op string, args map[string]any) *tstream {
	return c.open(op, args, true)
}

// requestWithoutCredit is request with no credit granted until the test turns autoCredit on:
// turned off after the request, a first frame could already have been credited.
func (c *tclient) requestWithoutCredit(op string, args map[string]any) *tstream {
	return c.open(op, args, false)
}

func (c *tclient) open(op string, args map[string]any, autoCredit bool) *tstream {
	req := map[string]any{"op": op}
	for k, v := range args {
		req[k] = v
	}
	c.mu.Lock()
	id := c.nextID
	c.nextID += 2
	s := &tstream{c: c, id: id, frames: make(chan protocol.Frame, 4096)}
	s.autoCredit.Store(autoCredit)
	c.subs[id] = s
	c.mu.Unlock()
	c.sendJSON(id, protocol.FtRequest, 0, req)
	return s
}

func (s *tstream) next(timeout time.Duration) protocol.Frame {
	s.c.t.Helper()
	select {
	case f := <-s.frames:
		return f
	case <-s.c.closed:
		s.c.t.Fatalf("connection closed while waiting on stream %d", s.id)
	case <-time.After(timeout):
		s.c.t.Fatalf("stream %d: no frame within %v", s.id, timeout)
	}
	return protocol.Frame{}
}

type tresult struct {
	events  []map[string]any
	output  map[byte][]byte
	seqs    []uint64
	data    []byte
	final   protocol.Frame
	finalJS map[string]any
}

// collect reads frames until the final RESPONSE/ERROR.
func (s *tstream) collect(timeout time.Duration) tresult {
	s.c.t.Helper()
	r := tresult{output: map[byte][]byte{}}
	deadline := time.Now().Add(timeout)
	for {
		f := s.next(time.Until(deadline))
		switch f.Type {
		case protocol.FtEvent:
			var m map[string]any
			_ = json.Unmarshal(f.Payload, &m)
			r.events = append(r.events, m)
		case protocol.FtOutput:
			fd := f.Payload[0]
			r.seqs = append(r.seqs, binary.BigEndian.Uint64(f.Payload[1:9]))
			r.output[fd] = append(r.output[fd], f.Payload[protocol.OutputHeaderLen:]...)
		case protocol.FtData:
			r.data = append(r.data, f.Payload...)
		case protocol.FtWindow:
		case protocol.FtResponse, protocol.FtError:
			if f.Flags&protocol.FlagEnd == 0 {
				s.c.t.Fatalf("final frame without END")
			}
			r.final = f
			_ = json.Unmarshal(f.Payload, &r.finalJS)
			return r
		default:
			s.c.t.Fatalf("unexpected frame type %#x", f.Type)
		}
	}
}

// call is request + collect, failing the test on an ERROR frame.
func (c *tclient) call(op string, args map[string]any) map[string]any {
	c.t.Helper()
	r := c.request(op, args).collect(30 * time.Second)
	if r.final.Type != protocol.FtResponse {
		c.t.Fatalf("%s: %s", op, r.final.Payload)
	}
	return r.finalJS
}

func (s *tstream) sendData(b []byte, end bool) {
	var flags byte
	if end {
		flags = protocol.FlagEnd
	}
	s.c.sendRaw(protocol.EncodeFrame(s.id, protocol.FtData, flags, b))
}

func commandOf(m map[string]any) map[string]any {
	c, _ := m["command"].(map[string]any)
	return c
}

func (r tresult) String() string {
	return fmt.Sprintf("events=%v stdout=%q stderr=%q final=%s", r.events, r.output[1], r.output[2], r.final.Payload)
}
