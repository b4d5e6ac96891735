package exec

import (
	"encoding/base64"
	"testing"

	"krunbox/agent/protocol"
)

// A page of exec.read stays under the frame cap whatever the chunk sizes, and
// the next page starts exactly after it.
func TestLogReadPagesFitTheFrameCap(t *testing.T) {
	for _, size := range []int{1, 4096, 65536, 200000, maxChunkBytes} {
		l := newOutputLog(64<<20, &retainBudget{})
		n := (16 << 20) / size
		if n > 3000 {
			n = 3000
		}
		for i := 0; i < n; i++ {
			l.append(1, make([]byte, size), nil, nil, 1)
		}
		var after uint64
		seen := 0
		for {
			chunks, more, cursor := l.read(after, bothFds, 100)
			if len(chunks) == 0 {
				t.Fatalf("size %d: empty page after %d", size, after)
			}
			encoded := 0
			for i, ch := range chunks {
				if ch.seq != after+uint64(i)+1 {
					t.Fatalf("size %d: page after %d has seq %d at %d", size, after, ch.seq, i)
				}
				encoded += base64.StdEncoding.EncodedLen(len(ch.data)) + readChunkOverhead
				ch.Release()
			}
			if encoded > readPageBytes || readPageBytes > protocol.MaxFramePayload {
				t.Fatalf("size %d: page of %d encoded bytes", size, encoded)
			}
			seen += len(chunks)
			after = cursor
			if !more {
				break
			}
		}
		if seen != n {
			t.Fatalf("size %d: read %d of %d chunks", size, seen, n)
		}
		l.forget()
	}
}

// Output retained by all commands together stays within the sandbox's budget:
// ended commands' output goes first, and their snapshots say it was truncated.
func TestRetentionIsBoundedPerSandbox(t *testing.T) {
	commands := New(nil) // no command runs: the sandbox is never asked
	chunk := make([]byte, 1<<20)
	var ended *Command
	for i := 0; i < 3; i++ {
		c, _ := commands.create("", []string{"x"}, "", 48<<20)
		for j := 0; j < 40; j++ {
			c.log.append(1, chunk, nil, nil, 1)
		}
		if i == 0 {
			c.log.close()
			close(c.done)
			ended = c
		}
		if got := commands.retained.total.Load(); got > sandboxRetainBytes {
			t.Fatalf("after command %d: %d bytes retained, budget %d", i, got, sandboxRetainBytes)
		}
	}
	if s := ended.log.stats(); !s.stdoutTruncated || s.retainedBytes != 0 {
		t.Fatalf("the ended command should have been shed first: %+v", s)
	}
	for _, c := range commands.list() {
		c.log.forget()
	}
	if got := commands.retained.total.Load(); got != 0 {
		t.Fatalf("forgetting every log left %d bytes counted", got)
	}
}
