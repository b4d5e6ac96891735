package main

// stream implements Stream (stream.go) for one request on one connection,
// including both directions of flow control.

import (
	"context"
	"fmt"
	"sync"

	"krunbox/agent/exec"
	"krunbox/agent/protocol"
)

const (
	// Host→agent DATA credit (PROTOCOL.md): every stream starts with an implicit
	// 256 KiB, so a small upload needs no round trip for credit; 1 MiB more is
	// granted when the handler first reads, then topped up as it consumes.
	recvImplicitCredit = protocol.WindowHostToAgentImplicit
	recvInitialCredit  = protocol.WindowHostToAgentFirstGrant
	recvGrantBatch     = 64 << 10
	// Agent→host DATA frames are cut at this size so streams interleave fairly.
	sendDataChunk = protocol.WindowDataFrameBytes
)

type stream struct {
	c      *conn
	id     uint32
	op     string
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cond     *sync.Cond
	credit   int64 // bytes of DATA/OUTPUT the host still accepts
	finished bool  // the final RESPONSE/ERROR was sent
	aborted  bool  // CANCEL from the host, connection lost, or finished

	// Host→agent data.
	inbox        [][]byte
	inEOF        bool
	grantStarted bool
	granted      int64 // total credit ever granted to the host
	received     int64 // total DATA bytes received
	ungranted    int64 // consumed bytes not yet granted back
}

func newStream(c *conn, id uint32, op string, window int64, hostEnded bool) *stream {
	st := &stream{c: c, id: id, op: op, credit: window, inEOF: hostEnded, granted: recvImplicitCredit}
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	st.cond = sync.NewCond(&st.mu)
	return st
}

func (st *stream) Context() context.Context { return st.ctx }

func (st *stream) isFinished() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.finished
}

// abort wakes every waiter; used on CANCEL, connection loss and finish.
func (st *stream) abort() {
	st.mu.Lock()
	st.aborted = true
	st.cond.Broadcast()
	st.mu.Unlock()
	st.cancel()
}

func (st *stream) hostCancel() { st.abort() }

func (st *stream) addCredit(n int64) {
	st.mu.Lock()
	st.credit += n
	st.cond.Broadcast()
	st.mu.Unlock()
}

// pushData queues a DATA frame from the host. Sending beyond the granted
// credit is a protocol violation (the host promises never to).
func (st *stream) pushData(b []byte, end bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.received += int64(len(b))
	if st.received > st.granted {
		return fmt.Errorf("stream %d: host sent %d DATA bytes with only %d granted", st.id, st.received, st.granted)
	}
	if st.inEOF {
		return fmt.Errorf("stream %d: DATA after END", st.id)
	}
	if len(b) > 0 {
		st.inbox = append(st.inbox, b)
	}
	if end {
		st.inEOF = true
	}
	st.cond.Broadcast()
	return nil
}

func (st *stream) final(typ byte, v any) error {
	st.mu.Lock()
	if st.finished {
		st.mu.Unlock()
		return nil
	}
	st.finished = true
	st.mu.Unlock()
	if v == nil {
		v = struct{}{}
	}
	err := st.c.sendJSONDirect(st.id, typ, protocol.FlagEnd, v)
	if err == protocol.ErrFrameTooLarge {
		// Only this request fails; the connection and its other streams go on.
		err = st.c.sendJSONDirect(st.id, protocol.FtError, protocol.FlagEnd, protocol.FrameTooLargeError("the answer to "+st.op, protocol.MaxFramePayload))
	}
	st.c.removeStream(st.id)
	st.abort()
	return err
}

func (st *stream) Respond(v any) error              { return st.final(protocol.FtResponse, v) }
func (st *stream) Fail(err *protocol.OpError) error { return st.final(protocol.FtError, err) }

func (st *stream) Event(v any) error {
	if st.isFinished() {
		return errConnClosed
	}
	return st.c.sendJSONDirect(st.id, protocol.FtEvent, 0, v)
}

func (st *stream) deadErr() *protocol.OpError {
	return protocol.FsAbortedError(fmt.Sprintf("stream %d (%s)", st.id, st.op), "cancelled, or its connection closed")
}

