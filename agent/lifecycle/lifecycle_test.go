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
		l.HostArrived()
		reason, next := l.check(l.lastActivity)
		if reason != "" || next != tc.want {
			t.Errorf("%s: check says %q, next in %v; want next in %v", tc.name, reason, next, tc.want)
		}
	}
}

// The idle clock starts when the first host completes its handshake: a create that took
// longer than a short idle timeout on a busy host failed in the handshake. A host that
// never arrives still leaves the sandbox to end, after hostArrivalGrace.
func TestTheIdleClockWaitsForTheFirstHost(t *testing.T) {
	l := New(&config.Config{IdleTimeoutMs: 1}, idleCommands{})
	booted := l.lastActivity
	if reason, next := l.check(booted.Add(time.Second)); reason != "" || next != hostArrivalGrace-time.Second {
		t.Fatalf("1 s after boot, no host yet: check says %q, next in %v", reason, next)
	}
	if reason, _ := l.check(booted.Add(hostArrivalGrace)); reason != "idle_expired" {
		t.Fatalf("no host within the grace: check says %q, want idle_expired", reason)
	}
	l.HostArrived()
	arrived := l.lastActivity
	if reason, next := l.check(arrived); reason != "" || next != time.Millisecond {
		t.Fatalf("as the host arrives: check says %q, next in %v", reason, next)
	}
	if reason, _ := l.check(arrived.Add(time.Millisecond)); reason != "idle_expired" {
		t.Fatalf("1 ms after the host arrived: check says %q, want idle_expired", reason)
	}
}

// sandbox.setLifetime's checks: a TTL only moves later and never past the boot cap, an idle
// timeout stays within its cap, and check() enforces the moved deadline, not the boot one.
func TestSetLifetimeStaysWithinTheBootCaps(t *testing.T) {
	now := time.Now()
	base := now.Add(-time.Second).UnixMilli() // already due
	l := New(&config.Config{ExpiresAt: base, MaxExpiresAt: base + 60_000, MaxIdleTimeoutMs: 1000}, idleCommands{})
	ptr := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name     string
		at, idle *int64
		wantCode string
	}{
		{"past the cap", ptr(60_001), nil, "S402"},
		{"by nothing", ptr(0), nil, "S001"},
		{"back", ptr(-1), nil, "S001"},
		{"overflowing", ptr(1 << 62), nil, "S402"},
		{"idle over its cap", nil, ptr(1001), "S402"},
		{"negative idle", nil, ptr(-1), "S001"},
		{"at the cap", ptr(60_000), ptr(1000), ""},
	} {
		got := ""
		if e := l.lifetimeRefusal(tc.at, tc.idle); e != nil {
			got = e.Code
		}
		if got != tc.wantCode {
			t.Errorf("%s: code %q, want %q", tc.name, got, tc.wantCode)
		}
	}
	if reason, _ := l.check(now); reason != "ttl_expired" {
		t.Fatalf("before the move: reason %q, want ttl_expired", reason)
	}
	l.expiresAt = base + 60_000
	if reason, _ := l.check(now); reason != "" {
		t.Fatalf("after the move: reason %q, want none", reason)
	}
	noTTL := New(&config.Config{MaxExpiresAt: base + 60_000}, idleCommands{})
	if e := noTTL.lifetimeRefusal(ptr(1000), nil); e == nil || e.Code != "S001" {
		t.Fatalf("a sandbox without a TTL got one: %v", e)
	}
}
