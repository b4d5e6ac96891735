package lifecycle

// Sandbox lifecycle: activity tracking, idle timeout, TTL, pause and the
// shutdown sequence. All of it runs inside the sandbox, so it holds even when
// no host is connected.

import (
	"encoding/json"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"krunbox/agent/config"
)

// Shutdown reasons and the agent's exit status for each.
var exitCodes = map[string]int{
	"user_killed":  0,
	"idle_expired": 10,
	"ttl_expired":  11,
	"host_exit":    12,
}

// ExitCode is the agent's exit status after a shutdown for reason.
func ExitCode(reason string) int { return exitCodes[reason] }

// Commands is what the lifecycle does to the sandbox's commands (exec.Commands).
type Commands interface {
	ActiveCount() int
	PauseTimers()
	ResumeTimers()
	MarkShutdown()
	SignalGroups(sig syscall.Signal)
}

// Lifecycle is the sandbox's life inside the agent: activity, pause, the
// shutdown sequence and what it leaves in the control dir (activity, exit
// record, artifacts).
type Lifecycle struct {
	cfg  *config.Config
	cmds Commands
	// CtlDirFd is an O_DIRECTORY fd on the host-shared control dir, opened
	// before pivot_root (the workload cannot reach that dir); -1 when there
	// is none. Set at boot, before serving.
	CtlDirFd int
	// Broadcast tells every host connection that the sandbox ends (the
	// connection server's), waiting at most wait for them to take it.
	Broadcast func(reason string, wait time.Duration)
	// Exit ends the agent after the shutdown sequence (exit status or power-off).
	Exit func(reason string)
	// commandFailed is set once a command ends badly (non-zero exit, failed
	// to start, timed out, killed by a signal it was not canceled with).
	commandFailed atomic.Bool

	mu             sync.Mutex
	startedAt      int64
	expiresAt      int64     // unix ms, 0: no TTL (cfg's, until sandbox.setLifetime moves it)
	idleTimeoutMs  int64     // 0: none
	lastActivity   time.Time // monotonic
	lastActivityAt int64     // unix ms, for sandbox.info
	inflight       int       // request streams not yet finished
	hostArrived    bool      // a host has completed a handshake: the idle clock runs from then
	paused         bool
	stopping       bool
	kick           chan struct{}
	stopWatch      chan struct{} // closed to end Watch (StopWatching)
	shutdownOnce   sync.Once
	activityMu     sync.Mutex // one activity.json writer at a time
}

// New is the lifecycle of a sandbox configured by cfg whose commands are cmds.
func New(cfg *config.Config, cmds Commands) *Lifecycle {
	now := time.Now()
	return &Lifecycle{
		cfg:            cfg,
		cmds:           cmds,
		CtlDirFd:       -1,
		Broadcast:      func(string, time.Duration) {},
		startedAt:      now.UnixMilli(),
		expiresAt:      cfg.ExpiresAt,
		idleTimeoutMs:  cfg.IdleTimeoutMs,
		lastActivity:   now,
		lastActivityAt: now.UnixMilli(),
		kick:           make(chan struct{}, 1),
		stopWatch:      make(chan struct{}),
		Exit:           func(string) { os.Exit(0) },
	}
}

func (l *Lifecycle) touchLocked() {
	l.lastActivity = time.Now()
	l.lastActivityAt = l.lastActivity.UnixMilli()
}

func (l *Lifecycle) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// HostArrived starts the idle clock at the first completed handshake: a
// sandbox is not idle while the host that created it is still connecting
// (a busy host took longer than a short idle timeout, and the create failed).
func (l *Lifecycle) HostArrived() {
	l.mu.Lock()
	if !l.hostArrived {
		l.hostArrived = true
		l.touchLocked()
	}
	l.mu.Unlock()
	l.wake()
}

// RequestStarted counts a request in flight (the server, per request).
func (l *Lifecycle) RequestStarted() {
	l.mu.Lock()
	l.inflight++
	l.touchLocked()
	l.mu.Unlock()
}

// RequestEnded ends what RequestStarted counted.
func (l *Lifecycle) RequestEnded() {
	l.mu.Lock()
	l.inflight--
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
}

// CommandEnded restarts the idle clock: idleness counts from the moment the
// sandbox became idle, not from the request that started a long command.
// badly: the command's outcome counts as a failure for the artifacts.
func (l *Lifecycle) CommandEnded(badly bool) {
	if badly {
		l.commandFailed.Store(true)
	}
	l.mu.Lock()
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
	l.WriteActivity()
}

// InFlight is the number of requests not yet finished.
func (l *Lifecycle) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inflight
}

// Paused reports whether the sandbox is paused.
func (l *Lifecycle) Paused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

// Stopping reports whether the shutdown has begun.
func (l *Lifecycle) Stopping() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopping
}

