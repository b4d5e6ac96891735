package exec

// Command records and the sandbox-wide table of them.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

// Statuses (PROTOCOL.md "Command snapshot").
const (
	stQueued   = "queued"
	stStarting = "starting"
	stRunning  = "running"
	stExited   = "exited"
	stFailed   = "failed"
	stCanceled = "canceled"
	stTimedOut = "timed_out"
	stKilled   = "killed"
)

// Why the agent is terminating a command; the first reason wins.
const (
	termTimeout  = "timeout"
	termCancel   = "cancel"
	termShutdown = "shutdown"
)

type Command struct {
	table *Commands
	id    string
	argv  []string
	key   string
	log   *outputLog
	done  chan struct{} // closed once the final status is set and the log closed

	mu           sync.Mutex
	status       string
	pid          int // also the process group id (Setpgid)
	startedAt    int64
	startMono    time.Time
	endedAt      int64
	durationMs   int64
	exitCode     *int64
	signal       *string
	timedOut     bool
	cancelMode   string
	canceledAt   int64
	termSignal   string
	killedReason string
	failReason   string
	usage        *protocol.CommandUsage

	termKind    string
	exited      bool // the process was reaped
	waitStat    syscall.WaitStatus
	timeout     *pausableTimer
	timeoutMs   int64 // the deadline asked for; 0 = none
	grace       *pausableTimer
	killGrace   time.Duration
	stdinW      *os.File
	ptyControl  *os.File // the terminal's master while the command runs (pty.go); nil without one
	outR        []*os.File
	readers     sync.WaitGroup
	oomBefore   int64
	agentPeakKb int64 // the agent's own peak RSS when the child exec'd (peak.go)
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func int64Ptr(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func (c *Command) snapshot() protocol.CommandSnapshot {
	ls := c.log.stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := protocol.CommandSnapshot{
		ID:                c.id,
		Argv:              c.argv,
		Status:            c.status,
		ExitCode:          c.exitCode,
		Signal:            c.signal,
		TimedOut:          c.timedOut,
		TimeoutMs:         int64Ptr(c.timeoutMs),
		StartedAt:         int64Ptr(c.startedAt),
		EndedAt:           int64Ptr(c.endedAt),
		CancelMode:        strPtr(c.cancelMode),
		CanceledAt:        int64Ptr(c.canceledAt),
		TerminationSignal: strPtr(c.termSignal),
		KilledReason:      strPtr(c.killedReason),
		FailReason:        strPtr(c.failReason),
		StdoutTruncated:   ls.stdoutTruncated,
		StderrTruncated:   ls.stderrTruncated,
		FirstSeq:          int64(ls.firstSeq),
		NextSeq:           int64(ls.nextSeq),
		Usage:             c.usage,
	}
	if c.pid > 0 {
		pid := int64(c.pid)
		s.Pid = &pid
	}
	if c.endedAt != 0 {
		d := c.durationMs
		s.DurationMs = &d
	}
	return s
}

func (c *Command) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Commands is the sandbox's command service: every command in creation order,
// the timers that pause with the sandbox, the output retention budget and the
// reaper of their processes. The agent makes one at boot (New).
type Commands struct {
	sandbox  Sandbox
	timers   *timerSet
	retained retainBudget
	procs    reaper
	shedding sync.Mutex // one shedRetention at a time
	mu       sync.Mutex
	byID     map[string]*Command
	byKey    map[string]*Command
	order    []*Command
	counter  uint64
	active   int // created and not yet ended
}

// Ended commands are forgotten oldest first beyond these bounds (their count,
// and their retained output plus argv in bytes), so a long-lived sandbox does
// not accumulate records without limit; the output of all commands together
// is bounded by sandboxRetainBytes (command_output.go).
const (
	maxEndedCommands       = 1000
	maxEndedRecordBytes    = 32 << 20
	defaultRetainBytes     = 8 << 20
	defaultKillGrace       = 2000 * time.Millisecond
	postExitDrain          = 100 * time.Millisecond
	groupGoneWait          = 2 * time.Second
	maxRetainBytesAccepted = sandboxRetainBytes
)

// New returns an empty command service for the sandbox sb.
func New(sb Sandbox) *Commands {
	t := &Commands{
		sandbox: sb,
		timers:  newTimerSet(),
		procs:   reaper{pidOwners: map[int]*Command{}},
		byID:    map[string]*Command{},
		byKey:   map[string]*Command{},
	}
	t.retained.shed = t.shedRetention
	return t
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// create returns the command for key if one exists (existing=true), else a new
// command in status "starting".
// create registers a new command, or returns the existing one for a repeated idempotency key.
// A caller-chosen id that is already taken by another command yields nil.
func (t *Commands) create(id string, argv []string, key string, retain int64) (cmd *Command, existing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if key != "" {
		if c := t.byKey[key]; c != nil {
			return c, true
		}
	}
	t.counter++
	if id == "" {
		id = fmt.Sprintf("c-%d-%s", t.counter, randomSuffix())
	} else if t.byID[id] != nil {
		return nil, false
	}
	c := &Command{
		table:  t,
		id:     id,
		argv:   argv,
		key:    key,
		log:    newOutputLog(retain, &t.retained),
		done:   make(chan struct{}),
		status: stStarting,
	}
	t.byID[c.id] = c
	if key != "" {
		t.byKey[key] = c
	}
	t.order = append(t.order, c)
	t.active++
	return c, false
}

func validCommandID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r)
		if !ok {
			return false
		}
	}
	return true
}

