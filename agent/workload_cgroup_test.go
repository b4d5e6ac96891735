package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWorkloadOomKillsReadsTheCounter(t *testing.T) {
	defer func(f *os.File) { workloadOomControl = f }(workloadOomControl)
	workloadOomControl = nil
	if got := workloadOomKills(); got != -1 {
		t.Fatalf("without a leaf: got %d, want -1", got)
	}
	path := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(path, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	workloadOomControl = f
	for i := 0; i < 2; i++ { // read from the start every time
		if got := workloadOomKills(); got != 3 {
			t.Fatalf("read %d: got %d, want 3", i, got)
		}
	}
}
