package main

// handlers is every operation the agent serves, by the contract's op name
// (protocol/v1.json): one table, one handler shape, so the test that compares
// it with the contract sees them all.
var handlers = map[string]Handler{
	OpExecStart:       handleExecStart,
	OpExecAttach:      handleExecAttach,
	OpExecRead:        handleExecRead,
	OpExecCancel:      handleExecCancel,
	OpExecSignal:      handleExecSignal,
	OpExecGet:         handleExecGet,
	OpExecList:        handleExecList,
	OpSandboxInfo:     handleSandboxInfo,
	OpSandboxPause:    handleSandboxPause,
	OpSandboxResume:   handleSandboxResume,
	OpSandboxShutdown: handleSandboxShutdown,
	OpPortConnect:     handlePortConnect,
	OpSandboxSnapshot: handleSandboxSnapshot,
	OpFsLs:            fsLs,
	OpFsStat:          fsStat,
	OpFsMkdir:         fsMkdir,
	OpFsWrite:         fsWrite,
	OpFsRead:          fsRead,
	OpFsRm:            fsRm,
	OpFsChmod:         fsChmod,
	OpFsMv:            fsMv,
	OpFsGrep:          fsGrep,
	OpFsSed:           fsSed,
	OpFsTarCreate:     fsTarCreate,
	OpFsTarExtract:    fsTarExtract,
}
