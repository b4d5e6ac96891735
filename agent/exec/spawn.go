package exec

// Starting, terminating and finishing one command's process group.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

type spawnSpec struct {
	path      string
	env       []string
	cwd       string
	withStdin bool
	timeout   time.Duration // 0 = none
	killGrace time.Duration
	cred      *syscall.Credential // nil: the agent's own ids (root)
	pty       *ptySize            // non-nil: run on a pseudo-terminal of this size (pty.go)
}

// fail ends a command that never ran.
func (c *Command) fail(reason string) {
	now := nowMs()
	c.mu.Lock()
	c.status = stFailed
	c.failReason = reason
	c.startedAt = now
	c.endedAt = now
	c.mu.Unlock()
	c.log.close()
	close(c.done)
	c.table.commandEnded(c)
}

// start forks and execs the command in its own process group and starts the
// output readers. Exec errors end the command as "failed".
func (c *Command) start(spec spawnSpec) {
	var files, parentEnds [3]*os.File
	var ptyControl *os.File
	var err error
	if spec.pty != nil {
		files, parentEnds, ptyControl, err = openPtyStdio(*spec.pty, spec.cred)
	} else {
		files, parentEnds, err = openStdio(spec.withStdin)
	}
	if err != nil {
		c.fail(fmt.Sprintf("cannot create pipes: %v", err))
		return
	}
	// A terminal's command leads a session of its own with the slave (its fd 0) as
	// controlling terminal, so job control and Ctrl-C work; it is its process group's leader as well.
	sys := &syscall.SysProcAttr{Setpgid: spec.pty == nil, Setsid: spec.pty != nil, Setctty: spec.pty != nil, Ctty: 0, Credential: spec.cred, AmbientCaps: c.table.sandbox.AmbientCaps(spec.cred)}
	outR := []*os.File{parentEnds[1], parentEnds[2]}
	if spec.pty != nil {
		outR = outR[:1] // the terminal is stdout and stderr in one
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   spec.cwd,
		Env:   spec.env,
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Sys:   sys,
	}
	t := c.table
	oomBefore := t.oomKillCount()
	c.readers.Add(len(outR))

	t.procs.forkMu.Lock()
	t.procs.procMu.Lock()
	t.procs.forking = true
	t.procs.procMu.Unlock()
	resetOwnPeakRss()
	pid, err := t.forkExecRetrying(spec.path, c.argv, attr)
	agentPeakKb := ownPeakRssKb() // the child has exec'd: its inherited peak is at most this
	t.procs.procMu.Lock()
	t.procs.forking = false
	if err == nil {
		// Everything the reaper's onExit relies on is set before procMu is
		// released, so even an instant exit finds a complete record.
		t.procs.pidOwners[pid] = c
		c.mu.Lock()
		c.pid = pid
		c.status = stRunning
		c.startedAt = nowMs()
		c.startMono = time.Now()
		c.killGrace = spec.killGrace
		c.oomBefore = oomBefore
		c.agentPeakKb = agentPeakKb
		c.outR = outR
		c.stdinW = parentEnds[0]
		c.ptyControl = ptyControl
		c.timeoutMs = spec.timeout.Milliseconds()
		if spec.timeout > 0 {
			c.timeout = t.timers.after(spec.timeout, func() { c.terminate(termTimeout, false, c.killGrace) })
		}
		if t.sandbox.Stopping() {
			// The shutdown's markShutdown ran before this pid existed: the command dies with the sandbox.
			c.termKind = termShutdown
			c.termSignal = "SIGKILL"
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		c.mu.Unlock()
		if t.sandbox.Paused() {
			_ = syscall.Kill(-pid, syscall.SIGSTOP)
		}
	}
	t.procs.procMu.Unlock()
	t.procs.forkMu.Unlock()
	// Exits left unreaped while the fork was in flight (this child's too).
	t.procs.reapAll()
	closeAll(files[:]) // the child has its copies

	if err != nil {
		c.readers.Add(-len(outR))
		closeAll(parentEnds[:])
		if ptyControl != nil {
			ptyControl.Close()
		}
		c.fail(fmt.Sprintf("cannot execute %s: %v", spec.path, err))
		return
	}
	for i, f := range outR {
		go c.readPipe(f, byte(i+1))
	}
}

// forkRetryFor is how long a spawn waits for room under the process limit:
// right after a fork bomb is killed, its processes are still being reaped.
const forkRetryFor = 2 * time.Second

// forkExecRetrying is ForkExec, retried while fork fails with EAGAIN (the
// pids limit).
func (t *Commands) forkExecRetrying(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	deadline := time.Now().Add(forkRetryFor)
	wait := time.Millisecond
	for {
		pid, err := t.sandbox.ForkExec(path, argv, attr)
		if err != syscall.EAGAIN || time.Now().After(deadline) {
			return pid, err
		}
		time.Sleep(wait)
		if wait < 64*time.Millisecond {
			wait *= 2
		}
	}
}

// openStdio returns the child's stdin/stdout/stderr and the parent's ends
// (stdin writer or nil, stdout reader, stderr reader). Parent ends stay
// non-blocking so reads can be given a deadline after the process exits.
func openStdio(withStdin bool) (child [3]*os.File, parent [3]*os.File, err error) {
	cleanup := func() {
		for _, f := range append(child[:], parent[:]...) {
			if f != nil {
				f.Close()
			}
		}
	}
	if withStdin {
		if child[0], parent[0], err = os.Pipe(); err != nil {
			cleanup()
			return child, parent, err
		}
	} else if child[0], err = os.Open(os.DevNull); err != nil {
		cleanup()
		return child, parent, err
	}
	if parent[1], child[1], err = os.Pipe(); err != nil {
		cleanup()
		return child, parent, err
	}
	if parent[2], child[2], err = os.Pipe(); err != nil {
		cleanup()
		return child, parent, err
	}
	growPipe(parent[1])
	growPipe(parent[2])
	return child, parent, nil
}

// outputPipeBytes is the kernel buffer of a command's stdout/stderr pipe. The
// default 64 KiB makes a fast writer block after every chunk until the agent
// has read it; 1 MiB (the unprivileged maximum) lets it run ahead.
const outputPipeBytes = 1 << 20

// growPipe enlarges a pipe's buffer; failure (limits) just keeps the default.
// It goes through SyscallConn: f.Fd() would switch the pipe to blocking mode
// and break the read deadline of the post-exit drain.
func growPipe(f *os.File) {
	const fSetPipeSz = 1031 // F_SETPIPE_SZ, not in package syscall
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, outputPipeBytes)
	})
}

