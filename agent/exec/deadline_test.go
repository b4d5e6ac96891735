package exec

import (
	"os"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/config"
)

// stubSandbox runs commands as the test's own user, never paused or stopping.
type stubSandbox struct{ cfg *config.Config }

func (s stubSandbox) Config() *config.Config { return s.cfg }
func (stubSandbox) Stopping() bool           { return false }
func (stubSandbox) Paused() bool             { return false }
func (stubSandbox) CommandEnded(*Command)    {}
func (stubSandbox) ActivityChanged()         {}
func (stubSandbox) OomKills() int64          { return -1 }
func (stubSandbox) AmbientCaps(*syscall.Credential) []uintptr {
	return nil
}
func (stubSandbox) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	return syscall.ForkExec(path, argv, attr)
}

// A command started without a timeout has no deadline timer at all (no clock
// can end it); one given a timeout has one armed.
func TestDeadlineTimerOnlyWhenAsked(t *testing.T) {
	dir := t.TempDir()
	cmds := New(stubSandbox{&config.Config{Workspace: dir}})
	cmds.StartReaper()
	defer cmds.StopReaper()
	sleep, err := resolveExecutable("sleep", os.Getenv("PATH"), dir)
	if err != nil {
		t.Skip(err)
	}
	for _, timeout := range []time.Duration{0, time.Minute} {
		c, _ := cmds.create("", []string{"sleep", "30"}, "", 1<<20)
		c.start(spawnSpec{path: sleep, cwd: dir, timeout: timeout, killGrace: time.Second})
		c.mu.Lock()
		armed, status := c.timeout != nil, c.status
		c.mu.Unlock()
		if status != stRunning || armed != (timeout > 0) {
			t.Errorf("timeout %v: status %s, deadline timer armed %v", timeout, status, armed)
		}
		c.terminate(termCancel, true, 0)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("timeout %v: the canceled command never ended", timeout)
		}
	}
}
