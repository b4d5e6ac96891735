package main

import (
	"testing"
	"time"
)

// A command started without timeoutMs has no deadline at all (no timer is
// armed, so no clock can end it); one with a deadline reports it.
func TestNoDeadlineUnlessAsked(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"id": "forever", "argv": []string{"sleep", "30"}, "follow": true})
	waitRunning(t, "forever")
	cmd := commands.get("forever")
	cmd.mu.Lock()
	armed := cmd.timeout != nil
	cmd.mu.Unlock()
	if armed {
		t.Fatal("a command given no timeoutMs has a deadline timer")
	}
	if snap := commandOf(c.call("exec.get", map[string]any{"commandId": "forever"})); snap["timeoutMs"] != nil {
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

func waitRunning(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c := commands.get(id); c != nil {
			c.mu.Lock()
			running := c.status == stRunning
			c.mu.Unlock()
			if running {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("command %s never ran", id)
}
