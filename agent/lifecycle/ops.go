package lifecycle

// sandbox.* operations (PROTOCOL.md "Sandbox").

import (
	"fmt"

	"krunbox/agent/protocol"
)

func (l *Lifecycle) info() protocol.SandboxInfoResponse {
	cfg := l.cfg
	active := l.cmds.ActiveCount()
	l.mu.Lock()
	defer l.mu.Unlock()
	status := "running"
	if l.stopping {
		status = "stopping"
	} else if l.paused {
		status = "paused"
	}
	var expiresAt *int64 // null: no TTL
	if l.expiresAt != 0 {
		at := l.expiresAt
		expiresAt = &at
	}
	return protocol.SandboxInfoResponse{
		SandboxID:      cfg.SandboxID,
		Image:          cfg.Image,
		ImageVersion:   cfg.ImageVersion,
		StartedAt:      l.startedAt,
		ExpiresAt:      expiresAt,
		IdleTimeoutMs:  l.idleTimeoutMs,
		LastActivityAt: l.lastActivityAt,
		ActiveCommands: int64(active),
		Paused:         l.paused,
		Status:         status,
	}
}

// HandleInfo serves sandbox.info.
func (l *Lifecycle) HandleInfo(st protocol.Stream, _ *protocol.SandboxInfoRequest) {
	_ = st.Respond(l.info())
}

// HandlePause serves sandbox.pause.
func (l *Lifecycle) HandlePause(st protocol.Stream, _ *protocol.SandboxPauseRequest) {
	if l.Stopping() {
		_ = st.Fail(protocol.SandboxStoppedError(l.cfg.SandboxID, "is shutting down"))
		return
	}
	l.pause()
	_ = st.Respond(struct{}{})
}

// HandleResume serves sandbox.resume.
func (l *Lifecycle) HandleResume(st protocol.Stream, _ *protocol.SandboxResumeRequest) {
	l.resume()
	_ = st.Respond(struct{}{})
}

// sandbox.shutdown answers first, then ends the sandbox. The reason defaults
// to user_killed; a host enforcing its own deadline may pass the others.
// HandleShutdown serves sandbox.shutdown.
func (l *Lifecycle) HandleShutdown(st protocol.Stream, r *protocol.SandboxShutdownRequest) {
	if r.Reason == "" {
		r.Reason = "user_killed"
	}
	if _, ok := exitCodes[r.Reason]; !ok {
		_ = st.Fail(protocol.BadArgumentError(fmt.Sprintf("reason %q", r.Reason), "must be user_killed, idle_expired or ttl_expired"))
		return
	}
	_ = st.Respond(struct{}{})
	l.Shutdown(r.Reason)
}

// HandleSetLifetime serves sandbox.setLifetime: a later TTL deadline and/or a new idle
// timeout, each within the cap the host fixed at boot (config's maxExpiresAt and
// maxIdleTimeoutMs), so a client holding the token cannot give the sandbox a longer life than
// the runtime that created it allows. Both change together or neither does.
func (l *Lifecycle) HandleSetLifetime(st protocol.Stream, r *protocol.SandboxSetLifetimeRequest) {
	cfg := l.cfg
	l.mu.Lock()
	if l.stopping {
		l.mu.Unlock()
		_ = st.Fail(protocol.SandboxStoppedError(cfg.SandboxID, "is shutting down"))
		return
	}
	if fail := l.lifetimeRefusal(r.ExtendByMs, r.IdleTimeoutMs); fail != nil {
		l.mu.Unlock()
		_ = st.Fail(fail)
		return
	}
	if r.ExtendByMs != nil {
		l.expiresAt += *r.ExtendByMs
	}
	if r.IdleTimeoutMs != nil {
		l.idleTimeoutMs = *r.IdleTimeoutMs
	}
	var expiresAt *int64
	if l.expiresAt != 0 {
		at := l.expiresAt
		expiresAt = &at
	}
	resp := protocol.SandboxSetLifetimeResponse{ExpiresAt: expiresAt, IdleTimeoutMs: l.idleTimeoutMs}
	l.mu.Unlock()
	l.wake()
	l.WriteActivity()
	_ = st.Respond(resp)
}

// lifetimeRefusal says why a new deadline or idle timeout is refused (nil: accepted). l.mu held.
func (l *Lifecycle) lifetimeRefusal(extendByMs, idleTimeoutMs *int64) *protocol.OpError {
	cfg := l.cfg
	if extendByMs != nil {
		by := *extendByMs
		switch {
		case by < 1:
			return protocol.BadArgumentError(fmt.Sprintf("extendByMs %d", by), "must be at least 1")
		case l.expiresAt == 0:
			return protocol.BadArgumentError(fmt.Sprintf("extendByMs %d", by), "cannot apply: the sandbox was created without a TTL")
		case by > cfg.MaxExpiresAt-l.expiresAt: // written so, as the sum could overflow
			return protocol.LifetimeOverMaxError(fmt.Sprintf("a TTL extended by %d ms (to %d)", by, l.expiresAt+by), fmt.Sprintf("%d, creation + the runtime's maxTtlMs", cfg.MaxExpiresAt))
		}
	}
	if idleTimeoutMs != nil {
		switch {
		case *idleTimeoutMs < 0:
			return protocol.BadArgumentError(fmt.Sprintf("idleTimeoutMs %d", *idleTimeoutMs), "must not be negative")
		case *idleTimeoutMs > cfg.MaxIdleTimeoutMs:
			return protocol.LifetimeOverMaxError(fmt.Sprintf("idleTimeoutMs %d", *idleTimeoutMs), fmt.Sprintf("%d ms", cfg.MaxIdleTimeoutMs))
		}
	}
	return nil
}
