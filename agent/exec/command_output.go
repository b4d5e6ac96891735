package exec

// outputLog is the per-command retention buffer of output chunks and the
// bookkeeping of who still needs which chunk.
//
// Retention is bounded in bytes twice: per command (retainBytes) and for the
// whole sandbox (sandboxRetainBytes, across every command, live or ended),
// because the agent lives within the workload's memory limit. Over either
// bound the oldest chunks go first (ended commands before live ones, see
// Commands.shedRetention), and the command's snapshot says
// stdoutTruncated/stderrTruncated.
//
// Invariants:
//   - retained chunks have contiguous seqs (only the oldest is ever dropped);
//   - a chunk is dropped only when every subscriber has handled it, so a
//     following subscriber never loses output: when it lags and the buffer is
//     full (or the sandbox's budget is spent), the pipe readers wait in
//     waitRoom instead (the child then blocks on its full pipe).

import (
	"encoding/base64"
	"fmt"
	"sync"
	"sync/atomic"

	"krunbox/agent/protocol"
)

// sandboxRetainBytes bounds the output all commands of the sandbox retain together.
const sandboxRetainBytes = 64 << 20

// retainBudget counts the data bytes retained by every outputLog of one
// command table; over sandboxRetainBytes, shed drops the oldest output no
// subscriber needs (Commands.shedRetention; nil in tests of a lone log).
type retainBudget struct {
	total atomic.Int64
	shed  func()
}

// readPageBytes bounds one exec.read answer: the base64 of its chunks plus
// their JSON, so the RESPONSE stays under the frame cap whatever the chunk
// sizes (a page holds at least one chunk; the largest encodes to ~342 KiB).
const (
	readPageBytes     = protocol.MaxFramePayload - 64<<10
	readChunkOverhead = 128 // {"seq":…,"stream":"stdout","timestamp":…,"data":""},
)

// maxChunkBytes is the largest pipe read, so the largest OUTPUT chunk. It must
// not exceed the smallest window (minWindow): a chunk is never split. Large
// reads keep the per-byte cost of a fast writer low (fewer reads, frames and
// allocations).
const maxChunkBytes = 256 << 10

type Chunk struct {
	seq    uint64
	fd     byte // 1 stdout, 2 stderr
	unixMs int64
	data   []byte
	pooled *[]byte     // the chunkBufPool buffer behind data, if any (command_chunks.go)
	refs   int32       // the log's reference plus one per reader in flight
	lane   *spliceLane // a copy of data waits in this lane (command_lane.go), if set
}

type logSub struct {
	pos    uint64  // last seq this subscriber has handled (sent or skipped)
	fds    [3]bool // which fds it wants
	follow bool    // false: stop at lastSeq (a replay of what existed at subscribe time)
	last   uint64
	gone   bool
}

type outputLog struct {
	mu   sync.Mutex
	cond *sync.Cond

	chunks  []*Chunk // chunks[head:] are retained
	head    int
	bytes   int64 // data bytes retained
	limit   int64
	budget  *retainBudget // shared by every log of the sandbox
	nextSeq uint64

	truncated [3]bool // per fd: something of it was dropped
	subs      map[*logSub]struct{}
	lanes     [3]*spliceLane // per fd, while a follower that splices is attached
	laneOwner *logSub
	draining  bool // the process exited: readers ignore backpressure until the drain deadline
	closed    bool // no more chunks will come
}

func newOutputLog(limit int64, budget *retainBudget) *outputLog {
	l := &outputLog{limit: limit, budget: budget, nextSeq: 1, subs: map[*logSub]struct{}{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *outputLog) firstSeqLocked() uint64 {
	if l.head < len(l.chunks) {
		return l.chunks[l.head].seq
	}
	return l.nextSeq
}

// blockedLocked reports whether the oldest retained chunk is still needed by a subscriber.
func (l *outputLog) blockedLocked() bool {
	if l.head >= len(l.chunks) {
		return false
	}
	oldest := l.chunks[l.head].seq
	for s := range l.subs {
		if s.pos < oldest {
			return true
		}
	}
	return false
}

func (l *outputLog) trimLocked() {
	for l.bytes > l.limit && l.head < len(l.chunks) && !l.blockedLocked() {
		l.dropOldestLocked()
	}
	l.compactLocked()
}

func (l *outputLog) dropOldestLocked() {
	ch := l.chunks[l.head]
	l.chunks[l.head] = nil
	l.head++
	l.bytes -= int64(len(ch.data))
	l.budget.total.Add(-int64(len(ch.data)))
	l.truncated[ch.fd] = true
	ch.Release()
}

// shedOverBudget drops this log's oldest chunks that no subscriber still
// needs while the sandbox retains more than its budget.
func (l *outputLog) shedOverBudget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.budget.total.Load() > sandboxRetainBytes && l.head < len(l.chunks) && !l.blockedLocked() {
		l.dropOldestLocked()
	}
	l.compactLocked()
	l.cond.Broadcast()
}

// forget drops every retained chunk (the command itself is being forgotten).
func (l *outputLog) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.head < len(l.chunks) {
		l.dropOldestLocked()
	}
	l.compactLocked()
}

