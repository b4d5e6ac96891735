package main

import (
	"syscall"

	"krunbox/agent/boot"
	"krunbox/agent/config"
	"krunbox/agent/exec"
	"krunbox/agent/fsops"
	"krunbox/agent/lifecycle"
)

// agent is the sandbox's PID 1 once configured: what the handlers, the
// lifecycle and the server act on. main makes the one value; the in-process
// tests make one per test.
type agent struct {
	cfg      *config.Config
	commands *exec.Commands
	life     *lifecycle.Lifecycle
	server   *server
	// upper is the writable layer sandbox.snapshot archives (its fd set by boot).
	upper *fsops.UpperLayer
	// spawner forks the commands (into the workload cgroup leaf, once booted).
	spawner *boot.Spawner
}

func newAgent(c *config.Config) *agent {
	a := &agent{cfg: c, spawner: &boot.Spawner{}, upper: &fsops.UpperLayer{DirFd: -1, ReadingEverything: boot.ReadingEverything}}
	a.commands = exec.New(a)
	a.life = lifecycle.New(c, a.commands)
	a.server = newServer(a)
	a.life.Broadcast = a.server.broadcastShutdown
	return a
}

// The agent is the exec.Sandbox of its commands: configuration, lifecycle
// (which also keeps the artifacts outcome) and workload cgroup leaf.

func (a *agent) Config() *config.Config { return a.cfg }
func (a *agent) Stopping() bool         { return a.life.Stopping() }
func (a *agent) Paused() bool           { return a.life.Paused() }
func (a *agent) ActivityChanged()       { a.life.WriteActivity() }
func (a *agent) OomKills() int64        { return a.spawner.OomKills() }

func (a *agent) CommandEnded(c *exec.Command) { a.life.CommandEnded(c.EndedBadly()) }

func (a *agent) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	return a.spawner.ForkExec(path, argv, attr)
}

func (a *agent) AmbientCaps(cred *syscall.Credential) []uintptr { return boot.AmbientCapsFor(cred) }
