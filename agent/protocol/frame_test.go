package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(EncodeFrame(7, FtRequest, FlagEnd, []byte(`{"op":"x"}`)))
	buf.Write(EncodeFrame(0, FtPing, 0, nil))
	buf.Write(append(EncodeOutputHeader(9, 2, 42, 1700000000123, 5), "hello"...))

	f, err := ReadFrame(&buf)
	if err != nil || f.Stream != 7 || f.Type != FtRequest || f.Flags != FlagEnd || string(f.Payload) != `{"op":"x"}` {
		t.Fatalf("frame 1: %+v %v", f, err)
	}
	f, err = ReadFrame(&buf)
	if err != nil || f.Stream != 0 || f.Type != FtPing || len(f.Payload) != 0 {
		t.Fatalf("frame 2: %+v %v", f, err)
	}
	f, err = ReadFrame(&buf)
	if err != nil || f.Type != FtOutput || f.Stream != 9 {
		t.Fatalf("frame 3: %+v %v", f, err)
	}
	p := f.Payload
	if p[0] != 2 || binary.BigEndian.Uint64(p[1:9]) != 42 || binary.BigEndian.Uint64(p[9:17]) != 1700000000123 || string(p[17:]) != "hello" {
		t.Fatalf("OUTPUT payload %v", p)
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Fatalf("clean end: got %v, want io.EOF", err)
	}
}

func TestFrameTruncated(t *testing.T) {
	full := EncodeFrame(1, FtData, 0, []byte("0123456789"))
	for _, cut := range []int{1, 5, FrameHeaderLen, FrameHeaderLen + 3, len(full) - 1} {
		_, err := ReadFrame(bytes.NewReader(full[:cut]))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut at %d: got %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

func TestFrameOversizedRejectedBeforeAllocation(t *testing.T) {
	hdr := make([]byte, FrameHeaderLen)
	binary.BigEndian.PutUint32(hdr[0:4], MaxFramePayload+1)
	hdr[8] = FtData
	// No payload follows: the length alone must be refused.
	if _, err := ReadFrame(bytes.NewReader(hdr)); err != ErrFrameTooLarge {
		t.Fatalf("got %v, want errFrameTooLarge", err)
	}
	// Exactly the cap is allowed.
	ok := EncodeFrame(1, FtData, 0, make([]byte, MaxFramePayload))
	if f, err := ReadFrame(bytes.NewReader(ok)); err != nil || len(f.Payload) != MaxFramePayload {
		t.Fatalf("frame at the cap: %v", err)
	}
}

func TestFrameUnknownType(t *testing.T) {
	for _, typ := range []byte{0x00, 0x0C, 0xFF} {
		b := EncodeFrame(1, typ, 0, []byte("x"))
		if _, err := ReadFrame(bytes.NewReader(b)); err != ErrUnknownFrameType {
			t.Errorf("type %#x: got %v, want errUnknownFrameType", typ, err)
		}
	}
}
