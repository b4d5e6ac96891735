package main

// Connections: accept loop, handshake, frame routing and request dispatch.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"krunbox/agent/boot"
	"krunbox/agent/protocol"
)

const agentVersion = "krunbox-agent/0.1.0"

var errConnClosed = errors.New("connection closed")

type server struct {
	a        *agent                      // the configuration and lifecycle requests reach
	handlers map[string]protocol.Handler // the agent's op table
	mu       sync.Mutex
	conns    map[*conn]struct{}
	// token is the SHA-256 (hex) a HELLO's token must match: the boot's, until a
	// pooled sandbox's reset gives it the next lease's (under mu).
	token string
}

func newServer(a *agent) *server {
	return &server{a: a, handlers: a.opTable(), conns: map[*conn]struct{}{}, token: a.cfg.TokenSha256}
}

// serve accepts connections until the listener fails (it is never closed in
// normal operation: the agent exits instead).
func (s *server) serve(l boot.Listener) error {
	for {
		rw, err := l.Accept()
		if err != nil {
			if errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
				return err
			}
			// EMFILE and friends: back off instead of spinning.
			log.Printf("accept: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		c := newConn(s, rw)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go c.writeLoop()
		go c.readLoop()
	}
}

// broadcastShutdown sends the stream-0 shutdown EVENT to every connection and
// waits (bounded) until it has been written: the agent exits right after.
func (s *server) broadcastShutdown(reason string, wait time.Duration) {
	payload, _ := json.Marshal(map[string]string{"type": "shutdown", "reason": reason})
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c.handshaken() {
			_ = c.send(protocol.EncodeFrame(0, protocol.FtEvent, 0, payload))
		}
	}
	deadline := time.Now().Add(wait)
	for _, c := range conns {
		c.waitFlushed(deadline)
	}
}

// wpiece is one piece of the outgoing byte stream: a whole frame or part of one.
type wpiece struct {
	b       []byte
	free    *[]byte   // pooled buffer backing b: back to dataFramePool once b is written
	chunk   heldChunk // output chunk behind b: its reference ends once b is written
	viaLane bool      // splice b's bytes from chunk's lane instead (exec/command_lane.go)
}

// heldChunk is a command's output chunk (exec.Chunk) on its way to the socket.
type heldChunk interface {
	Release()
	SpliceTo(sc syscall.RawConn) (spliced bool, err error)
}

// releasePieces gives back what pieces hold once they are written, or never will be.
func releasePieces(ps []wpiece) {
	for _, p := range ps {
		if p.free != nil {
			protocol.DataFramePool.Put(p.free)
		}
		if p.chunk != nil {
			p.chunk.Release()
		}
	}
}

type conn struct {
	srv *server
	rw  io.ReadWriteCloser

	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc

	// Outgoing frames are queued and written by writeLoop, so no handler ever
	// blocks on the socket; per-stream credit bounds what one stream can
	// queue, and maxQueuedBytes what all of them can (see sendDirect).
	wmu      sync.Mutex
	wcond    *sync.Cond
	wq       []wpiece
	wqBytes  int             // bytes of the pieces in wq
	writing  bool            // writeLoop or a sendDirect caller is writing
	vectored bool            // rw is a socket: batches go out with writev
	raw      syscall.RawConn // rw's fd for splice, when rw is a unix socket
	bw       *bufio.Writer
	wclosing bool // close once the queue is flushed
	wdead    bool

	mu      sync.Mutex
	streams map[uint32]*stream
	lastID  uint32
	hello   bool

	closeOnce sync.Once
}

