package exec

// exec.* operations (PROTOCOL.md "Commands").

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

// OutputSender is the part of the connection's stream that carries OUTPUT frames.
// SendOutput takes over the caller's reference to ch and releases it once the
// bytes are written or will never be. CanSplice: the connection can take
// chunks straight from a lane (command_lane.go).
type OutputSender interface {
	SendOutput(ch *Chunk) error
	CanSplice() bool
}

// execStartReq is exec.start's request (generated from the contract) with the checks and
// resolution this package adds.
type execStartReq struct {
	*protocol.ExecStartRequest
}

func (r *execStartReq) validate() *protocol.OpError {
	if r.ID != "" && !validCommandID(r.ID) {
		return protocol.BadArgumentError(fmt.Sprintf("command id %q", r.ID), "must be 1-128 characters of A-Z a-z 0-9 _ . : -")
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return protocol.BadArgumentError("argv", "must be a non-empty array whose first element names a program")
	}
	for i, a := range r.Argv {
		if strings.ContainsRune(a, 0) {
			return protocol.BadArgumentError(fmt.Sprintf("argv[%d]", i), "contains a NUL byte")
		}
	}
	if strings.ContainsRune(r.Cwd, 0) {
		return protocol.BadArgumentError(fmt.Sprintf("cwd %q", r.Cwd), "contains a NUL byte")
	}
	if r.TimeoutMs < 0 {
		return protocol.OutOfRangeError("timeoutMs", ">= 0 (0 = no timeout)", r.TimeoutMs)
	}
	if r.KillGraceMs != nil && *r.KillGraceMs < 0 {
		return protocol.OutOfRangeError("killGraceMs", ">= 0", *r.KillGraceMs)
	}
	if r.Pty != nil {
		if err := validatePtySize(r.Pty, "pty."); err != nil {
			return err
		}
	}
	if r.RetainBytes != nil && (*r.RetainBytes < 0 || *r.RetainBytes > maxRetainBytesAccepted) {
		return protocol.OutOfRangeError("retainBytes", fmt.Sprintf("within 0..%d", maxRetainBytesAccepted), *r.RetainBytes)
	}
	return nil
}

// prepare resolves everything the fork needs. A returned reason means the
// command cannot run: it ends "failed" with that failReason.
func (r *execStartReq) prepare(sb Sandbox) (spec spawnSpec, failReason string, operr *protocol.OpError) {
	userSpec := r.User
	if userSpec == "" {
		userSpec = sb.Config().User
	}
	user, uerr := resolveUser(userSpec)
	if uerr != nil {
		return spec, "", uerr
	}
	reqEnv := map[string]string{}
	for k, v := range r.Env {
		reqEnv[k] = v
	}
	user.userEnv(reqEnv)
	env, err := buildEnv(sb.Config(), reqEnv)
	if err != nil {
		return spec, "", protocol.BadArg("%v", err)
	}
	cwd := r.Cwd
	if cwd == "" {
		cwd = sb.Config().Workspace
	} else if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(sb.Config().Workspace, cwd)
	}
	if st, err := os.Stat(cwd); err != nil {
		return spec, fmt.Sprintf("cwd %s: %v", cwd, errnoOf(err)), nil
	} else if !st.IsDir() {
		return spec, fmt.Sprintf("cwd %s: not a directory", cwd), nil
	}
	path, err := resolveExecutable(r.Argv[0], env.get("PATH"), cwd)
	if err != nil {
		return spec, err.Error(), nil
	}
	spec = spawnSpec{path: path, env: env.strings(), cwd: cwd, withStdin: r.Stdin, killGrace: defaultKillGrace, cred: user.credential(), pty: r.Pty}
	spec.timeout = time.Duration(r.TimeoutMs) * time.Millisecond
	if r.KillGraceMs != nil {
		spec.killGrace = time.Duration(*r.KillGraceMs) * time.Millisecond
	}
	return spec, "", nil
}

