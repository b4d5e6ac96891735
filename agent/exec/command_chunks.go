package exec

// Recycling of output chunk buffers. A fast writer fills a fresh 256 KiB
// buffer per pipe read; allocating them (page faults on memory the GC had
// released, then zeroing) cost about a quarter of the agent's CPU per streamed
// byte. A chunk's buffer goes back to the pool when its last reference ends:
// the log's (when the chunk is trimmed) and one per reader in flight (a
// subscriber's OUTPUT write until the socket has taken it, an exec.read page
// until it is encoded). A reference that is never released only means the
// buffer is left to the GC, never that it is reused too early.

import (
	"sync"
	"sync/atomic"
	"syscall"

	"krunbox/agent/protocol"
)

var chunkBufPool = sync.Pool{New: func() any {
	b := make([]byte, maxChunkBytes)
	return &b
}}

// newChunkBuf returns a maxChunkBytes buffer for one pipe read.
func newChunkBuf() *[]byte { return chunkBufPool.Get().(*[]byte) }

// retain adds a reference for a reader; the log holds the first one.
func (ch *Chunk) retain() { atomic.AddInt32(&ch.refs, 1) }

// Release ends one reference; the last one recycles a pooled buffer.
func (ch *Chunk) Release() {
	if atomic.AddInt32(&ch.refs, -1) == 0 && ch.pooled != nil {
		buf := ch.pooled
		ch.pooled = nil
		ch.data = nil
		chunkBufPool.Put(buf)
	}
}

// Data is the chunk's output bytes; valid until its reference is released.
func (ch *Chunk) Data() []byte { return ch.data }

// OutputHeader is the OUTPUT frame header that carries ch on the stream.
func (ch *Chunk) OutputHeader(stream uint32) []byte {
	return protocol.EncodeOutputHeader(stream, ch.fd, ch.seq, ch.unixMs, len(ch.data))
}

// InLane reports whether a copy of the bytes waits in a lane, so the writer
// can splice them instead of writing Data (SpliceTo).
func (ch *Chunk) InLane() bool { return ch.lane != nil }

// SpliceTo moves the chunk's bytes from its lane to the socket behind sc.
// spliced false: the lane could not deliver them; write Data instead.
func (ch *Chunk) SpliceTo(sc syscall.RawConn) (spliced bool, err error) {
	return ch.lane.spliceTo(sc, ch)
}