func newConn(s *server, rw io.ReadWriteCloser) *conn {
	c := &conn{srv: s, rw: rw, streams: map[uint32]*stream{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wcond = sync.NewCond(&c.wmu)
	if nc, ok := rw.(net.Conn); ok {
		c.vectored = true
		if uc, ok := nc.(*net.UnixConn); ok {
			c.raw, _ = uc.SyscallConn()
		}
	} else {
		c.bw = bufio.NewWriterSize(rw, 256<<10)
	}
	return c
}

func (c *conn) handshaken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// send queues one encoded frame.
func (c *conn) send(buf []byte) error { return c.sendPieces(wpiece{b: buf}) }

// sendPieces queues the pieces of one or more frames together, so no other
// frame can land between a header and its payload.
func (c *conn) sendPieces(ps ...wpiece) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wdead || c.wclosing {
		return errConnClosed
	}
	c.wq = append(c.wq, ps...)
	c.wqBytes += piecesBytes(ps)
	c.wcond.Broadcast()
	return nil
}

// maxQueuedBytes bounds the frames handlers queue behind a write in progress.
// Credit alone let the queue grow with the number of streams: 100 followed
// commands, each with the host's 4 MiB window, held 400 MiB of output chunks
// here (and the GC's headroom doubled it), far past the 64 MiB of retained
// output the agent promises. Past it a handler waits for the writer, as it
// would for the socket.
const maxQueuedBytes = 8 << 20

func piecesBytes(ps []wpiece) int {
	n := 0
	for _, p := range ps {
		n += len(p.b)
	}
	return n
}

// jsonFrame encodes one frame whose payload is v as JSON; a payload over the
// cap is errFrameTooLarge and is never sent (the host would have to drop it).
func jsonFrame(stream uint32, typ, flags byte, v any) ([]byte, error) {
	payload, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(payload) > protocol.MaxFramePayload {
		return nil, protocol.ErrFrameTooLarge
	}
	return protocol.EncodeFrame(stream, typ, flags, payload), nil
}

// sendJSON queues a JSON frame (for readLoop, which must not block on the socket).
func (c *conn) sendJSON(stream uint32, typ, flags byte, v any) error {
	f, err := jsonFrame(stream, typ, flags, v)
	if err != nil {
		return err
	}
	return c.send(f)
}

// sendJSONDirect sends a JSON frame through sendDirect, for a handler's frames.
func (c *conn) sendJSONDirect(stream uint32, typ, flags byte, v any) error {
	f, err := jsonFrame(stream, typ, flags, v)
	if err != nil {
		return err
	}
	return c.sendDirect(wpiece{b: f})
}

func (c *conn) writeLoop() {
	for {
		c.wmu.Lock()
		// A direct write (sendDirect) may be in progress: wait for it, too.
		for (len(c.wq) == 0 || c.writing) && !c.wdead && !(c.wclosing && len(c.wq) == 0 && !c.writing) {
			c.wcond.Wait()
		}
		if c.wdead || len(c.wq) == 0 {
			c.wmu.Unlock()
			c.close()
			return
		}
		batch := c.wq
		c.wq = nil
		c.wqBytes = 0
		c.writing = true
		c.wcond.Broadcast() // handlers waiting for room in the queue
		c.wmu.Unlock()
		if !c.writeOut(batch) {
			return
		}
	}
}

// sendDirect writes the pieces on the calling goroutine when nothing is queued
// or being written, saving the hand-off to writeLoop (a thread switch per chunk
// was the agent's main cost for bulk output, and a wake-up per response adds
// latency to every request); otherwise it queues them. Handlers use it for
// their frames (responses, events, OUTPUT, DATA): they may block on the
// socket. readLoop must not (it would stop reading while the host waits on
// us), so its own frames (PONG) and credit grants are queued.
func (c *conn) sendDirect(ps ...wpiece) error {
	c.wmu.Lock()
	if c.wdead || c.wclosing {
		c.wmu.Unlock()
		releasePieces(ps)
		return errConnClosed
	}
	if c.writing || len(c.wq) > 0 || !c.vectored {
		for c.wqBytes >= maxQueuedBytes && !c.wdead && !c.wclosing {
			c.wcond.Wait()
		}
		if c.wdead || c.wclosing {
			c.wmu.Unlock()
			releasePieces(ps)
			return errConnClosed
		}
		c.wq = append(c.wq, ps...)
		c.wqBytes += piecesBytes(ps)
		c.wcond.Broadcast()
		c.wmu.Unlock()
		return nil
	}
	c.writing = true
	c.wmu.Unlock()
	if !c.writeOut(ps) {
		return errConnClosed
	}
	return nil
}

// writeOut writes one batch while c.writing is held, then releases it. A
// socket takes the batch in one writev without copying payloads; anything
// else (the VM's vsock file) gets it coalesced through bufio. False: the
// write failed and the connection is closed.
func (c *conn) writeOut(batch []wpiece) bool {
	var err error
	if c.vectored {
		bufs := make(net.Buffers, 0, len(batch))
		for _, p := range batch {
			if p.viaLane {
				// What precedes the chunk (its header) goes out first.
				if _, err = bufs.WriteTo(c.rw); err != nil {
					break
				}
				spliced, serr := p.chunk.SpliceTo(c.raw)
				if err = serr; err != nil {
					break
				}
				if spliced {
					continue
				}
			}
			bufs = append(bufs, p.b)
		}
		if err == nil {
			_, err = bufs.WriteTo(c.rw)
		}
	} else {
		for _, p := range batch {
			if _, err = c.bw.Write(p.b); err != nil {
				break
			}
		}
		if err == nil {
			err = c.bw.Flush()
		}
	}
	// Written (or failed): nothing refers to the pooled buffers any more.
	releasePieces(batch)
	c.wmu.Lock()
	c.writing = false
	c.wcond.Broadcast()
	c.wmu.Unlock()
	if err != nil {
		c.close()
		return false
	}
	return true
}

// waitFlushed blocks until every queued frame is written, the connection is
// dead, or the deadline passes.
func (c *conn) waitFlushed(deadline time.Time) {
	timer := time.AfterFunc(time.Until(deadline), func() {
		c.wmu.Lock()
		c.wcond.Broadcast()
		c.wmu.Unlock()
	})
	defer timer.Stop()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for (len(c.wq) > 0 || c.writing) && !c.wdead && time.Now().Before(deadline) {
		c.wcond.Wait()
	}
}

// closeAfterFlush lets the queued frames (an ERROR, typically) go out, then closes.
func (c *conn) closeAfterFlush() {
	c.wmu.Lock()
	c.wclosing = true
	c.wcond.Broadcast()
	c.wmu.Unlock()
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		c.wdead = true
		c.wq = nil
		c.wqBytes = 0
		c.wcond.Broadcast()
		c.wmu.Unlock()
		_ = c.rw.Close()
		c.cancel()
		c.mu.Lock()
		streams := make([]*stream, 0, len(c.streams))
		for _, st := range c.streams {
			streams = append(streams, st)
		}
		c.mu.Unlock()
		for _, st := range streams {
			st.abort()
		}
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
	})
}

