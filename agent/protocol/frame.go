package protocol

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
	ErrFrameTooLarge    = errors.New("frame larger than the 4 MiB cap")
	ErrUnknownFrameType = errors.New("unknown frame type")
)

type Frame struct {
	Stream  uint32
	Type    byte
	Flags   byte
	Payload []byte
}

// ReadFrame reads one whole frame. A clean end of input before any header byte
// returns io.EOF; a frame cut short returns io.ErrUnexpectedEOF. The length is
// checked before any payload is allocated, so a hostile length cannot make us
// allocate more than the cap.
func ReadFrame(r io.Reader) (Frame, error) {
	var hdr [FrameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[0:4])
	f := Frame{
		Stream: binary.BigEndian.Uint32(hdr[4:8]),
		Type:   hdr[8],
		Flags:  hdr[9],
	}
	if n > MaxFramePayload {
		return f, ErrFrameTooLarge
	}
	if f.Type < FtHello || f.Type > FtPong {
		return f, ErrUnknownFrameType
	}
	f.Payload = payloadBuf(int(n))
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return f, err
	}
	return f, nil
}

// EncodeFrame returns header and payload in one buffer, ready for a single write.
func EncodeFrame(stream uint32, typ, flags byte, payload []byte) []byte {
	buf := make([]byte, FrameHeaderLen+len(payload))
	PutFrameHeader(buf, stream, typ, flags, len(payload))
	copy(buf[FrameHeaderLen:], payload)
	return buf
}

func PutFrameHeader(buf []byte, stream uint32, typ, flags byte, payloadLen int) {
	binary.BigEndian.PutUint32(buf[0:4], uint32(payloadLen))
	binary.BigEndian.PutUint32(buf[4:8], stream)
	buf[8] = typ
	buf[9] = flags
}

// EncodeOutputHeader returns the frame header and OUTPUT prefix of a chunk; the
// chunk's bytes follow as a separate write piece (retained chunks are immutable),
// so command output is never copied inside the agent.
func EncodeOutputHeader(stream uint32, fd byte, seq uint64, unixMs int64, dataLen int) []byte {
	buf := make([]byte, FrameHeaderLen+OutputHeaderLen)
	PutFrameHeader(buf, stream, FtOutput, 0, OutputHeaderLen+dataLen)
	p := buf[FrameHeaderLen:]
	p[0] = fd
	binary.BigEndian.PutUint64(p[1:9], seq)
	binary.BigEndian.PutUint64(p[9:17], uint64(unixMs))
	return buf
}

// DataFramePool recycles whole DATA frame buffers (header room + dataChunk):
// allocating and zeroing one per frame was about a quarter of the agent's CPU
// on fs.read. A buffer goes back only after the socket write carrying it has
// completed (conn.writeLoop).
var DataFramePool = sync.Pool{New: func() any {
	b := make([]byte, FrameHeaderLen+DataChunk)
	return &b
}}

// recvDataPool recycles the payload buffers of the host's large frames (upload
// DATA): a fresh 256 KiB allocation per frame, faulted in and zeroed, was about
// a fifth of the agent's time on a 1 GiB upload. Handlers hand a payload back
// with recycleData once they are done with it; one never handed back is
// simply left to the GC.
var recvDataPool = sync.Pool{New: func() any {
	b := make([]byte, DataChunk)
	return &b
}}

func payloadBuf(n int) []byte {
	if n > DataChunk/4 && n <= DataChunk {
		return (*recvDataPool.Get().(*[]byte))[:n]
	}
	return make([]byte, n)
}

// RecycleData returns a payload from payloadBuf that nothing refers to any more.
func RecycleData(b []byte) {
	if cap(b) == DataChunk {
		b = b[:DataChunk]
		recvDataPool.Put(&b)
	}
}

func WindowPayload(n uint32) []byte {
	var b [WindowPayloadLen]byte
	binary.BigEndian.PutUint32(b[:], n)
	return b[:]
}

// DataChunk is the size of the DATA payloads the agent sends for fs.read and
// fs.tarCreate. 256 KiB pipelines: the host takes one chunk while the next is
// read (1 MiB frames made a 1 MiB read ~40 % slower).
const DataChunk = 256 << 10
