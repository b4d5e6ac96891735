package main

import (
	"syscall"

	"krunbox/agent/config"
	"krunbox/agent/exec"
)

// sandboxHooks gives commands the agent's configuration, lifecycle, artifacts
// outcome and workload cgroup leaf.
type sandboxHooks struct{}

func (sandboxHooks) Config() *config.Config { return cfg }
func (sandboxHooks) Stopping() bool         { return life.isStopping() }
func (sandboxHooks) Paused() bool           { return life.isPaused() }
func (sandboxHooks) ActivityChanged()       { writeActivity() }
func (sandboxHooks) OomKills() int64        { return workloadOomKills() }

func (sandboxHooks) CommandEnded(c *exec.Command) {
	noteCommandOutcome(c)
	life.commandEnded()
	writeActivity()
}

func (sandboxHooks) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	return forkExec(path, argv, attr)
}

func (sandboxHooks) AmbientCaps(cred *syscall.Credential) []uintptr { return ambientCapsFor(cred) }