func (c *conn) readLoop() {
	defer c.close()
	br := bufio.NewReaderSize(c.rw, 64<<10)
	f, err := protocol.ReadFrame(br)
	if err != nil || f.Type != protocol.FtHello || f.Stream != 0 {
		return
	}
	if !c.handshake(f.Payload) {
		c.closeAfterFlush()
		// Keep the reader alive until the writer has flushed and closed rw.
		<-c.ctx.Done()
		return
	}
	for {
		f, err := protocol.ReadFrame(br)
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrClosed) {
				log.Printf("connection closed: %v", err)
			}
			return
		}
		if err := c.route(f); err != nil {
			log.Printf("protocol violation, closing connection: %v", err)
			return
		}
	}
}

// handshake answers the host's HELLO; false means the connection must close.
func (c *conn) handshake(payload []byte) bool {
	var h protocol.HelloRequest
	if operr := protocol.HelloRequestSchema.Check("HELLO", payload); operr != nil {
		_ = c.sendJSON(0, protocol.FtError, protocol.FlagEnd, operr)
		return false
	}
	if err := json.Unmarshal(payload, &h); err != nil || (h.Versions == nil && (h.VersionMin == nil || h.VersionMax == nil)) {
		_ = c.sendJSON(0, protocol.FtError, protocol.FlagEnd, protocol.NoCommonVersionError(protocol.Versions, "no version (HELLO without versions or versionMin/versionMax)"))
		return false
	}
	version := h.ChooseVersion()
	if version == 0 {
		_ = c.sendJSON(0, protocol.FtError, protocol.FlagEnd, protocol.NoCommonVersionError(protocol.Versions, h.Offered()))
		return false
	}
	c.srv.mu.Lock()
	want := c.srv.token
	c.srv.mu.Unlock()
	if want != "" {
		ok := false
		if h.Token != nil {
			sum := sha256.Sum256([]byte(*h.Token))
			got := hex.EncodeToString(sum[:])
			ok = subtle.ConstantTimeCompare([]byte(got), []byte(strings.ToLower(want))) == 1
		}
		if !ok {
			_ = c.sendJSON(0, protocol.FtError, protocol.FlagEnd, protocol.AccessDeniedError("the access token", "is wrong or missing"))
			return false
		}
	}
	c.mu.Lock()
	c.hello = true
	c.mu.Unlock()
	c.srv.a.life.HostArrived()
	_ = c.sendJSON(0, protocol.FtHello, 0, map[string]any{
		"version":   version,
		"agent":     agentVersion,
		"sandboxId": c.srv.a.cfg.SandboxID,
		"pid":       os.Getpid(),
		"features":  []string{"exec", "fs", "logs", "pause", "ports"},
	})
	return true
}

