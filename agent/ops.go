package main

import (
	"krunbox/agent/fsops"
	"krunbox/agent/ports"
	"krunbox/agent/protocol"
)

// handlers is every operation the agent serves, by the contract's op name
// (protocol/v1.json): one table, one handler shape, so the test that compares
// it with the contract sees them all.
var handlers = map[string]protocol.Handler{
	protocol.OpExecStart:       handleExecStart,
	protocol.OpExecAttach:      handleExecAttach,
	protocol.OpExecRead:        handleExecRead,
	protocol.OpExecCancel:      handleExecCancel,
	protocol.OpExecSignal:      handleExecSignal,
	protocol.OpExecGet:         handleExecGet,
	protocol.OpExecList:        handleExecList,
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
