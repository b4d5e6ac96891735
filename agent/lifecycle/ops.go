package lifecycle

// sandbox.* operations (PROTOCOL.md "Sandbox").

import (
	"encoding/json"
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
	if cfg.ExpiresAt != 0 {
		expiresAt = &cfg.ExpiresAt
	}
	return protocol.SandboxInfoResponse{
		SandboxID:      cfg.SandboxID,
		Image:          cfg.Image,
		ImageVersion:   cfg.ImageVersion,
		StartedAt:      l.startedAt,
		ExpiresAt:      expiresAt,
		IdleTimeoutMs:  cfg.IdleTimeoutMs,
		LastActivityAt: l.lastActivityAt,
		ActiveCommands: int64(active),
		Paused:         l.paused,
		Status:         status,
	}
}

// HandleInfo serves sandbox.info.
func (l *Lifecycle) HandleInfo(st protocol.Stream, _ json.RawMessage) {
	_ = st.Respond(l.info())
}

// HandlePause serves sandbox.pause.
func (l *Lifecycle) HandlePause(st protocol.Stream, _ json.RawMessage) {
	if l.Stopping() {
		_ = st.Fail(protocol.SandboxStoppedError(l.cfg.SandboxID, "is shutting down"))
		return
	}
	l.pause()
	_ = st.Respond(struct{}{})
}

// HandleResume serves sandbox.resume.
func (l *Lifecycle) HandleResume(st protocol.Stream, _ json.RawMessage) {
	l.resume()
	_ = st.Respond(struct{}{})
}

// sandbox.shutdown answers first, then ends the sandbox. The reason defaults
// to user_killed; a host enforcing its own deadline may pass the others.
// HandleShutdown serves sandbox.shutdown.
func (l *Lifecycle) HandleShutdown(st protocol.Stream, req json.RawMessage) {
	var r struct {
		Reason string `json:"reason"`
	}
	if !protocol.DecodeArgs(st, req, &r) {
		return
	}
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
