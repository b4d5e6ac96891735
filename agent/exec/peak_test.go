package exec

import "testing"

func TestCommandPeakRssIsUnknownAtOrBelowTheAgentsPeak(t *testing.T) {
	if p := commandPeakRssKb(5000, 5000); p != nil {
		t.Fatalf("a peak equal to the agent's could be the agent's, got %d", *p)
	}
	if p := commandPeakRssKb(9000, -1); p != nil {
		t.Fatal("with the agent's peak unreadable nothing can be told apart")
	}
	if p := commandPeakRssKb(9000, 5000); p == nil || *p != 9000 {
		t.Fatalf("a peak above the agent's is the command's own, got %v", p)
	}
	if own := ownPeakRssKb(); own <= 0 {
		t.Fatalf("VmHWM of this process: %d", own)
	}
}
