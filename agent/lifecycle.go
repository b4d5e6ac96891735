package main

// Sandbox lifecycle: activity tracking, idle timeout, TTL, pause and the
// shutdown sequence. All of it runs inside the sandbox, so it holds even when
// no host is connected.

import (
	"encoding/json"
	"log"
	"os"
	"sync"
	"syscall"
	"time"
)

// Shutdown reasons and the agent's exit status for each.
var shutdownExitCodes = map[string]int{
	"user_killed":  0,
	"idle_expired": 10,
	"ttl_expired":  11,
	"host_exit":    12,
}

type lifecycle struct {
	a              *agent
	mu             sync.Mutex
	startedAt      int64
	lastActivity   time.Time // monotonic
	lastActivityAt int64     // unix ms, for sandbox.info
	inflight       int       // request streams not yet finished
	paused         bool
	stopping       bool
	kick           chan struct{}
	stopWatch      chan struct{} // closed to end watch() (tests)
	shutdownOnce   sync.Once

	// exit ends the agent after the shutdown sequence (exit status or power-off).
	exit func(reason string)
}

func newLifecycle(a *agent) *lifecycle {
	now := time.Now()
	return &lifecycle{
		a:              a,
		startedAt:      now.UnixMilli(),
		lastActivity:   now,
		lastActivityAt: now.UnixMilli(),
		kick:           make(chan struct{}, 1),
		stopWatch:      make(chan struct{}),
		exit:           func(string) { os.Exit(0) },
	}
}

func (l *lifecycle) touchLocked() {
	l.lastActivity = time.Now()
	l.lastActivityAt = l.lastActivity.UnixMilli()
}

func (l *lifecycle) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *lifecycle) requestStarted() {
	l.mu.Lock()
	l.inflight++
	l.touchLocked()
	l.mu.Unlock()
}

func (l *lifecycle) requestEnded() {
	l.mu.Lock()
	l.inflight--
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
}

// commandEnded restarts the idle clock: idleness counts from the moment the
// sandbox became idle, not from the request that started a long command.
func (l *lifecycle) commandEnded() {
	l.mu.Lock()
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
}

func (l *lifecycle) isPaused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

func (l *lifecycle) isStopping() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopping
}

// check returns a shutdown reason when one is due, else how long until the
// next check is worth doing.
func (l *lifecycle) check(now time.Time) (reason string, next time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next = time.Hour
	cfg := l.a.cfg
	if l.a.hostGone() {
		return "host_exit", 0
	}
	if cfg.ExpiresAt > 0 {
		left := time.Duration(cfg.ExpiresAt-now.UnixMilli()) * time.Millisecond
		if left <= 0 {
			return "ttl_expired", 0
		}
		if left < next {
			next = left
		}
	}
	idleFor := time.Duration(cfg.IdleTimeoutMs) * time.Millisecond
	if idleFor > 0 && !l.paused && l.inflight == 0 && l.a.commands.ActiveCount() == 0 {
		left := idleFor - now.Sub(l.lastActivity)
		if left <= 0 {
			return "idle_expired", 0
		}
		if left < next {
			next = left
		}
	}
	return "", next
}

// hostExitFile is created in the control dir by the reaper when the host that
// owned a sandbox with artifacts died (such a sandbox does not die with it, so
// that this shutdown can archive them first; lib/reaper.ts).
const hostExitFile = "host-exit"

func (a *agent) hostGone() bool {
	if a.ctlDirFd < 0 || a.cfg.Artifacts == nil {
		return false
	}
	fd, err := syscall.Openat(a.ctlDirFd, hostExitFile, 0x200000 /* O_PATH */ |syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

// watch enforces idle timeout and TTL until shutdown starts.
func (l *lifecycle) watch() {
	t := time.NewTimer(0)
	for {
		select {
		case <-l.stopWatch:
			t.Stop()
			return
		case <-t.C:
		case <-l.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		reason, next := l.check(time.Now())
		if reason != "" {
			l.shutdown(reason)
			return
		}
		// Wake at least every second: TTL is wall-clock and the clock may jump.
		if next > time.Second {
			next = time.Second
		}
		t.Reset(next)
	}
}

// pause stops every process of the sandbox but the agent and suspends the
// command timers and the idle clock.
func (l *lifecycle) pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused || l.stopping {
		return
	}
	l.paused = true
	l.a.commands.PauseTimers()
	l.a.signalAllProcesses(syscall.SIGSTOP)
	go l.a.writeActivity()
}

func (l *lifecycle) resume() {
	l.mu.Lock()
	if !l.paused {
		l.mu.Unlock()
		return
	}
	l.paused = false
	l.a.signalAllProcesses(syscall.SIGCONT)
	l.a.commands.ResumeTimers()
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
	l.a.writeActivity()
}

// signalAllProcesses signals every process in the sandbox. As PID 1 of the
// sandbox's pid namespace (or of the VM) kill(-1) reaches exactly those and
// spares the agent. Run any other way (tests), only command groups are hit.
func (a *agent) signalAllProcesses(sig syscall.Signal) {
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, sig)
		return
	}
	a.commands.SignalGroups(sig)
}

// shutdown ends the sandbox: kill everything, finish the command streams,
// tell every host connection, record exit.json, then exit. It runs once;
// later callers return at once.
func (l *lifecycle) shutdown(reason string) {
	l.shutdownOnce.Do(func() {
		go l.runShutdown(reason)
	})
}

func (l *lifecycle) runShutdown(reason string) {
	log.Printf("shutdown: %s", reason)
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()

	l.a.commands.MarkShutdown()
	l.a.signalAllProcesses(syscall.SIGKILL)
	// SIGKILL also ends stopped processes, so a paused sandbox dies the same way.
	waitUntil(3*time.Second, func() bool { return l.a.commands.ActiveCount() == 0 })
	// Let the command streams send their final RESPONSE.
	waitUntil(time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.inflight == 0
	})
	l.a.collectArtifacts()
	l.a.server.broadcastShutdown(reason, time.Second)
	l.a.writeExitFile(reason)
	l.exit(reason)
}

func waitUntil(limit time.Duration, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func (a *agent) writeExitFile(reason string) {
	b, _ := json.Marshal(map[string]any{"reason": reason, "at": time.Now().UnixMilli()})
	a.writeCtlFile("exit.json", b, true)
}

// writeActivity records, for hosts that list this sandbox without a connection (other
// processes, the CLI), whether a command is running and whether the sandbox is paused.
func (a *agent) writeActivity() {
	b, _ := json.Marshal(map[string]any{"activeCommands": a.commands.ActiveCount(), "paused": a.life.isPaused(), "at": time.Now().UnixMilli()})
	a.writeCtlFile("activity.json", b, false)
}

// writeCtlFile replaces a file in the host-shared control dir atomically (temp, rename);
// durable records are fsynced first (activity is rewritten per command, so it is not).
func (a *agent) writeCtlFile(name string, data []byte, durable bool) {
	ctlDirFd := a.ctlDirFd
	if ctlDirFd < 0 {
		return
	}
	tmp := "." + name + ".tmp"
	fd, err := syscall.Openat(ctlDirFd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		log.Printf("%s: %v", name, err)
		return
	}
	_, werr := syscall.Write(fd, data)
	if durable {
		_ = syscall.Fsync(fd)
	}
	syscall.Close(fd)
	if werr == nil {
		werr = syscall.Renameat(ctlDirFd, tmp, ctlDirFd, name)
	}
	if werr != nil {
		log.Printf("%s: %v", name, werr)
	}
}