func (c *Command) readPipe(f *os.File, fd byte) {
	defer c.readers.Done()
	defer f.Close()
	buf := newChunkBuf()
	defer func() { chunkBufPool.Put(buf) }()
	for c.log.waitRoom() {
		var n int
		var err error
		lane := c.log.laneFor(fd)
		teed := false
		if lane != nil {
			lane.waitRoom()
			n, teed, err = lane.readVia(f, *buf)
		} else {
			n, err = f.Read(*buf)
		}
		if !teed {
			lane = nil
		}
		if n > 0 {
			// A mostly full read becomes the chunk itself (no copy; the log and
			// the writer only read it); a short one is copied to its size so
			// retention does not hold mostly empty buffers.
			if n >= len(*buf)*3/4 {
				c.log.append(fd, (*buf)[:n:n], buf, lane, nowMs())
				buf = newChunkBuf()
			} else {
				data := make([]byte, n)
				copy(data, (*buf)[:n])
				c.log.append(fd, data, nil, lane, nowMs())
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.readBuffered(f, fd, *buf)
			return
		}
		if err != nil {
			return // EOF or closed
		}
	}
}

// readBuffered keeps what the pipe already holds when the post-exit drain
// deadline fires. The deadline is there to stop waiting for a grandchild that
// holds the pipe open, not to drop what the command wrote before it exited: on
// a loaded host this reader may first run after the deadline, with the
// command's whole output still in the pipe. It reads without waiting, at most
// one pipe buffer (a grandchild still writing cannot keep it here).
func (c *Command) readBuffered(f *os.File, fd byte, buf []byte) {
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	for left := outputPipeBytes; left > 0; {
		want := buf
		if len(want) > left {
			want = want[:left]
		}
		n := 0
		_ = rc.Read(func(raw uintptr) bool {
			n, _ = syscall.Read(int(raw), want)
			return true // never wait: EAGAIN means the pipe is empty
		})
		if n <= 0 {
			return
		}
		data := make([]byte, n)
		copy(data, want[:n])
		c.log.append(fd, data, nil, nil, nowMs())
		left -= n
	}
}

// onExit runs in the reaper with procMu held; it must not block.
func (c *Command) onExit(ws syscall.WaitStatus, ru *syscall.Rusage) {
	c.mu.Lock()
	c.exited = true
	c.waitStat = ws
	c.endedAt = nowMs()
	c.durationMs = time.Since(c.startMono).Milliseconds()
	c.usage = &protocol.CommandUsage{
		UserMs:   ru.Utime.Sec*1000 + ru.Utime.Usec/1000,
		SystemMs: ru.Stime.Sec*1000 + ru.Stime.Usec/1000,
		MaxRssKb: commandPeakRssKb(ru.Maxrss, c.agentPeakKb),
	}
	terminating := c.termKind != ""
	c.timeout.stop()
	c.grace.stop()
	c.mu.Unlock()
	if terminating {
		// The leader is gone but members of its group may have outlived the
		// SIGTERM; the pgid cannot have been recycled while procMu is held.
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	}
	go c.finish()
}

// finish drains the pipes for at most postExitDrain after the exit (a
// grandchild holding them open does not delay the result), then publishes the
// final status.
func (c *Command) finish() {
	deadline := time.Now().Add(postExitDrain)
	for _, f := range c.outR {
		_ = f.SetReadDeadline(deadline)
	}
	c.log.setDraining()
	c.readers.Wait()
	if c.stdinW != nil {
		c.stdinW.Close()
	}
	c.closePty()
	c.mu.Lock()
	terminated := c.termKind != ""
	c.mu.Unlock()
	if terminated {
		waitGroupGone(c.pid)
	}

	c.mu.Lock()
	ws := c.waitStat
	if ws.Exited() {
		code := int64(ws.ExitStatus())
		c.exitCode = &code
	} else if ws.Signaled() {
		name := signalName(ws.Signal())
		c.signal = &name
		// A SIGKILL the agent did not send, while the OOM killer was at work.
		if ws.Signal() == syscall.SIGKILL && c.termSignal != "SIGKILL" && c.usage != nil && c.oomBefore >= 0 {
			c.usage.OomKilled = c.table.oomKillCount() > c.oomBefore
		}
	}
	switch c.termKind {
	case termShutdown:
		c.status = stKilled
		c.killedReason = "sandbox_destroyed"
	case termTimeout:
		c.status = stTimedOut
		c.timedOut = true
	case termCancel:
		c.status = stCanceled
	default:
		c.status = stExited
	}
	c.mu.Unlock()
	c.log.close()
	close(c.done)
	c.table.commandEnded(c)
}

// waitGroupGone waits (at most groupGoneWait) until no process of the killed group pid
// is left, reaped ones included: a fork bomb's processes hold the pids limit until the
// reaper has them, and a command started at once after the result would fail to fork.
// A pgid is never reused while its group has a member, so ESRCH means they are all gone.
func waitGroupGone(pgid int) {
	deadline := time.Now().Add(groupGoneWait)
	for syscall.Kill(-pgid, 0) != syscall.ESRCH && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// terminate signals the process group for a timeout, cancel or shutdown:
// SIGKILL at once when force, else SIGTERM now and SIGKILL after grace.
// The first reason sticks; a later force still escalates. It reports
// whether the process was still there to signal.
func (c *Command) terminate(kind string, force bool, grace time.Duration) bool {
	c.table.procs.procMu.Lock()
	defer c.table.procs.procMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited || c.pid <= 0 {
		return false
	}
	if c.termKind == "" {
		c.termKind = kind
		if kind == termCancel {
			c.canceledAt = nowMs()
			c.cancelMode = "graceful"
			if force {
				c.cancelMode = "force"
			}
		}
	}
	if force {
		c.grace.stop()
		c.termSignal = "SIGKILL"
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		return true
	}
	if c.termSignal == "" {
		c.termSignal = "SIGTERM"
		_ = syscall.Kill(-c.pid, syscall.SIGTERM)
		c.grace = c.table.timers.after(grace, c.escalate)
	}
	return true
}

func (c *Command) escalate() {
	c.table.procs.procMu.Lock()
	defer c.table.procs.procMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited {
		return
	}
	c.termSignal = "SIGKILL"
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
}

// markShutdown flags a live command as killed by the sandbox's end; the
// caller then kills every process.
func (c *Command) markShutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited || c.pid <= 0 {
		return
	}
	c.termKind = termShutdown
	c.termSignal = "SIGKILL"
	c.grace.stop()
	c.timeout.stop()
}

// sendSignal delivers sig to the command's process group (the same target
// as timeouts and cancel); a no-op once the command has exited.
func (c *Command) sendSignal(sig syscall.Signal) error {
	c.table.procs.procMu.Lock()
	defer c.table.procs.procMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited || c.pid <= 0 {
		return nil
	}
	return syscall.Kill(-c.pid, sig)
}

// pumpStdin copies the stream's DATA into the child's stdin; END closes it.
// After a write error (the child closed stdin) input is consumed and dropped
// so the host is never left waiting for credit.
func pumpStdin(st protocol.Stream, w *os.File) {
	defer w.Close()
	broken := false
	for {
		data, eof, err := st.RecvData()
		if err != nil || eof {
			return
		}
		if !broken {
			if _, err := w.Write(data); err != nil {
				broken = true
				w.Close()
			}
		}
	}
}

// oomKillCount reads an OOM-kill counter that only the sandbox's own limit
// moves: the workload cgroup leaf's in namespace mode (-1, unknown, without
// one: the host-wide counter says nothing), the kernel's in a VM.
func (t *Commands) oomKillCount() int64 {
	if t.sandbox.Config().Mode != "vm" {
		return t.sandbox.OomKills()
	}
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 2 && string(f[0]) == "oom_kill" {
			n, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
