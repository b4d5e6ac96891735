package main

// sandbox.* operations (PROTOCOL.md "Sandbox").

import (
	"encoding/json"

	"krunbox/agent/protocol"
)

func (l *lifecycle) info() protocol.SandboxInfoResponse {
	cfg := l.a.cfg
	active := l.a.commands.ActiveCount()
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

func (a *agent) handleSandboxInfo(st protocol.Stream, _ json.RawMessage) {
	_ = st.Respond(a.life.info())
}

func (a *agent) handleSandboxPause(st protocol.Stream, _ json.RawMessage) {
	if a.life.isStopping() {
		_ = st.Fail(&protocol.OpError{Code: protocol.CodeSandboxStopped, Message: "the sandbox is shutting down"})
		return
	}
	a.life.pause()
	_ = st.Respond(struct{}{})
}

func (a *agent) handleSandboxResume(st protocol.Stream, _ json.RawMessage) {
	a.life.resume()
	_ = st.Respond(struct{}{})
}

// sandbox.shutdown answers first, then ends the sandbox. The reason defaults
// to user_killed; a host enforcing its own deadline may pass the others.
func (a *agent) handleSandboxShutdown(st protocol.Stream, req json.RawMessage) {
	var r struct {
		Reason string `json:"reason"`
	}
	if !protocol.DecodeArgs(st, req, &r) {
		return
	}
	if r.Reason == "" {
		r.Reason = "user_killed"
	}
	if _, ok := shutdownExitCodes[r.Reason]; !ok {
		_ = st.Fail(protocol.BadArg("reason %q must be user_killed, idle_expired or ttl_expired", r.Reason))
		return
	}
	_ = st.Respond(struct{}{})
	a.life.shutdown(r.Reason)
}
