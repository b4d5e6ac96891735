package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"krunbox/agent/fsops"
	"krunbox/agent/protocol"
)

// The fs ops through the real server and frames: DATA in with END, DATA out under
// WINDOW credit, and CANCEL of an upload.
func TestFsOverTheProtocol(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	dir := t.TempDir()
	p := filepath.Join(dir, "up.bin")

	content := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB
	up := c.request("fs.write", map[string]any{"path": p, "mode": "0640"})
	credit := 0
	for off := 0; off < len(content); off += 64 << 10 {
		end := off + 64<<10
		if end > len(content) {
			end = len(content)
		}
		for credit < end-off { // the host never sends beyond the agent's WINDOW grants
			f := up.next(5 * time.Second)
			if f.Type != protocol.FtWindow {
				t.Fatalf("frame %#x %s while uploading", f.Type, f.Payload)
			}
			credit += int(binary.BigEndian.Uint32(f.Payload))
		}
		credit -= end - off
		up.sendData(content[off:end], end == len(content))
	}
	r := up.collect(30 * time.Second)
	if r.final.Type != protocol.FtResponse || r.finalJS["bytes"] != float64(len(content)) {
		t.Fatalf("write: %s", r.final.Payload)
	}

	r = c.request("fs.read", map[string]any{"path": p, "window": 65536}).collect(30 * time.Second)
	if r.final.Type != protocol.FtResponse || !bytes.Equal(r.data, content) || len(r.events) != 1 || r.events[0]["size"] != float64(len(content)) {
		t.Fatalf("read: %d bytes, events %v, final %s", len(r.data), r.events, r.final.Payload)
	}

	// CANCEL mid-upload: the file keeps its bytes and no temp file remains.
	up = c.request("fs.write", map[string]any{"path": p})
	if f := up.next(5 * time.Second); f.Type != protocol.FtWindow {
		t.Fatalf("frame %#x before the first WINDOW", f.Type)
	}
	up.sendData([]byte("partial"), false)
	time.Sleep(50 * time.Millisecond)
	c.sendRaw(protocol.EncodeFrame(up.id, protocol.FtCancel, 0, nil))
	deadline := time.Now().Add(5 * time.Second)
	for len(uploadTemps(t, dir)) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got, _ := os.ReadFile(p)
	if !bytes.Equal(got, content) || len(uploadTemps(t, dir)) != 0 {
		t.Fatalf("after CANCEL: %d bytes, temps %v", len(got), uploadTemps(t, dir))
	}

	r = c.request("fs.stat", map[string]any{"path": filepath.Join(dir, "missing")}).collect(5 * time.Second)
	if r.final.Type != protocol.FtError || r.finalJS["code"] != "S211" || r.finalJS["path"] != filepath.Join(dir, "missing") {
		t.Fatalf("stat missing: %s", r.final.Payload)
	}
}

// uploadTemps lists the fs ops' temporary files left under dir.
func uploadTemps(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if strings.Contains(filepath.Base(p), fsops.TempMarker) {
			found = append(found, p)
		}
		return nil
	})
	return found
}
