package exec

// Zero-copy output for the live follower. The agent must read every byte of a
// command's output into memory (retention, late attach, exec.read), but it
// need not copy those bytes a second time into the socket: when a follower
// that can splice is attached, the pipe reader first tee()s the bytes into a
// side pipe (the lane) and only then reads them, and the follower's OUTPUT
// write splices them from the lane to the socket, pipe pages straight into the
// socket buffer. That cut the agent's CPU per streamed byte by about a third,
// which matters because the agent shares the sandbox's CPU quota with the
// command it serves.
//
// ch.data always holds the bytes too, so anything unusual (the lane closed,
// its follower gone, a chunk not at the head of the lane) falls back to the
// plain copying write; lane bytes nobody will send are discarded in order.

import (
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

const (
	spliceFMove     = 0x1 // SPLICE_F_MOVE
	spliceFNonblock = 0x2 // SPLICE_F_NONBLOCK
	ioctlFIONREAD   = 0x541B
	fSetPipeSize    = 1031 // F_SETPIPE_SZ
	// laneMaxPending bounds what waits in a lane (its pipe holds 1 MiB, and
	// page-sized pieces of output fill it exactly).
	laneMaxPending = 1 << 20
)

// spliceLane is the side pipe of one output fd of one command.
type spliceLane struct {
	mu      sync.Mutex
	room    *sync.Cond  // signalled when bytes shrink or waiting must stop
	r, w    int         // the side pipe (blocking; tee and splice use SPLICE_F_NONBLOCK)
	pending []laneEntry // chunks whose bytes wait in the pipe, oldest first
	bytes   int         // their total size
	closed  bool
	noWait  bool // the command exited: its pipes are drained without waiting
}

// laneEntry is one chunk's bytes in the lane. The size is kept apart from the
// chunk: a chunk whose buffer was recycled no longer has its data.
type laneEntry struct {
	ch   *Chunk
	size int
}

func openLane() (*spliceLane, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, err
	}
	_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), fSetPipeSize, 1<<20)
	ln := &spliceLane{r: p[0], w: p[1]}
	ln.room = sync.NewCond(&ln.mu)
	return ln, nil
}

func (ln *spliceLane) close() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.shutLocked()
}

func (ln *spliceLane) shutLocked() {
	ln.room.Broadcast()
	if ln.closed {
		return
	}
	ln.closed = true
	syscall.Close(ln.r)
	syscall.Close(ln.w)
	ln.pending = nil
	ln.bytes = 0
}

// stopWaiting ends waits for room for good (the post-exit drain must not
// depend on the follower).
func (ln *spliceLane) stopWaiting() {
	ln.mu.Lock()
	ln.noWait = true
	ln.room.Broadcast()
	ln.mu.Unlock()
}

// waitRoom blocks while the lane is full and its follower still has chunks
// to send from it: a reader that ran further ahead would have to copy. The
// command then waits on its pipe, as it would at the retention limit.
func (ln *spliceLane) waitRoom() {
	ln.mu.Lock()
	for !ln.closed && !ln.noWait && ln.bytes+maxChunkBytes > laneMaxPending {
		ln.room.Wait()
	}
	ln.mu.Unlock()
}

// readVia reads the next output of pipe f into buf. When there is room in the
// lane the bytes are duplicated into it first and teed reports true: the
// chunk made of buf[:n] must then be registered with add (even if the log
// drops it) before anything else is read, or the lane falls out of step.
// Errors are those of a plain read (io.EOF, deadline, closed).
func (ln *spliceLane) readVia(f *os.File, buf []byte) (n int, teed bool, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		n, err = f.Read(buf)
		return n, false, err
	}
	var opErr error
	rerr := rc.Read(func(fd uintptr) bool {
		n, teed, opErr = ln.readOnce(int(fd), buf)
		return opErr != syscall.EAGAIN
	})
	if rerr != nil {
		return 0, false, rerr
	}
	if opErr != nil {
		return 0, false, opErr
	}
	if n == 0 {
		return 0, false, io.EOF
	}
	return n, teed, nil
}

