package exec

import (
	"strings"
	"testing"
	"time"
)

var bothFds = [3]bool{false, true, true}

func TestLogDropsOldestAndFlagsTruncation(t *testing.T) {
	l := newOutputLog(10, &retainBudget{})
	l.append(1, []byte("aaaa"), nil, nil, 1) // seq 1
	l.append(2, []byte("bbbb"), nil, nil, 2) // seq 2
	l.append(1, []byte("cccc"), nil, nil, 3) // seq 3 -> 12 bytes, drop seq 1
	s := l.stats()
	if s.firstSeq != 2 || s.nextSeq != 4 || s.retainedBytes != 8 {
		t.Fatalf("stats %+v", s)
	}
	if !s.stdoutTruncated || s.stderrTruncated {
		t.Fatalf("truncation flags %+v", s)
	}
	l.append(1, []byte("dddd"), nil, nil, 4) // drop seq 2 (stderr)
	if s = l.stats(); !s.stderrTruncated || s.firstSeq != 3 {
		t.Fatalf("stats after second drop %+v", s)
	}
}

func TestLogFollowerBlocksReaderInsteadOfDropping(t *testing.T) {
	l := newOutputLog(8, &retainBudget{})
	sub, err := l.subscribe(0, bothFds, true, false)
	if err != nil {
		t.Fatal(err)
	}
	l.append(1, []byte("12345678"), nil, nil, 1) // buffer full, unsent to sub
	if !l.waitRoomWouldBlock() {
		t.Fatal("reader should be paused while the follower lags")
	}
	roomed := make(chan bool)
	go func() { roomed <- l.waitRoom() }()
	select {
	case <-roomed:
		t.Fatal("waitRoom returned while the follower still needs the only chunk")
	case <-time.After(50 * time.Millisecond):
	}
	ch := l.next(sub)
	if ch == nil || ch.seq != 1 {
		t.Fatalf("next: %+v", ch)
	}
	l.ack(sub, ch.seq)
	select {
	case ok := <-roomed:
		if !ok {
			t.Fatal("waitRoom reported closed")
		}
	case <-time.After(time.Second):
		t.Fatal("reader not released after the follower caught up")
	}
	if l.stats().stdoutTruncated {
		// Dropping after the ack is fine, but only once something exceeds the limit.
		t.Fatal("nothing should have been dropped yet")
	}
	l.append(1, []byte("x"), nil, nil, 2)
	if s := l.stats(); s.firstSeq != 2 || !s.stdoutTruncated {
		t.Fatalf("acked chunk should now be dropped: %+v", s)
	}
}

func (l *outputLog) waitRoomWouldBlock() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes >= l.limit && l.blockedLocked()
}

func TestLogDrainingIgnoresBackpressure(t *testing.T) {
	l := newOutputLog(1, &retainBudget{})
	_, _ = l.subscribe(0, bothFds, true, false)
	l.append(1, []byte("ab"), nil, nil, 1)
	l.setDraining()
	done := make(chan bool, 1)
	go func() { done <- l.waitRoom() }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("post-exit drain must not wait for a slow follower")
	}
}

func TestLogGapDetection(t *testing.T) {
	l := newOutputLog(4, &retainBudget{})
	for i := 0; i < 5; i++ {
		l.append(1, []byte("xx"), nil, nil, int64(i)) // seqs 1..5, keeps 4,5
	}
	if _, err := l.subscribe(0, bothFds, true, true); err == nil || err.Code != "S223" || !strings.Contains(err.Message, "first retained seq is 4") {
		t.Fatalf("afterSeq 0: want S223 naming seq 4, got %+v", err)
	}
	if _, err := l.subscribe(2, bothFds, true, true); err == nil {
		t.Fatal("afterSeq 2: chunk 3 was dropped, want S223")
	}
	sub, err := l.subscribe(3, bothFds, false, true)
	if err != nil {
		t.Fatalf("afterSeq 3 is contiguous: %v", err)
	}
	var got []uint64
	for ch := l.next(sub); ch != nil; ch = l.next(sub) {
		got = append(got, ch.seq)
		l.ack(sub, ch.seq)
	}
	if len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("replay seqs %v", got)
	}
	// Lenient subscription (idempotent re-follow) starts at the oldest retained.
	sub, err = l.subscribe(0, bothFds, false, false)
	if err != nil || sub.pos != 3 {
		t.Fatalf("lenient subscribe: %+v %v", sub, err)
	}
}

func TestLogNextFiltersStreamsAndEndsOnClose(t *testing.T) {
	l := newOutputLog(1<<20, &retainBudget{})
	sub, _ := l.subscribe(0, [3]bool{false, false, true}, true, true)
	l.append(1, []byte("out"), nil, nil, 1)
	l.append(2, []byte("err"), nil, nil, 2)
	ch := l.next(sub)
	if ch == nil || ch.seq != 2 || string(ch.data) != "err" {
		t.Fatalf("want the stderr chunk, got %+v", ch)
	}
	l.ack(sub, ch.seq)
	go func() { time.Sleep(20 * time.Millisecond); l.close() }()
	if ch := l.next(sub); ch != nil {
		t.Fatalf("after close: %+v", ch)
	}
}

func TestLogReadPaging(t *testing.T) {
	l := newOutputLog(1<<20, &retainBudget{})
	for i := 1; i <= 5; i++ {
		fd := byte(1)
		if i%2 == 0 {
			fd = 2
		}
		l.append(fd, []byte{byte('0' + i)}, nil, nil, int64(i))
	}
	chunks, more, cursor := l.read(0, bothFds, 2)
	if len(chunks) != 2 || !more || cursor != 2 {
		t.Fatalf("page 1: %d chunks more=%v cursor=%d", len(chunks), more, cursor)
	}
	chunks, more, cursor = l.read(cursor, bothFds, 2)
	if len(chunks) != 2 || chunks[0].seq != 3 || !more || cursor != 4 {
		t.Fatalf("page 2: %v more=%v cursor=%d", chunks, more, cursor)
	}
	chunks, more, cursor = l.read(cursor, bothFds, 2)
	if len(chunks) != 1 || more || cursor != 5 {
		t.Fatalf("page 3: %d more=%v cursor=%d", len(chunks), more, cursor)
	}
	// stdout only: seqs 1, 3, 5
	chunks, _, _ = l.read(0, [3]bool{false, true, false}, 100)
	if len(chunks) != 3 || chunks[1].seq != 3 {
		t.Fatalf("stdout filter: %v", chunks)
	}
}
