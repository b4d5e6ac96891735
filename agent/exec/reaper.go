package exec

// The one place that waits for children. As PID 1 the agent also inherits
// every orphan, so it waits for any pid and hands exits of command leaders to
// their Command. os/exec's Wait is never used: it would race with this loop.

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// reaper waits for the children of one command table.
//
// procMu serialises registration with reaping, and signalling a command's
// process group with reaping its leader: while it is held, a registered pid
// cannot be reaped (so its pgid cannot be recycled) unseen.
//
// forkMu serialises spawns. A fork is not under procMu: under load a child
// can take long to exec (it runs at the workload's priority), and timeouts,
// signals and reaping must not wait for it. While one is in flight
// (forking), the reaper reaps registered pids only, so the new child's exit
// stays a zombie, and its pid unrecycled, until it is registered.
type reaper struct {
	procMu    sync.Mutex
	forkMu    sync.Mutex
	forking   bool
	pidOwners map[int]*Command
	sigchld   chan os.Signal // nil until StartReaper
}

// StartReaper subscribes to SIGCHLD and reaps in the background. The agent
// starts it before anything can fork.
func (t *Commands) StartReaper() {
	r := &t.procs
	if r.sigchld != nil {
		return
	}
	r.sigchld = make(chan os.Signal, 1) // coalescing is fine: each wake reaps until none is left
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go func(sigs chan os.Signal) {
		for range sigs {
			r.reapAll()
		}
	}(r.sigchld)
	r.reapAll()
}

// StopReaper ends the background reaping (a test's agent going away).
func (t *Commands) StopReaper() {
	r := &t.procs
	if r.sigchld == nil {
		return
	}
	signal.Stop(r.sigchld)
	close(r.sigchld)
	r.sigchld = nil
}

func (r *reaper) reapAll() {
	r.procMu.Lock()
	defer r.procMu.Unlock()
	if os.Getpid() != 1 || r.forking {
		r.reapOwned()
		return
	}
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if c := r.pidOwners[pid]; c != nil {
			delete(r.pidOwners, pid)
			c.onExit(ws, &ru)
		}
		// Anything else is an orphan reparented to us; reaping it is all we owe it.
	}
}

// reapOwned waits only for our own command leaders. Used while a fork is in
// flight, and when the agent is not PID 1 (tests): other children of the
// process are not ours to reap.
func (r *reaper) reapOwned() {
	for pid, c := range r.pidOwners {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		for err == syscall.EINTR {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		}
		if err == nil && got == pid {
			delete(r.pidOwners, pid)
			c.onExit(ws, &ru)
		}
	}
}