// readOnce is one non-blocking attempt: tee then read when bytes are waiting
// and the lane has room, a plain read otherwise (which also reports EOF).
func (ln *spliceLane) readOnce(fd int, buf []byte) (int, bool, error) {
	var avail int32
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), ioctlFIONREAD, uintptr(unsafe.Pointer(&avail)))
	ln.mu.Lock()
	defer ln.mu.Unlock()
	want := int(avail)
	if want > len(buf) {
		want = len(buf)
	}
	if e != 0 || want == 0 || ln.closed || ln.bytes+want > laneMaxPending {
		return plainRead(fd, buf)
	}
	k, err := syscall.Tee(fd, ln.w, want, spliceFNonblock)
	if err != nil || k <= 0 {
		return plainRead(fd, buf)
	}
	n, err := syscall.Read(fd, buf[:k])
	if err != nil || n != int(k) {
		// Cannot happen (we are the pipe's only reader and it held k bytes),
		// but a lane out of step with its chunks must never be spliced from.
		ln.shutLocked()
		if err != nil {
			return 0, false, err
		}
		return n, false, nil
	}
	ln.bytes += n // add() will name the chunk; its size is reserved now
	return n, true, nil
}

func plainRead(fd int, buf []byte) (int, bool, error) {
	n, err := syscall.Read(fd, buf)
	if n < 0 {
		n = 0
	}
	return n, false, err
}

// add registers the chunk whose bytes the last teed read put in the lane.
func (ln *spliceLane) add(ch *Chunk) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed {
		return
	}
	ch.lane = ln
	ln.pending = append(ln.pending, laneEntry{ch, len(ch.data)})
}

// spliceTo writes ch's bytes from the lane to the socket behind sc, first
// discarding lane bytes of older chunks that went another way. sent is false
// when ch is no longer in the lane (the caller writes ch.data instead); err is
// a socket error.
func (ln *spliceLane) spliceTo(sc syscall.RawConn, ch *Chunk) (sent bool, err error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	at := -1
	for i, e := range ln.pending {
		if e.ch == ch {
			at = i
			break
		}
	}
	if ln.closed || at < 0 {
		return false, nil
	}
	for _, old := range ln.pending[:at] {
		if !ln.discardLocked(old.size) {
			return false, nil
		}
	}
	left := ln.pending[at].size
	ln.pending = ln.pending[at+1:]
	ln.bytes -= left
	ln.room.Broadcast()

	var spliceErr error
	werr := sc.Write(func(fd uintptr) bool {
		for left > 0 {
			n, err := syscall.Splice(ln.r, nil, int(fd), nil, left, spliceFMove|spliceFNonblock)
			if err == syscall.EAGAIN {
				return false // the socket is full: wait until it drains
			}
			if err != nil || n <= 0 {
				spliceErr = err
				if spliceErr == nil {
					spliceErr = syscall.EPIPE
				}
				return true
			}
			left -= int(n)
		}
		return true
	})
	if werr == nil {
		werr = spliceErr
	}
	if werr != nil {
		// Part of the frame may be out: the connection is done for, and so is the lane.
		ln.shutLocked()
		return true, werr
	}
	return true, nil
}

// discardLocked drops n bytes (an older chunk's) from the front of the lane;
// false: it could not, and the lane is closed.
func (ln *spliceLane) discardLocked(n int) bool {
	ln.bytes -= n
	ln.room.Broadcast()
	for n > 0 {
		k, err := syscall.Splice(ln.r, nil, devNullFd(), nil, n, spliceFMove|spliceFNonblock)
		if err != nil || k <= 0 {
			ln.shutLocked()
			return false
		}
		n -= int(k)
	}
	return true
}

var (
	devNullOnce sync.Once
	devNull     = -1
)

// devNullFd is where discarded lane bytes go (splice to /dev/null costs no copy).
func devNullFd() int {
	devNullOnce.Do(func() {
		if fd, err := syscall.Open("/dev/null", syscall.O_WRONLY|syscall.O_CLOEXEC, 0); err == nil {
			devNull = fd
		}
	})
	return devNull
}
