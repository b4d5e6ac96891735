package exec

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// A reader that first runs after the post-exit drain deadline (a loaded host)
// still keeps what the command wrote before it exited; a writer that holds the
// pipe open (a grandchild) does not keep it reading.
func TestPostExitDrainKeepsBufferedOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()                                            // stays open: the grandchild
	want := bytes.Repeat([]byte("output before exit\n"), 3000) // 57 000 bytes: fits the default pipe
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	c := &Command{log: newOutputLog(1<<22, &retainBudget{})}
	c.log.setDraining()
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	c.readers.Add(1)
	c.readPipe(r, 1)

	chunks, _, _ := c.log.read(0, bothFds, 1<<20)
	var got []byte
	for _, ch := range chunks {
		got = append(got, ch.data...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("kept %d of the %d bytes written before the deadline", len(got), len(want))
	}
}
