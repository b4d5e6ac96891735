package main

import (
	"krunbox/agent/fsops"
	"krunbox/agent/ports"
	"krunbox/agent/protocol"
)

// opTable is every operation the agent serves: the contract's typed handler
// table (protocol.OpHandlers, generated from protocol/v1.json), so a handler
// whose request no longer matches the contract does not build, and the test
// that compares the table with the contract sees every op.
func (a *agent) opTable() map[string]protocol.Handler {
	cmds := a.commands
	h := protocol.OpHandlers{
		ExecStart:          cmds.HandleStart,
		ExecAttach:         cmds.HandleAttach,
		ExecRead:           cmds.HandleRead,
		ExecCancel:         cmds.HandleCancel,
		ExecSignal:         cmds.HandleSignal,
		ExecGet:            cmds.HandleGet,
		ExecResize:         cmds.HandleResize,
		ExecList:           cmds.HandleList,
		SandboxInfo:        a.life.HandleInfo,
		SandboxPause:       a.life.HandlePause,
		SandboxResume:      a.life.HandleResume,
		SandboxShutdown:    a.life.HandleShutdown,
		SandboxSetLifetime: a.life.HandleSetLifetime,
		SandboxReset:       a.handleReset,
		PortConnect:        ports.Connect,
		SandboxSnapshot:    a.upper.HandleSnapshot,
		FsLs:               fsops.Ls,
		FsStat:             fsops.Stat,
		FsMkdir:            fsops.Mkdir,
		FsWrite:            fsops.Write,
		FsRead:             fsops.Read,
		FsRm:               fsops.Rm,
		FsChmod:            fsops.Chmod,
		FsMv:               fsops.Mv,
		FsGrep:             fsops.Grep,
		FsSed:              fsops.Sed,
		FsTarCreate:        fsops.TarCreate,
		FsTarExtract:       fsops.TarExtract,
	}
	return h.Table()
}
