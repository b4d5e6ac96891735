package main

// The one place that waits for children. As PID 1 the agent also inherits
// every orphan, so it waits for any pid and hands exits of command leaders to
// their Command. os/exec's Wait is never used: it would race with this loop.

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// procMu serialises fork+registration with reaping, and signalling a
// command's process group with reaping its leader: while it is held, a
// registered pid cannot be reaped (so its pgid cannot be recycled) unseen.
var (
	procMu    sync.Mutex
	pidOwners = map[int]*Command{}
)

var reaperStarted bool

// startReaper subscribes to SIGCHLD and reaps in the background.
func startReaper() {
	if reaperStarted {
		return
	}
	reaperStarted = true
	sigs := make(chan os.Signal, 1) // coalescing is fine: each wake reaps until none is left
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			reapAll()
		}
	}()
	reapAll()
}

func reapAll() {
	procMu.Lock()
	defer procMu.Unlock()
	if os.Getpid() != 1 {
		reapOwned()
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
		if c := pidOwners[pid]; c != nil {
			delete(pidOwners, pid)
			c.onExit(ws, &ru)
		}
		// Anything else is an orphan reparented to us; reaping it is all we owe it.
	}
}

// reapOwned waits only for our own command leaders. Used when the agent is
// not PID 1 (tests): other children of the process are not ours to reap.
func reapOwned() {
	for pid, c := range pidOwners {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		for err == syscall.EINTR {
			got, err = syscall.Wait4(pid, &ws, syscall.WNOHANG, &ru)
		}
		if err == nil && got == pid {
			delete(pidOwners, pid)
			c.onExit(ws, &ru)
		}
	}
}
