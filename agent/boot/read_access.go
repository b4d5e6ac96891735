package boot

// ReadingEverything (below) runs fn on a thread of its own with CAP_DAC_READ_SEARCH effective, so
// that reading the whole writable layer (a snapshot, the artifacts archive) keeps the
// files a user made private (a 0600 file of uid 1000). Capabilities are per thread in
// Linux: only this thread holds it, and it never serves anything else, since its goroutine
// ends locked to it and the Go runtime then ends the thread too. If the capability cannot
// be raised fn still runs, and private files fail as they would without it.

import (
	"runtime"
	"syscall"
	"unsafe"
)

// ReadingEverything runs fn with CAP_DAC_READ_SEARCH raised on its thread alone.
func ReadingEverything(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		hdr, data := agentCapSets(agentKeptCaps | agentRaisableCaps)
		_, _, _ = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
		fn()
	}()
	<-done
}