func (l *outputLog) compactLocked() {
	// Compact once the dropped prefix dominates, so the slice does not grow forever.
	if l.head > 64 && l.head*2 > len(l.chunks) {
		n := copy(l.chunks, l.chunks[l.head:])
		for i := n; i < len(l.chunks); i++ {
			l.chunks[i] = nil
		}
		l.chunks = l.chunks[:n]
		l.head = 0
	}
}

// waitRoom blocks a pipe reader while the buffer (or the sandbox's budget) is
// full and this log's oldest chunk is still needed by a subscriber: only that
// subscriber's progress can make room here. It returns false once the log is closed.
func (l *outputLog) waitRoom() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && !l.draining && (l.bytes >= l.limit || l.budget.total.Load() > sandboxRetainBytes) && l.blockedLocked() {
		l.cond.Wait()
	}
	return !l.closed
}

// append adds a chunk; pooled, when not nil, is the chunkBufPool buffer behind
// data; lane, when not nil, holds a copy of data from a teed read.
func (l *outputLog) append(fd byte, data []byte, pooled *[]byte, lane *spliceLane, unixMs int64) {
	l.mu.Lock()
	ch := &Chunk{seq: l.nextSeq, fd: fd, unixMs: unixMs, data: data, pooled: pooled, refs: 1}
	if lane != nil {
		lane.add(ch) // even for a dropped chunk: the lane must stay in step
	}
	if l.closed || len(data) == 0 {
		if pooled != nil {
			chunkBufPool.Put(pooled) // nobody will see this chunk; the lane keeps only its size
		}
		l.mu.Unlock()
		return
	}
	l.chunks = append(l.chunks, ch)
	l.nextSeq++
	l.bytes += int64(len(data))
	l.budget.total.Add(int64(len(data)))
	l.trimLocked()
	l.cond.Broadcast()
	l.mu.Unlock()
	// Outside l.mu: shedding takes the table's lock, then each log's.
	if l.budget.total.Load() > sandboxRetainBytes {
		if l.budget.shed != nil {
			l.budget.shed()
		}
	}
}

// laneFor returns the lane a pipe reader of fd should tee into, or nil.
func (l *outputLog) laneFor(fd byte) *spliceLane {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lanes[fd]
}

// openLanes makes s the splicing follower when there is none yet and the
// command may still produce output; s must call closeLanes when it leaves.
func (l *outputLog) openLanes(s *logSub) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.laneOwner != nil || l.closed || l.draining {
		return false
	}
	for fd := 1; fd <= 2; fd++ {
		if !s.fds[fd] {
			continue
		}
		ln, err := openLane()
		if err != nil {
			break // out of fds: plain copies then
		}
		l.lanes[fd] = ln
	}
	l.laneOwner = s
	return true
}

func (l *outputLog) closeLanes(s *logSub) {
	l.mu.Lock()
	if l.laneOwner != s {
		l.mu.Unlock()
		return
	}
	lanes := l.lanes
	l.lanes = [3]*spliceLane{}
	l.laneOwner = nil
	l.mu.Unlock()
	for _, ln := range lanes {
		if ln != nil {
			ln.close()
		}
	}
}

func (l *outputLog) setDraining() {
	l.mu.Lock()
	l.draining = true
	l.cond.Broadcast()
	lanes := l.lanes
	l.mu.Unlock()
	// Outside l.mu: a lane's lock can be held by a splice waiting for the socket.
	for _, ln := range lanes {
		if ln != nil {
			ln.stopWaiting()
		}
	}
}

