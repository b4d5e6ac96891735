package main

// The filesystem operations of PROTOCOL.md ("Filesystem"), served by fs*.go.
func init() {
	fsHandlers["fs.ls"] = fsLs
	fsHandlers["fs.stat"] = fsStat
	fsHandlers["fs.mkdir"] = fsMkdir
	fsHandlers["fs.write"] = fsWrite
	fsHandlers["fs.read"] = fsRead
	fsHandlers["fs.rm"] = fsRm
	fsHandlers["fs.chmod"] = fsChmod
	fsHandlers["fs.mv"] = fsMv
	fsHandlers["fs.grep"] = fsGrep
	fsHandlers["fs.sed"] = fsSed
	fsHandlers["fs.tarCreate"] = fsTarCreate
	fsHandlers["fs.tarExtract"] = fsTarExtract
}