// check returns a shutdown reason when one is due, else how long until the
// next check is worth doing.
func (l *Lifecycle) check(now time.Time) (reason string, next time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next = time.Hour
	cfg := l.cfg
	if l.hostGone() {
		return "host_exit", 0
	}
	if l.expiresAt > 0 {
		left := time.Duration(l.expiresAt-now.UnixMilli()) * time.Millisecond
		if left <= 0 {
			return "ttl_expired", 0
		}
		if left < next {
			next = left
		}
	}
	idleFor := time.Duration(l.idleTimeoutMs) * time.Millisecond
	if idleFor > 0 && !l.hostArrived && idleFor < hostArrivalGrace {
		// Nobody has connected yet: a host that never comes (killed while creating) still
		// leaves the sandbox to end, after the grace rather than the timeout.
		idleFor = hostArrivalGrace
	}
	if idleFor > 0 && !l.paused && l.inflight == 0 && l.cmds.ActiveCount() == 0 {
		left := idleFor - now.Sub(l.lastActivity)
		if left <= 0 {
			return "idle_expired", 0
		}
		if left < next {
			next = left
		}
	}
	// At least every second where a shutdown can fall due without the timer knowing:
	// a TTL is wall-clock (the clock may jump), and the reaper says the host is gone
	// (artifacts) with a file. Else an idle sandbox sleeps until its idle timeout:
	// 1 000 agents waking every second took 18 % of a host core.
	if (l.expiresAt > 0 || cfg.Artifacts != nil) && next > time.Second {
		next = time.Second
	}
	return "", next
}

// hostArrivalGrace is how long an idle sandbox waits for its first host.
const hostArrivalGrace = 30 * time.Second

// hostExitFile is created in the control dir by the reaper when the host that
// owned a sandbox with artifacts died (such a sandbox does not die with it, so
// that this shutdown can archive them first; lib/reaper.ts).
const hostExitFile = "host-exit"

func (l *Lifecycle) hostGone() bool {
	if l.CtlDirFd < 0 || l.cfg.Artifacts == nil {
		return false
	}
	fd, err := syscall.Openat(l.CtlDirFd, hostExitFile, 0x200000 /* O_PATH */ |syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	syscall.Close(fd)
	return true
}

// StopWatching ends Watch (an in-process test's agent going away).
func (l *Lifecycle) StopWatching() { close(l.stopWatch) }

// Watch enforces idle timeout and TTL until shutdown starts (or StopWatching).
func (l *Lifecycle) Watch() {
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
			l.Shutdown(reason)
			return
		}
		t.Reset(next)
	}
}

// pause stops every process of the sandbox but the agent and suspends the
// command timers and the idle clock.
func (l *Lifecycle) pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused || l.stopping {
		return
	}
	l.paused = true
	l.cmds.PauseTimers()
	l.signalAllProcesses(syscall.SIGSTOP)
	go l.WriteActivity()
}

func (l *Lifecycle) resume() {
	l.mu.Lock()
	if !l.paused {
		l.mu.Unlock()
		return
	}
	l.paused = false
	l.signalAllProcesses(syscall.SIGCONT)
	l.cmds.ResumeTimers()
	l.touchLocked()
	l.mu.Unlock()
	l.wake()
	l.WriteActivity()
}

// signalAllProcesses signals every process in the sandbox. As PID 1 of the
// sandbox's pid namespace (or of the VM) kill(-1) reaches exactly those and
// spares the agent. Run any other way (tests), only command groups are hit.
func (l *Lifecycle) signalAllProcesses(sig syscall.Signal) {
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, sig)
		return
	}
	l.cmds.SignalGroups(sig)
}

// Shutdown ends the sandbox: kill everything, finish the command streams,
// tell every host connection, record exit.json, then exit. It runs once;
// later callers return at once.
func (l *Lifecycle) Shutdown(reason string) {
	l.shutdownOnce.Do(func() {
		go l.runShutdown(reason)
	})
}

func (l *Lifecycle) runShutdown(reason string) {
	log.Printf("shutdown: %s", reason)
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()

	l.cmds.MarkShutdown()
	l.signalAllProcesses(syscall.SIGKILL)
	// SIGKILL also ends stopped processes, so a paused sandbox dies the same way.
	waitUntil(3*time.Second, func() bool { return l.cmds.ActiveCount() == 0 })
	// Let the command streams send their final RESPONSE.
	waitUntil(time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.inflight == 0
	})
	l.collectArtifacts()
	l.Broadcast(reason, time.Second)
	l.writeExitFile(reason)
	l.Exit(reason)
}

func waitUntil(limit time.Duration, cond func() bool) {
	deadline := time.Now().Add(limit)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *Lifecycle) writeExitFile(reason string) {
	b, _ := json.Marshal(map[string]any{"reason": reason, "at": time.Now().UnixMilli()})
	l.writeCtlFile("exit.json", b, true)
}

// WriteActivity records, for hosts that list this sandbox without a connection (other
// processes, the CLI), whether a command is running, whether the sandbox is paused, and the
// deadlines it enforces (sandbox.setLifetime moves them). Writers take turns, each reading the
// state inside its turn, so the file left last is never older than the state.
func (l *Lifecycle) WriteActivity() {
	l.activityMu.Lock()
	defer l.activityMu.Unlock()
	active := l.cmds.ActiveCount()
	l.mu.Lock()
	record := map[string]any{"activeCommands": active, "paused": l.paused, "expiresAt": l.expiresAt, "idleTimeoutMs": l.idleTimeoutMs, "at": time.Now().UnixMilli()}
	l.mu.Unlock()
	b, _ := json.Marshal(record)
	l.writeCtlFile("activity.json", b, false)
}

// writeCtlFile replaces a file in the host-shared control dir atomically (temp, rename);
// durable records are fsynced first (activity is rewritten per command, so it is not).
func (l *Lifecycle) writeCtlFile(name string, data []byte, durable bool) {
	ctlDirFd := l.CtlDirFd
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