// HandleStart serves exec.start.
func (t *Commands) HandleStart(st protocol.Stream, req *protocol.ExecStartRequest) {
	r := execStartReq{req}
	if err := r.validate(); err != nil {
		_ = st.Fail(err)
		return
	}
	if t.sandbox.Stopping() {
		_ = st.Fail(protocol.SandboxStoppedError(t.sandbox.Config().SandboxID, "is shutting down"))
		return
	}
	spec, failReason, operr := r.prepare(t.sandbox)
	if operr != nil {
		_ = st.Fail(operr)
		return
	}
	retain := int64(defaultRetainBytes)
	if r.RetainBytes != nil {
		retain = *r.RetainBytes
	}
	cmd, existing := t.create(r.ID, r.Argv, r.IdempotencyKey, retain)
	if cmd == nil {
		_ = st.Fail(protocol.BadArgumentError(fmt.Sprintf("command id %q", r.ID), "is already in use"))
		return
	}
	if !existing {
		t.sandbox.ActivityChanged()
	}

	var sub *logSub
	if r.Follow {
		// Subscribe before the process starts so no chunk can be dropped unseen.
		sub, _ = cmd.log.subscribe(0, [3]bool{false, true, true}, true, false)
	}
	if !existing {
		if failReason != "" {
			cmd.fail(failReason)
		} else {
			cmd.start(spec)
		}
	}
	if err := st.Event(protocol.ExecStartStartedEvent{Type: protocol.EventStarted, Command: cmd.snapshot()}); err != nil {
		if sub != nil {
			cmd.log.unsubscribe(sub)
		}
		_ = st.Respond(protocol.ExecStartResponse(commandResponse(cmd)))
		return
	}
	if !existing && r.Stdin && cmd.stdinW != nil {
		go pumpStdin(st, cmd.stdinW)
	}
	if sub != nil {
		followLog(st, cmd.log, sub)
	}
	waitEnded(st, cmd)
	_ = st.Respond(protocol.ExecStartResponse(commandResponse(cmd)))
}

// followLog sends the subscriber's chunks as OUTPUT frames until the log is
// closed and drained, or the stream is cancelled / its connection lost.
func followLog(st protocol.Stream, l *outputLog, sub *logSub) {
	out, ok := st.(OutputSender)
	if !ok {
		l.unsubscribe(sub)
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-st.Context().Done():
			l.unsubscribe(sub) // wakes next()
		case <-stop:
		}
	}()
	defer l.unsubscribe(sub)
	if out.CanSplice() && sub.follow && l.openLanes(sub) {
		defer l.closeLanes(sub)
	}
	for {
		ch := l.next(sub)
		if ch == nil {
			return
		}
		if err := out.SendOutput(ch); err != nil { // takes over the reference
			return
		}
		l.ack(sub, ch.seq)
	}
}

// commandResponse is exec.get's answer; exec.start, exec.attach and
// exec.cancel convert it to their own type, which stops compiling when the
// contract gives one of them another shape.
func commandResponse(cmd *Command) protocol.ExecGetResponse {
	return protocol.ExecGetResponse{Command: cmd.snapshot()}
}

func waitEnded(st protocol.Stream, cmd *Command) {
	select {
	case <-cmd.done:
	case <-st.Context().Done():
	}
}

func (t *Commands) lookupCommand(st protocol.Stream, id string) *Command {
	if id == "" {
		_ = st.Fail(protocol.BadArgumentError("commandId", "is required"))
		return nil
	}
	c := t.get(id)
	if c == nil {
		_ = st.Fail(protocol.NoCommandError(id))
	}
	return c
}

// lookupCommandStreams finds the command and parses the requested log streams;
// on failure it answers the stream and returns ok == false.
func (t *Commands) lookupCommandStreams(st protocol.Stream, id string, streams []string) (*Command, [3]bool, bool) {
	fds, err := fdMask(streams)
	if err != nil {
		_ = st.Fail(err)
		return nil, fds, false
	}
	cmd := t.lookupCommand(st, id)
	return cmd, fds, cmd != nil
}

