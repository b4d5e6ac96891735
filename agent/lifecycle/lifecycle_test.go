package lifecycle

import (
	"syscall"
	"testing"
	"time"

	"krunbox/agent/config"
)

// idleCommands is a sandbox with no command running.
type idleCommands struct{}

func (idleCommands) ActiveCount() int            { return 0 }
func (idleCommands) PauseTimers()                {}
func (idleCommands) ResumeTimers()               {}
func (idleCommands) MarkShutdown()               {}
func (idleCommands) SignalGroups(syscall.Signal) {}

// Whether the artifacts are archived follows their "when" and every command
// outcome reported so far: one bad ending is enough to count as a failure.
func TestArtifactsFollowTheCommandOutcomes(t *testing.T) {
	wanted := func(when string, outcomes ...bool) bool {
		l := New(&config.Config{}, idleCommands{})
		for _, badly := range outcomes {
			l.CommandEnded(badly)
		}
		return artifactsWanted(&config.Artifacts{Paths: []string{"/workspace/out"}, When: when}, l.commandFailed.Load())
	}
	for _, tc := range []struct {
		when     string
		outcomes []bool
		want     bool
	}{
		{"on_success", nil, true},
		{"on_success", []bool{false, true, false}, false},
		{"on_failure", []bool{false, false}, false},
		{"on_failure", []bool{false, true}, true},
		{"always", []bool{true}, true},
	} {
		if got := wanted(tc.when, tc.outcomes...); got != tc.want {
			t.Errorf("%s after %v: archived %v, want %v", tc.when, tc.outcomes, got, tc.want)
		}
	}
	if artifactsWanted(&config.Artifacts{When: "always"}, false) {
		t.Error("archived with no paths")
	}
}

// An idle sandbox's agent sleeps until its idle timeout is due; it looks again every
// second only where something besides its timer can end it (a wall-clock TTL, the
// reaper's host-exit file).
func TestWatchSleepsUntilTheIdleTimeoutUnlessAClockOrFileCanEndItSooner(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want time.Duration
	}{
		{"idle timeout only", config.Config{IdleTimeoutMs: 300_000}, 300 * time.Second},
		{"no timeout at all", config.Config{}, time.Hour},
		{"a TTL an hour away", config.Config{IdleTimeoutMs: 300_000, ExpiresAt: now.Add(time.Hour).UnixMilli()}, time.Second},
		{"artifacts", config.Config{IdleTimeoutMs: 300_000, Artifacts: &config.Artifacts{Paths: []string{"/workspace"}, When: "always"}}, time.Second},
		{"idle timeout in 200 ms", config.Config{IdleTimeoutMs: 200, ExpiresAt: now.Add(time.Hour).UnixMilli()}, 200 * time.Millisecond},
	} {
		l := New(&tc.cfg, idleCommands{})
		reason, next := l.check(l.lastActivity)
		if reason != "" || next != tc.want {
			t.Errorf("%s: check says %q, next in %v; want next in %v", tc.name, reason, next, tc.want)
		}
	}
}
