package lifecycle

import (
	"syscall"
	"testing"

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
