package exec

import (
	"syscall"

	"krunbox/agent/config"
)

// Sandbox is what commands need from the agent around them; the agent value
// (main) provides it, a test can provide a stand-in.
type Sandbox interface {
	Config() *config.Config
	// Stopping and Paused report the sandbox's lifecycle state.
	Stopping() bool
	Paused() bool
	// CommandEnded runs once per command, when it reaches its final status.
	CommandEnded(c *Command)
	// ActivityChanged runs when a command was added.
	ActivityChanged()
	// ForkExec forks a command into the workload cgroup leaf.
	ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error)
	// AmbientCaps are the capabilities a command running as cred keeps.
	AmbientCaps(cred *syscall.Credential) []uintptr
	// OomKills counts the OOM kills only the sandbox's own limit causes (-1: unknown).
	OomKills() int64
}
