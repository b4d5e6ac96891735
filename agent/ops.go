package main

import (
	"krunbox/agent/fsops"
	"krunbox/agent/ports"
	"krunbox/agent/protocol"
)

// opTable is every operation the agent serves, by the contract's op name
// (protocol/v1.json): one table, one handler shape, so the test that compares
// it with the contract sees them all.
func (a *agent) opTable() map[string]protocol.Handler {
	cmds := a.commands
	return map[string]protocol.Handler{
		protocol.OpExecStart:          cmds.HandleStart,
		protocol.OpExecAttach:         cmds.HandleAttach,
		protocol.OpExecRead:           cmds.HandleRead,
		protocol.OpExecCancel:         cmds.HandleCancel,
		protocol.OpExecSignal:         cmds.HandleSignal,
		protocol.OpExecGet:            cmds.HandleGet,
		protocol.OpExecResize:         cmds.HandleResize,
		protocol.OpExecList:           cmds.HandleList,
		protocol.OpSandboxInfo:        a.life.HandleInfo,
		protocol.OpSandboxPause:       a.life.HandlePause,
		protocol.OpSandboxResume:      a.life.HandleResume,
		protocol.OpSandboxShutdown:    a.life.HandleShutdown,
		protocol.OpSandboxSetLifetime: a.life.HandleSetLifetime,
		protocol.OpPortConnect:        ports.Connect,
		protocol.OpSandboxSnapshot:    a.upper.HandleSnapshot,
		protocol.OpFsLs:               fsops.Ls,
		protocol.OpFsStat:             fsops.Stat,
		protocol.OpFsMkdir:            fsops.Mkdir,
		protocol.OpFsWrite:            fsops.Write,
		protocol.OpFsRead:             fsops.Read,
		protocol.OpFsRm:               fsops.Rm,
		protocol.OpFsChmod:            fsops.Chmod,
		protocol.OpFsMv:               fsops.Mv,
		protocol.OpFsGrep:             fsops.Grep,
		protocol.OpFsSed:              fsops.Sed,
		protocol.OpFsTarCreate:        fsops.TarCreate,
		protocol.OpFsTarExtract:       fsops.TarExtract,
	}
}
