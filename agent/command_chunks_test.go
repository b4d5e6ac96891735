package main

import (
	"bytes"
	"sync"
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
	l := newOutputLog(maxChunkBytes)
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
	held.release()
	if held.data != nil || held.pooled != nil {
		t.Fatal("the last release did not recycle the buffer")
	}
}

// A subscriber's reference ends with its write: the OUTPUT path releases it
// even when the connection is already gone.
func TestSubscriberReferenceEndsWithTheWrite(t *testing.T) {
	l := newOutputLog(maxChunkBytes)
	sub, err := l.subscribe(0, bothFds, true, false)
	if err != nil {
		t.Fatal(err)
	}
	pooledChunk(l, 'a')
	ch := l.next(sub)
	if ch == nil || ch.refs != 2 {
		t.Fatalf("next gave %+v", ch)
	}
	c := &conn{wdead: true}
	c.wcond = sync.NewCond(&c.wmu)
	if err := c.sendDirect(wpiece{b: ch.data, chunk: ch}); err != errConnClosed {
		t.Fatalf("sendDirect on a dead connection: %v", err)
	}
	if ch.refs != 1 {
		t.Fatalf("refs after the failed write: %d", ch.refs)
	}
	l.ack(sub, ch.seq)
	pooledChunk(l, 'b') // trims the first chunk: its last reference
	if ch.pooled != nil {
		t.Fatal("buffer not recycled after the log and the writer let go")
	}
}