// HandleAttach serves exec.attach.
func (t *Commands) HandleAttach(st protocol.Stream, r *protocol.ExecAttachRequest) {
	cmd, fds, ok := t.lookupCommandStreams(st, r.CommandID, r.Streams)
	if !ok {
		return
	}
	sub, operr := cmd.log.subscribe(r.AfterSeq, fds, r.Follow, true)
	if operr != nil {
		_ = st.Fail(operr)
		return
	}
	followLog(st, cmd.log, sub)
	if r.Follow {
		waitEnded(st, cmd)
	}
	_ = st.Respond(protocol.ExecAttachResponse(commandResponse(cmd)))
}

// HandleRead serves exec.read.
func (t *Commands) HandleRead(st protocol.Stream, r *protocol.ExecReadRequest) {
	limit := 50
	if r.Limit != nil {
		limit = *r.Limit
	}
	if limit < 1 || limit > 100 {
		_ = st.Fail(protocol.OutOfRangeError("limit", "within 1..100", limit))
		return
	}
	cmd, fds, ok := t.lookupCommandStreams(st, r.CommandID, r.Streams)
	if !ok {
		return
	}
	chunks, hasMore, cursor := cmd.log.read(r.AfterSeq, fds, limit)
	out := make([]protocol.LogChunk, 0, len(chunks))
	for _, ch := range chunks {
		name := "stdout"
		if ch.fd == 2 {
			name = "stderr"
		}
		out = append(out, protocol.LogChunk{Seq: int64(ch.seq), Stream: name, Timestamp: ch.unixMs, Data: base64.StdEncoding.EncodeToString(ch.data)})
		ch.Release()
	}
	_ = st.Respond(protocol.ExecReadResponse{Chunks: out, HasMore: hasMore, NextSeq: int64(cursor)})
}

// HandleCancel serves exec.cancel.
func (t *Commands) HandleCancel(st protocol.Stream, r *protocol.ExecCancelRequest) {
	if r.Mode == "" {
		r.Mode = "graceful"
	}
	if r.Mode != "graceful" && r.Mode != "force" {
		_ = st.Fail(protocol.BadArgumentError(fmt.Sprintf("mode %q", r.Mode), `must be "graceful" or "force"`))
		return
	}
	grace := defaultKillGrace
	if r.GraceMs != nil {
		if *r.GraceMs < 0 {
			_ = st.Fail(protocol.OutOfRangeError("graceMs", ">= 0", *r.GraceMs))
			return
		}
		grace = time.Duration(*r.GraceMs) * time.Millisecond
	}
	cmd := t.lookupCommand(st, r.CommandID)
	if cmd == nil {
		return
	}
	if cmd.terminate(termCancel, r.Mode == "force", grace) {
		// Give the host the final snapshot when the process goes away in time.
		wait := time.Second
		if r.Mode == "graceful" {
			wait += grace
		}
		t := time.NewTimer(wait)
		select {
		case <-cmd.done:
		case <-t.C:
		case <-st.Context().Done():
		}
		t.Stop()
	}
	_ = st.Respond(protocol.ExecCancelResponse(commandResponse(cmd)))
}

// HandleSignal serves exec.signal.
func (t *Commands) HandleSignal(st protocol.Stream, r *protocol.ExecSignalRequest) {
	sig, bad := parseSignal(r.Signal)
	if bad != nil {
		_ = st.Fail(bad)
		return
	}
	cmd := t.lookupCommand(st, r.CommandID)
	if cmd == nil {
		return
	}
	if err := cmd.sendSignal(sig); err != nil && err != syscall.ESRCH {
		_ = st.Fail(protocol.InternalError("kill "+r.Signal, err))
		return
	}
	_ = st.Respond(struct{}{})
}

// HandleGet serves exec.get.
func (t *Commands) HandleGet(st protocol.Stream, r *protocol.ExecGetRequest) {
	if cmd := t.lookupCommand(st, r.CommandID); cmd != nil {
		_ = st.Respond(commandResponse(cmd))
	}
}

// HandleList serves exec.list.
func (t *Commands) HandleList(st protocol.Stream, _ *protocol.ExecListRequest) {
	all := t.list()
	out := make([]protocol.CommandSnapshot, 0, len(all))
	for _, c := range all {
		out = append(out, c.snapshot())
	}
	_ = st.Respond(protocol.ExecListResponse{Commands: out})
}
