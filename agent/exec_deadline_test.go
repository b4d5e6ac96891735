package main

import (
	"testing"
	"time"
)

// A command started without timeoutMs reports no deadline and runs until
// canceled; one with a deadline reports it (the timer itself: exec's tests).
func TestNoDeadlineUnlessAsked(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"id": "forever", "argv": []string{"sleep", "30"}, "follow": true})
	snap := waitRunning(t, c, "forever")
	if snap["timeoutMs"] != nil {
		t.Fatalf("snapshot of a command without deadline: timeoutMs %v", snap["timeoutMs"])
	}
	c.call("exec.cancel", map[string]any{"commandId": "forever", "mode": "force"})
	if st := commandOf(s.collect(5 * time.Second).finalJS)["status"]; st != "canceled" {
		t.Fatalf("status %v", st)
	}

	r := c.request("exec.start", map[string]any{"argv": []string{"true"}, "timeoutMs": 90_000}).collect(5 * time.Second)
	if got := commandOf(r.finalJS)["timeoutMs"]; got != float64(90_000) {
		t.Fatalf("timeoutMs reported %v", got)
	}
}

// waitRunning polls exec.get until the command runs and returns its snapshot.
func waitRunning(t *testing.T, c *tclient, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		// Until exec.start has registered it, exec.get answers E100.
		r := c.request("exec.get", map[string]any{"commandId": id}).collect(5 * time.Second)
		if snap := commandOf(r.finalJS); snap["status"] == "running" {
			return snap
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("command %s never ran", id)
	return nil
}
