package main

import (
	"sync/atomic"
	"syscall"

	"krunbox/agent/boot"
	"krunbox/agent/config"
	"krunbox/agent/exec"
	"krunbox/agent/fsops"
)

// agent is the sandbox's PID 1 once configured: what the handlers, the
// lifecycle and the server act on. main makes the one value; the in-process
// tests make one per test.
type agent struct {
	cfg      *config.Config
	commands *exec.Commands
	life     *lifecycle
	server   *server
	// upper is the writable layer sandbox.snapshot archives (its fd set by boot).
	upper *fsops.UpperLayer
	// ctlDirFd is an O_DIRECTORY fd on the host-shared control dir, opened
	// before pivot_root (the workload cannot reach that dir); -1 when there is none.
	ctlDirFd int
	// spawner forks the commands (into the workload cgroup leaf, once booted).
	spawner *boot.Spawner
	// commandFailed is set once a command ends badly (non-zero exit, failed
	// to start, timed out, killed by a signal it was not canceled with).
	commandFailed atomic.Bool
}

func newAgent(c *config.Config) *agent {
	a := &agent{cfg: c, ctlDirFd: -1, spawner: &boot.Spawner{}, upper: &fsops.UpperLayer{DirFd: -1, ReadingEverything: boot.ReadingEverything}}
	a.commands = exec.New(a)
	a.life = newLifecycle(a)
	a.server = newServer(a)
	return a
}

// The agent is the exec.Sandbox of its commands: configuration, lifecycle,
// artifacts outcome and workload cgroup leaf.

func (a *agent) Config() *config.Config { return a.cfg }
func (a *agent) Stopping() bool         { return a.life.isStopping() }
func (a *agent) Paused() bool           { return a.life.isPaused() }
func (a *agent) ActivityChanged()       { a.writeActivity() }
func (a *agent) OomKills() int64        { return a.spawner.OomKills() }

func (a *agent) CommandEnded(c *exec.Command) {
	if c.EndedBadly() {
		a.commandFailed.Store(true)
	}
	a.life.commandEnded()
	a.writeActivity()
}

func (a *agent) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	return a.spawner.ForkExec(path, argv, attr)
}

func (a *agent) AmbientCaps(cred *syscall.Credential) []uintptr { return boot.AmbientCapsFor(cred) }