// takeCredit blocks until at least min bytes of credit are available and takes
// up to max of it. ok is false when the stream was aborted.
func (st *stream) takeCredit(min, max int64) (n int64, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if min < 1 {
		min = 1
	}
	for !st.aborted && st.credit < min {
		st.cond.Wait()
	}
	if st.aborted {
		return 0, false
	}
	n = max
	if n > st.credit {
		n = st.credit
	}
	st.credit -= n
	return n, true
}

func (st *stream) SendData(b []byte) error {
	for len(b) > 0 {
		want := int64(len(b))
		if want > sendDataChunk {
			want = sendDataChunk
		}
		n, ok := st.takeCredit(1, want)
		if !ok {
			return st.deadErr()
		}
		if err := st.c.send(protocol.EncodeFrame(st.id, protocol.FtData, 0, b[:n])); err != nil {
			return st.deadErr()
		}
		b = b[n:]
	}
	return nil
}

// SendOutput sends one command chunk as an OUTPUT frame. Chunks are never split
// (they carry a seq), so it waits until the credit covers the whole chunk; the
// credit counts data bytes, not the 17-byte OUTPUT header.
func (st *stream) SendOutput(ch *exec.Chunk) error {
	data := ch.Data()
	n := int64(len(data))
	if _, ok := st.takeCredit(n, n); !ok {
		ch.Release()
		return st.deadErr()
	}
	return st.c.sendDirect(wpiece{b: ch.OutputHeader(st.id)}, wpiece{b: data, chunk: ch, viaLane: ch.InLane() && st.c.raw != nil})
}

func (st *stream) CanSplice() bool { return st.c.raw != nil }

// sendDataFrame sends n bytes held in a dataFramePool buffer (payload at
// FrameHeaderLen) without copying them, and hands the buffer to the writer,
// which pools it again once written. When the credit is short the bytes go as
// several frames with separate headers; only the last releases the buffer.
func (st *stream) sendDataFrame(fb *[]byte, n int) error {
	buf := *fb
	for off := 0; off < n; {
		k, ok := st.takeCredit(1, int64(n-off))
		if !ok {
			return st.deadErr()
		}
		var err error
		if off == 0 && int(k) == n {
			protocol.PutFrameHeader(buf, st.id, protocol.FtData, 0, n)
			err = st.c.sendDirect(wpiece{b: buf[:protocol.FrameHeaderLen+n], free: fb})
		} else {
			hdr := make([]byte, protocol.FrameHeaderLen)
			protocol.PutFrameHeader(hdr, st.id, protocol.FtData, 0, int(k))
			part := wpiece{b: buf[protocol.FrameHeaderLen+off : protocol.FrameHeaderLen+off+int(k)]}
			if off+int(k) == n {
				part.free = fb
			}
			err = st.c.sendDirect(wpiece{b: hdr}, part)
		}
		if err != nil {
			return st.deadErr()
		}
		off += int(k)
	}
	return nil
}

func (st *stream) RecvData() ([]byte, bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.grantStarted && !st.inEOF {
		st.grantStarted = true
		st.grantLocked(recvInitialCredit)
	}
	for !st.aborted && len(st.inbox) == 0 && !st.inEOF {
		st.cond.Wait()
	}
	if st.aborted {
		return nil, false, st.deadErr()
	}
	if len(st.inbox) > 0 {
		b := st.inbox[0]
		st.inbox[0] = nil
		st.inbox = st.inbox[1:]
		if !st.inEOF {
			st.ungranted += int64(len(b))
			if st.ungranted >= recvGrantBatch {
				st.grantLocked(st.ungranted)
				st.ungranted = 0
			}
		}
		return b, false, nil
	}
	return nil, true, nil
}

func (st *stream) grantLocked(n int64) {
	st.granted += n
	// After the final answer the host has forgotten the stream: a grant would only be noise.
	if st.finished || st.aborted {
		return
	}
	_ = st.c.send(protocol.EncodeFrame(st.id, protocol.FtWindow, 0, protocol.WindowPayload(uint32(n))))
}
