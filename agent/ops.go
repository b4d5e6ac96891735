package main

import "krunbox/agent/protocol"

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
	protocol.OpPortConnect:     handlePortConnect,
	protocol.OpSandboxSnapshot: handleSandboxSnapshot,
	protocol.OpFsLs:            fsLs,
	protocol.OpFsStat:          fsStat,
	protocol.OpFsMkdir:         fsMkdir,
	protocol.OpFsWrite:         fsWrite,
	protocol.OpFsRead:          fsRead,
	protocol.OpFsRm:            fsRm,
	protocol.OpFsChmod:         fsChmod,
	protocol.OpFsMv:            fsMv,
	protocol.OpFsGrep:          fsGrep,
	protocol.OpFsSed:           fsSed,
	protocol.OpFsTarCreate:     fsTarCreate,
	protocol.OpFsTarExtract:    fsTarExtract,
}