func (l *outputLog) close() {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

type logStats struct {
	firstSeq, nextSeq                uint64
	stdoutTruncated, stderrTruncated bool
	retainedBytes                    int64
}

func (l *outputLog) stats() logStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return logStats{l.firstSeqLocked(), l.nextSeq, l.truncated[1], l.truncated[2], l.bytes}
}

func fdMask(streams []string) ([3]bool, *protocol.OpError) {
	var m [3]bool
	if len(streams) == 0 {
		m[1], m[2] = true, true
		return m, nil
	}
	for _, s := range streams {
		switch s {
		case "stdout":
			m[1] = true
		case "stderr":
			m[2] = true
		default:
			return m, protocol.BadArgumentError(fmt.Sprintf("stream %q", s), `is unknown (expected "stdout" or "stderr")`)
		}
	}
	return m, nil
}

// subscribe registers a reader of chunks with seq > afterSeq. With strictGap it
// fails with S223 when some of those chunks were already dropped; otherwise it
// starts at the oldest retained chunk.
func (l *outputLog) subscribe(afterSeq uint64, fds [3]bool, follow, strictGap bool) (*logSub, *protocol.OpError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.firstSeqLocked()
	if afterSeq+1 < first {
		if strictGap {
			return nil, protocol.StreamGapError(afterSeq, first)
		}
		afterSeq = first - 1
	}
	s := &logSub{pos: afterSeq, fds: fds, follow: follow, last: l.nextSeq - 1}
	l.subs[s] = struct{}{}
	return s, nil
}

func (l *outputLog) unsubscribe(s *logSub) {
	l.mu.Lock()
	s.gone = true
	delete(l.subs, s)
	l.trimLocked()
	l.cond.Broadcast()
	l.mu.Unlock()
}

// next blocks until the subscriber's next wanted chunk exists and returns it,
// or returns nil when there is nothing more for it (log closed, replay done,
// or the subscriber was removed). The caller acks the chunk once sent, and
// releases the reference it is given once nothing uses its bytes.
func (l *outputLog) next(s *logSub) *Chunk {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if s.gone {
			return nil
		}
		skipped := false
		first := l.firstSeqLocked()
		for seq := s.pos + 1; seq < l.nextSeq; seq++ {
			if seq < first {
				continue
			}
			if !s.follow && seq > s.last {
				break
			}
			ch := l.chunks[l.head+int(seq-first)]
			if s.fds[ch.fd] {
				ch.retain()
				return ch
			}
			s.pos = seq // not wanted: handled by skipping
			skipped = true
		}
		if skipped {
			l.trimLocked()
			l.cond.Broadcast()
		}
		if l.closed || (!s.follow && s.pos >= s.last) {
			return nil
		}
		l.cond.Wait()
	}
}

func (l *outputLog) ack(s *logSub, seq uint64) {
	l.mu.Lock()
	if seq > s.pos {
		s.pos = seq
	}
	l.trimLocked()
	l.cond.Broadcast()
	l.mu.Unlock()
}

// wake makes blocked next() calls re-check their subscriber (after it was cancelled).
func (l *outputLog) wake() {
	l.mu.Lock()
	l.cond.Broadcast()
	l.mu.Unlock()
}

// read returns up to limit wanted chunks with seq > afterSeq (exec.read paging),
// each with a reference the caller releases. A page also ends before the chunk
// that would take its encoded size past readPageBytes (it always holds at
// least one). cursor is the afterSeq to pass for the next page.
func (l *outputLog) read(afterSeq uint64, fds [3]bool, limit int) (out []*Chunk, hasMore bool, cursor uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cursor = afterSeq
	first := l.firstSeqLocked()
	start := afterSeq + 1
	if start < first {
		start = first
	}
	size := 0
	for seq := start; seq < l.nextSeq; seq++ {
		ch := l.chunks[l.head+int(seq-first)]
		if !fds[ch.fd] {
			cursor = seq
			continue
		}
		cost := base64.StdEncoding.EncodedLen(len(ch.data)) + readChunkOverhead
		if len(out) == limit || (len(out) > 0 && size+cost > readPageBytes) {
			hasMore = true
			break
		}
		size += cost
		ch.retain()
		out = append(out, ch)
		cursor = seq
	}
	return out, hasMore, cursor
}
