package main

// handlers is every operation the agent serves, by the contract's op name
// (protocol/v1.json): one table, one handler shape, so the test that compares
// it with the contract sees them all.
var handlers = map[string]Handler{
	opExecStart:       handleExecStart,
	opExecAttach:      handleExecAttach,
	opExecRead:        handleExecRead,
	opExecCancel:      handleExecCancel,
	opExecSignal:      handleExecSignal,
	opExecGet:         handleExecGet,
	opExecList:        handleExecList,
	opSandboxInfo:     handleSandboxInfo,
	opSandboxPause:    handleSandboxPause,
	opSandboxResume:   handleSandboxResume,
	opSandboxShutdown: handleSandboxShutdown,
	opPortConnect:     handlePortConnect,
	opSandboxSnapshot: handleSandboxSnapshot,
	opFsLs:            fsLs,
	opFsStat:          fsStat,
	opFsMkdir:         fsMkdir,
	opFsWrite:         fsWrite,
	opFsRead:          fsRead,
	opFsRm:            fsRm,
	opFsChmod:         fsChmod,
	opFsMv:            fsMv,
	opFsGrep:          fsGrep,
	opFsSed:           fsSed,
	opFsTarCreate:     fsTarCreate,
	opFsTarExtract:    fsTarExtract,
}
