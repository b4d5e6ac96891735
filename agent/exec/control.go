package exec

// What the rest of the agent does to all commands at once: pause and resume
// with the sandbox, end them with it, count them for the idle clock.

import "syscall"

// PauseTimers stops the command timeouts and kill-grace periods from counting
// (a paused process cannot make progress); ResumeTimers lets them run again.
func (t *Commands) PauseTimers()  { t.timers.pause() }
func (t *Commands) ResumeTimers() { t.timers.resume() }

// ActiveCount is the number of commands created and not yet ended.
func (t *Commands) ActiveCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// SignalGroups signals the process group of every command still running.
func (t *Commands) SignalGroups(sig syscall.Signal) {
	for _, c := range t.list() {
		c.mu.Lock()
		pid, exited := c.pid, c.exited
		c.mu.Unlock()
		if pid > 0 && !exited {
			_ = syscall.Kill(-pid, sig)
		}
	}
}

// MarkShutdown flags every live command as killed by the sandbox's end; the
// caller then kills every process.
func (t *Commands) MarkShutdown() {
	for _, c := range t.list() {
		c.markShutdown()
	}
}
