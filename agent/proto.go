package main

// Frame codec of the host ↔ agent protocol (PROTOCOL.md, "Frames").

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// The header layout, frame types, flags and the payload cap (over it, the
// connection closes) come from the contract: contract_gen.go.

var (
	errFrameTooLarge    = errors.New("frame larger than the 4 MiB cap")
	errUnknownFrameType = errors.New("unknown frame type")
)

type frame struct {
	stream  uint32
	typ     byte
	flags   byte
	payload []byte
}

// readFrame reads one whole frame. A clean end of input before any header byte
// returns io.EOF; a frame cut short returns io.ErrUnexpectedEOF. The length is
// checked before any payload is allocated, so a hostile length cannot make us
// allocate more than the cap.
func readFrame(r io.Reader) (frame, error) {
	var hdr [FrameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[0:4])
	f := frame{
		stream: binary.BigEndian.Uint32(hdr[4:8]),
		typ:    hdr[8],
		flags:  hdr[9],
	}
	if n > MaxFramePayload {
		return f, errFrameTooLarge
	}
	if f.typ < FtHello || f.typ > FtPong {
		return f, errUnknownFrameType
	}
	f.payload = payloadBuf(int(n))
	if _, err := io.ReadFull(r, f.payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return f, err
	}
	return f, nil
}

// encodeFrame returns header and payload in one buffer, ready for a single write.
func encodeFrame(stream uint32, typ, flags byte, payload []byte) []byte {
	buf := make([]byte, FrameHeaderLen+len(payload))
	putFrameHeader(buf, stream, typ, flags, len(payload))
	copy(buf[FrameHeaderLen:], payload)
	return buf
}

func putFrameHeader(buf []byte, stream uint32, typ, flags byte, payloadLen int) {
	binary.BigEndian.PutUint32(buf[0:4], uint32(payloadLen))
	binary.BigEndian.PutUint32(buf[4:8], stream)
	buf[8] = typ
	buf[9] = flags
}

// encodeOutputHeader returns the frame header and OUTPUT prefix of a chunk; the
// chunk's bytes follow as a separate write piece (retained chunks are immutable),
// so command output is never copied inside the agent.
func encodeOutputHeader(stream uint32, fd byte, seq uint64, unixMs int64, dataLen int) []byte {
	buf := make([]byte, FrameHeaderLen+OutputHeaderLen)
	putFrameHeader(buf, stream, FtOutput, 0, OutputHeaderLen+dataLen)
	p := buf[FrameHeaderLen:]
	p[0] = fd
	binary.BigEndian.PutUint64(p[1:9], seq)
	binary.BigEndian.PutUint64(p[9:17], uint64(unixMs))
	return buf
}

// dataFramePool recycles whole DATA frame buffers (header room + dataChunk):
// allocating and zeroing one per frame was about a quarter of the agent's CPU
// on fs.read. A buffer goes back only after the socket write carrying it has
// completed (conn.writeLoop).
var dataFramePool = sync.Pool{New: func() any {
	b := make([]byte, FrameHeaderLen+dataChunk)
	return &b
}}

// recvDataPool recycles the payload buffers of the host's large frames (upload
// DATA): a fresh 256 KiB allocation per frame, faulted in and zeroed, was about
// a fifth of the agent's time on a 1 GiB upload. Handlers hand a payload back
// with recycleData once they are done with it; one never handed back is
// simply left to the GC.
var recvDataPool = sync.Pool{New: func() any {
	b := make([]byte, dataChunk)
	return &b
}}

func payloadBuf(n int) []byte {
	if n > dataChunk/4 && n <= dataChunk {
		return (*recvDataPool.Get().(*[]byte))[:n]
	}
	return make([]byte, n)
}

// recycleData returns a payload from payloadBuf that nothing refers to any more.
func recycleData(b []byte) {
	if cap(b) == dataChunk {
		b = b[:dataChunk]
		recvDataPool.Put(&b)
	}
}

func windowPayload(n uint32) []byte {
	var b [WindowPayloadLen]byte
	binary.BigEndian.PutUint32(b[:], n)
	return b[:]
}
