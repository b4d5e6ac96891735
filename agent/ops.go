package main

import (
	"krunbox/agent/exec"
	"krunbox/agent/fsops"
	"krunbox/agent/ports"
	"krunbox/agent/protocol"
)

// handlers is the op table the server dispatches on (opTable), set at boot.
var handlers map[string]protocol.Handler

// opTable is every operation the agent serves, by the contract's op name
// (protocol/v1.json): one table, one handler shape, so the test that compares
// it with the contract sees them all. Commands are served by cmds.
func opTable(cmds *exec.Commands) map[string]protocol.Handler {
	return map[string]protocol.Handler{
		protocol.OpExecStart:       cmds.HandleStart,
		protocol.OpExecAttach:      cmds.HandleAttach,
		protocol.OpExecRead:        cmds.HandleRead,
		protocol.OpExecCancel:      cmds.HandleCancel,
		protocol.OpExecSignal:      cmds.HandleSignal,
		protocol.OpExecGet:         cmds.HandleGet,
		protocol.OpExecList:        cmds.HandleList,
		protocol.OpSandboxInfo:     handleSandboxInfo,
		protocol.OpSandboxPause:    handleSandboxPause,
		protocol.OpSandboxResume:   handleSandboxResume,
		protocol.OpSandboxShutdown: handleSandboxShutdown,
		protocol.OpPortConnect:     ports.Connect,
		protocol.OpSandboxSnapshot: upperLayer.HandleSnapshot,
		protocol.OpFsLs:            fsops.Ls,
		protocol.OpFsStat:          fsops.Stat,
		protocol.OpFsMkdir:         fsops.Mkdir,
		protocol.OpFsWrite:         fsops.Write,
		protocol.OpFsRead:          fsops.Read,
		protocol.OpFsRm:            fsops.Rm,
		protocol.OpFsChmod:         fsops.Chmod,
		protocol.OpFsMv:            fsops.Mv,
		protocol.OpFsGrep:          fsops.Grep,
		protocol.OpFsSed:           fsops.Sed,
		protocol.OpFsTarCreate:     fsops.TarCreate,
		protocol.OpFsTarExtract:    fsops.TarExtract,
	}
}