// route handles one frame after the handshake. An error is a protocol
// violation: the caller closes the connection.
func (c *conn) route(f protocol.Frame) error {
	if f.Stream == 0 {
		if f.Type != protocol.FtPing {
			return fmt.Errorf("frame type %#x on stream 0", f.Type)
		}
		return c.send(protocol.EncodeFrame(0, protocol.FtPong, 0, f.Payload))
	}
	if f.Stream%2 == 0 {
		return fmt.Errorf("even stream id %d", f.Stream)
	}
	if f.Type == protocol.FtRequest {
		return c.openStream(f)
	}
	c.mu.Lock()
	last := c.lastID
	st := c.streams[f.Stream]
	c.mu.Unlock()
	if f.Stream > last {
		return fmt.Errorf("frame type %#x on unopened stream %d", f.Type, f.Stream)
	}
	switch f.Type {
	case protocol.FtData:
		if st == nil {
			return nil // the stream already finished; late stdin/upload bytes are dropped
		}
		return st.pushData(f.Payload, f.Flags&protocol.FlagEnd != 0)
	case protocol.FtWindow:
		if len(f.Payload) != 4 {
			return fmt.Errorf("WINDOW payload of %d bytes", len(f.Payload))
		}
		if st != nil {
			st.addCredit(int64(binary.BigEndian.Uint32(f.Payload)))
		}
		return nil
	case protocol.FtCancel:
		if st != nil {
			st.hostCancel()
		}
		return nil
	default:
		return fmt.Errorf("frame type %#x not accepted from the host", f.Type)
	}
}

// Agent→host credit window bounds (PROTOCOL.md "Flow control"; contract_gen.go).
const (
	defaultWindow = protocol.WindowAgentToHostDefault
	minWindow     = protocol.WindowAgentToHostMin
	maxWindow     = protocol.WindowAgentToHostMax
)

func (c *conn) openStream(f protocol.Frame) error {
	c.mu.Lock()
	if f.Stream <= c.lastID {
		c.mu.Unlock()
		return fmt.Errorf("REQUEST reuses stream id %d", f.Stream)
	}
	c.lastID = f.Stream
	c.mu.Unlock()

	if !protocol.IsJSONObject(f.Payload) {
		return fmt.Errorf("REQUEST payload on stream %d is not a JSON object", f.Stream)
	}
	head := protocol.ReadRequestHead(f.Payload)
	window := int64(defaultWindow)
	if head.Window != nil {
		window = clampInt64(int64(*head.Window), minWindow, maxWindow)
	}
	st := newStream(c, f.Stream, head.Op, window, f.Flags&protocol.FlagEnd != 0)
	c.mu.Lock()
	c.streams[f.Stream] = st
	c.mu.Unlock()

	c.srv.a.life.RequestStarted()
	go c.runHandler(st, head.Op, json.RawMessage(f.Payload))
	return nil
}

func (c *conn) removeStream(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

func (s *server) lookupHandler(op string) (protocol.Handler, *protocol.OpError) {
	if h := s.handlers[op]; h != nil {
		return h, nil
	}
	if op == "" {
		return nil, protocol.BadArgumentError("REQUEST", "without op")
	}
	return nil, protocol.UnsupportedError(op, "by this agent")
}

// dispatchable finds op's handler and checks req against the contract, so
// handlers see only requests whose fields have the contract's types.
func (s *server) dispatchable(op string, req []byte) (protocol.Handler, *protocol.OpError) {
	h, operr := s.lookupHandler(op)
	if operr == nil {
		operr = protocol.ValidateRequest(op, req)
	}
	return h, operr
}

// runHandler runs one operation and guarantees the stream gets a final frame
// even if the handler forgets or panics.
func (c *conn) runHandler(st *stream, op string, req json.RawMessage) {
	defer c.srv.a.life.RequestEnded()
	defer func() {
		if r := recover(); r != nil {
			log.Printf("handler %s panicked: %v", op, r)
			_ = st.Fail(protocol.InternalError("agent bug in "+op, r))
		}
		if !st.isFinished() {
			_ = st.Fail(protocol.InternalError("agent bug", op+" ended without a response"))
		}
	}()
	h, operr := c.srv.dispatchable(op, req)
	if operr != nil {
		_ = st.Fail(operr)
		return
	}
	h(st, req)
}

func clampInt64(v, lo, hi int64) int64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}
