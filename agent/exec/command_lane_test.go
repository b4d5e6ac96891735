package exec

import (
	"bytes"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// lanePair returns a pipe to read command output from and a connected unix
// socket pair: the agent's end (raw, for splice) and the host's end.
func lanePair(t *testing.T) (pr, pw *os.File, agentRaw syscall.RawConn, host net.Conn) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	growPipe(pr) // room for a whole chunk: the test writes before it reads
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	agentFile, hostFile := os.NewFile(uintptr(fds[0]), "agent"), os.NewFile(uintptr(fds[1]), "host")
	agentConn, err := net.FileConn(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	host, err = net.FileConn(hostFile)
	if err != nil {
		t.Fatal(err)
	}
	agentFile.Close()
	hostFile.Close()
	agentRaw, err = agentConn.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close(); pw.Close(); agentConn.Close(); host.Close() })
	return pr, pw, agentRaw, host
}

// teedChunk writes b into the pipe and reads it back through the lane as one chunk.
func teedChunk(t *testing.T, ln *spliceLane, pr, pw *os.File, b []byte) *Chunk {
	t.Helper()
	if _, err := pw.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, maxChunkBytes)
	n, teed, err := ln.readVia(pr, buf)
	if err != nil || !teed || n != len(b) {
		t.Fatalf("readVia: n=%d teed=%v err=%v", n, teed, err)
	}
	ch := &Chunk{data: buf[:n], refs: 1}
	ln.add(ch)
	return ch
}

// Chunks the follower sends go from the lane to the socket byte for byte; lane
// bytes of chunks that went another way are discarded first; a chunk no longer
// in the lane is left to the copying write.
func TestLaneSplicesInOrderAndDiscardsSkippedChunks(t *testing.T) {
	pr, pw, raw, host := lanePair(t)
	ln, err := openLane()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.close()
	a := teedChunk(t, ln, pr, pw, bytes.Repeat([]byte("a"), 1000))
	b := teedChunk(t, ln, pr, pw, bytes.Repeat([]byte("b"), 70000))
	c := teedChunk(t, ln, pr, pw, []byte("the third chunk"))
	if !bytes.Equal(a.data, bytes.Repeat([]byte("a"), 1000)) {
		t.Fatal("the retained copy differs from what was written")
	}
	if sent, err := ln.spliceTo(raw, b); !sent || err != nil { // a is discarded first
		t.Fatalf("splice b: sent=%v err=%v", sent, err)
	}
	if sent, err := ln.spliceTo(raw, a); sent || err != nil {
		t.Fatalf("a left the lane, yet sent=%v err=%v", sent, err)
	}
	if sent, err := ln.spliceTo(raw, c); !sent || err != nil {
		t.Fatalf("splice c: sent=%v err=%v", sent, err)
	}
	want := append(bytes.Repeat([]byte("b"), 70000), "the third chunk"...)
	got := make([]byte, len(want))
	_ = host.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(host, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("socket got %d bytes (err %v), want b then c", len(got), err)
	}
	if ln.bytes != 0 || len(ln.pending) != 0 {
		t.Fatalf("lane not empty: %d bytes, %d chunks", ln.bytes, len(ln.pending))
	}
}

// A full lane holds the reader back until the follower sends, and never once
// the command has exited (the drain must not depend on the follower).
func TestLaneWaitRoom(t *testing.T) {
	pr, pw, raw, host := lanePair(t)
	go io.Copy(io.Discard, host)
	ln, err := openLane()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.close()
	var chunks []*Chunk
	for ln.bytes+maxChunkBytes <= laneMaxPending {
		chunks = append(chunks, teedChunk(t, ln, pr, pw, bytes.Repeat([]byte("x"), maxChunkBytes)))
	}
	released := make(chan struct{})
	go func() { ln.waitRoom(); close(released) }()
	select {
	case <-released:
		t.Fatal("waitRoom returned on a full lane")
	case <-time.After(100 * time.Millisecond):
	}
	if sent, err := ln.spliceTo(raw, chunks[0]); !sent || err != nil {
		t.Fatalf("splice: sent=%v err=%v", sent, err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("sending a chunk did not make room")
	}
	for ln.bytes+maxChunkBytes <= laneMaxPending {
		teedChunk(t, ln, pr, pw, bytes.Repeat([]byte("y"), maxChunkBytes))
	}
	ln.stopWaiting()
	done := make(chan struct{})
	go func() { ln.waitRoom(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("waitRoom blocked after stopWaiting")
	}
}
