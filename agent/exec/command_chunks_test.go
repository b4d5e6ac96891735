package exec

import (
	"bytes"
	"errors"
	"testing"
)

// pooledChunk appends a chunk backed by a pool buffer filled with b.
func pooledChunk(l *outputLog, b byte) {
	buf := newChunkBuf()
	data := (*buf)[:maxChunkBytes:maxChunkBytes]
	for i := range data {
		data[i] = b
	}
	l.append(1, data, buf, nil, 1)
}

// A chunk trimmed from the log while a reader still holds it keeps its bytes
// until that reader releases it; only then is the buffer recycled.
func TestChunkBufferOutlivesTrimWhileReaderHoldsIt(t *testing.T) {
	l := newOutputLog(maxChunkBytes, &retainBudget{})
	pooledChunk(l, 'a')
	page, _, _ := l.read(0, bothFds, 10) // exec.read's reference
	if len(page) != 1 {
		t.Fatalf("read %d chunks", len(page))
	}
	held := page[0]
	pooledChunk(l, 'b') // over the limit: the first chunk leaves the log
	if s := l.stats(); s.firstSeq != 2 {
		t.Fatalf("first chunk not trimmed: %+v", s)
	}
	// Buffers drawn from the pool now must not be the held one.
	for i := 0; i < 4; i++ {
		pooledChunk(l, 'c')
	}
	if !bytes.Equal(held.data, bytes.Repeat([]byte{'a'}, maxChunkBytes)) {
		t.Fatal("a held chunk's bytes were overwritten after it was trimmed")
	}
	held.Release()
	if held.data != nil || held.pooled != nil {
		t.Fatal("the last release did not recycle the buffer")
	}
}

// A follower's reference is the sender's: once SendOutput has it (written or
// not, OutputSender's contract) and the log trims the chunk, the buffer goes
// back to the pool.
func TestFollowerReferenceEndsWithTheSend(t *testing.T) {
	l := newOutputLog(maxChunkBytes, &retainBudget{})
	sub, err := l.subscribe(0, bothFds, true, false)
	if err != nil {
		t.Fatal(err)
	}
	pooledChunk(l, 'a')
	ch := l.next(sub)
	if ch == nil || ch.refs != 2 {
		t.Fatalf("next gave %+v", ch)
	}
	if err := (deadSender{}).SendOutput(ch); err == nil {
		t.Fatal("a dead sender reported success")
	}
	if ch.refs != 1 {
		t.Fatalf("refs after the failed send: %d", ch.refs)
	}
	l.ack(sub, ch.seq)
	pooledChunk(l, 'b') // trims the first chunk: its last reference
	if ch.pooled != nil {
		t.Fatal("buffer not recycled after the log and the sender let go")
	}
}

// deadSender is a connection that is gone: it drops what it is given.
type deadSender struct{}

func (deadSender) SendOutput(ch *Chunk) error {
	ch.Release()
	return errors.New("connection closed")
}
func (deadSender) CanSplice() bool { return false }
