package main

// The filesystem operations of PROTOCOL.md ("Filesystem"), served by fs*.go.
func init() {
	fsHandlers[opFsLs] = fsLs
	fsHandlers[opFsStat] = fsStat
	fsHandlers[opFsMkdir] = fsMkdir
	fsHandlers[opFsWrite] = fsWrite
	fsHandlers[opFsRead] = fsRead
	fsHandlers[opFsRm] = fsRm
	fsHandlers[opFsChmod] = fsChmod
	fsHandlers[opFsMv] = fsMv
	fsHandlers[opFsGrep] = fsGrep
	fsHandlers[opFsSed] = fsSed
	fsHandlers[opFsTarCreate] = fsTarCreate
	fsHandlers[opFsTarExtract] = fsTarExtract
}