func (t *Commands) get(id string) *Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

func (t *Commands) list() []*Command {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Command(nil), t.order...)
}

// commandEnded is called once per command when it reaches its final status.
func (t *Commands) commandEnded(c *Command) {
	t.mu.Lock()
	t.active--
	t.evictLocked()
	t.mu.Unlock()
	t.sandbox.CommandEnded(c)
}

// EndedBadly: a non-zero exit, a failed start, a timeout or a signal the
// command was not canceled with (a shutdown's kill is nobody's failure).
func (c *Command) EndedBadly() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.termKind == termShutdown || c.status == stCanceled:
		return false
	case c.status == stExited && c.exitCode != nil && *c.exitCode == 0:
		return false
	}
	return true
}

func (t *Commands) evictLocked() {
	ended := 0
	var bytes int64
	for _, c := range t.order {
		if c.ended() {
			ended++
			bytes += c.recordBytes()
		}
	}
	kept := t.order[:0]
	for _, c := range t.order {
		if c.ended() && (ended > maxEndedCommands || bytes > maxEndedRecordBytes) {
			ended--
			bytes -= c.recordBytes()
			c.log.forget()
			delete(t.byID, c.id)
			if c.key != "" && t.byKey[c.key] == c {
				delete(t.byKey, c.key)
			}
			continue
		}
		kept = append(kept, c)
	}
	for i := len(kept); i < len(t.order); i++ {
		t.order[i] = nil
	}
	t.order = kept
}

// recordBytes is what an ended command's record costs: its retained output and its argv.
func (c *Command) recordBytes() int64 {
	n := c.log.stats().retainedBytes + int64(len(c.key))
	for _, a := range c.argv {
		n += int64(len(a))
	}
	return n
}

// shedRetention drops the oldest output no subscriber still needs, ended
// commands' first, oldest command first, until the sandbox is within
// sandboxRetainBytes. Concurrent callers leave it to the one running.
func (t *Commands) shedRetention() {
	if !t.shedding.TryLock() {
		return
	}
	defer t.shedding.Unlock()
	all := t.list()
	for _, endedPass := range []bool{true, false} {
		for _, c := range all {
			if t.retained.total.Load() <= sandboxRetainBytes {
				return
			}
			if c.ended() == endedPass {
				c.log.shedOverBudget()
			}
		}
	}
}

func nowMs() int64 { return time.Now().UnixMilli() }
