package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(encodeFrame(7, FtRequest, FlagEnd, []byte(`{"op":"x"}`)))
	buf.Write(encodeFrame(0, FtPing, 0, nil))
	buf.Write(append(encodeOutputHeader(9, 2, 42, 1700000000123, 5), "hello"...))

	f, err := readFrame(&buf)
	if err != nil || f.stream != 7 || f.typ != FtRequest || f.flags != FlagEnd || string(f.payload) != `{"op":"x"}` {
		t.Fatalf("frame 1: %+v %v", f, err)
	}
	f, err = readFrame(&buf)
	if err != nil || f.stream != 0 || f.typ != FtPing || len(f.payload) != 0 {
		t.Fatalf("frame 2: %+v %v", f, err)
	}
	f, err = readFrame(&buf)
	if err != nil || f.typ != FtOutput || f.stream != 9 {
		t.Fatalf("frame 3: %+v %v", f, err)
	}
	p := f.payload
	if p[0] != 2 || binary.BigEndian.Uint64(p[1:9]) != 42 || binary.BigEndian.Uint64(p[9:17]) != 1700000000123 || string(p[17:]) != "hello" {
		t.Fatalf("OUTPUT payload %v", p)
	}
	if _, err := readFrame(&buf); err != io.EOF {
		t.Fatalf("clean end: got %v, want io.EOF", err)
	}
}

func TestFrameTruncated(t *testing.T) {
	full := encodeFrame(1, FtData, 0, []byte("0123456789"))
	for _, cut := range []int{1, 5, FrameHeaderLen, FrameHeaderLen + 3, len(full) - 1} {
		_, err := readFrame(bytes.NewReader(full[:cut]))
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
	if _, err := readFrame(bytes.NewReader(hdr)); err != errFrameTooLarge {
		t.Fatalf("got %v, want errFrameTooLarge", err)
	}
	// Exactly the cap is allowed.
	ok := encodeFrame(1, FtData, 0, make([]byte, MaxFramePayload))
	if f, err := readFrame(bytes.NewReader(ok)); err != nil || len(f.payload) != MaxFramePayload {
		t.Fatalf("frame at the cap: %v", err)
	}
}

func TestFrameUnknownType(t *testing.T) {
	for _, typ := range []byte{0x00, 0x0C, 0xFF} {
		b := encodeFrame(1, typ, 0, []byte("x"))
		if _, err := readFrame(bytes.NewReader(b)); err != errUnknownFrameType {
			t.Errorf("type %#x: got %v, want errUnknownFrameType", typ, err)
		}
	}
}
