package main

// sandbox.reset: a pooled sandbox handed from one lease to the next. The host
// asks it twice around its reset helper (native/src/reset), which kills every
// process but this one, removes the IPC objects and sockets the lease left and
// pivots the sandbox into a fresh root:
//   - lock, before the helper: the token becomes the next lease's and every
//     other connection closes, so the old lease's holder can neither reach the
//     agent again nor start anything while the helper runs;
//   - reopen, after it: the fs operations' root fd and the workspace follow the
//     new root, the writable layer's fd of the old root is let go (sandbox.snapshot
//     answers that there is none), every command is forgotten and the lifetime
//     is the boot's again.
// It answers only once all of it is done; any failure is an error, and the host
// then destroys the sandbox.

import (
	"errors"
	"regexp"
	"syscall"
	"time"

	"krunbox/agent/boot"
	"krunbox/agent/fsops"
	"krunbox/agent/protocol"
)

var tokenHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// resetCommandsWait bounds how long the reopen waits for the killed commands' ends.
const resetCommandsWait = 5 * time.Second

func (a *agent) handleReset(st protocol.Stream, r *protocol.SandboxResetRequest) {
	s, ok := st.(*stream)
	if !ok {
		_ = st.Fail(protocol.InternalError("sandbox.reset", "not on a connection"))
		return
	}
	var err error
	switch r.Step {
	case "lock":
		if !tokenHash.MatchString(r.TokenSha256) {
			_ = st.Fail(protocol.BadArgumentError("tokenSha256", "must be 64 lowercase hex digits"))
			return
		}
		a.server.lockTo(s.c, r.TokenSha256)
	case "reopen":
		err = a.reopen()
	default:
		_ = st.Fail(protocol.BadArgumentError("step "+r.Step, "must be lock or reopen"))
		return
	}
	if err != nil {
		_ = st.Fail(protocol.InternalError("sandbox.reset "+r.Step, err.Error()))
		return
	}
	_ = st.Respond(struct{}{})
}

func (a *agent) reopen() error {
	if err := fsops.ReopenRoot(); err != nil {
		return err
	}
	if a.upper.DirFd >= 0 {
		_ = syscall.Close(a.upper.DirFd)
		a.upper.DirFd = -1
	}
	if err := boot.MakeSandboxDirs(a.cfg); err != nil {
		return err
	}
	if err := a.commands.ForgetAll(resetCommandsWait); err != nil {
		return err
	}
	if a.life.Stopping() {
		return errors.New("the sandbox is shutting down")
	}
	a.life.ResetForLease()
	return nil
}

// lockTo makes token the one a HELLO must carry and closes every connection but keep.
func (s *server) lockTo(keep *conn, token string) {
	s.mu.Lock()
	s.token = token
	others := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c != keep {
			others = append(others, c)
		}
	}
	s.mu.Unlock()
	for _, c := range others {
		c.close()
	}
}
