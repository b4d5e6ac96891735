package fsops

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"krunbox/agent/protocol"
)

// fsFakeStream is a Stream for handler tests: it feeds scripted DATA and records
// what the handler sends.
type fsFakeStream struct {
	ctx    context.Context
	cancel context.CancelFunc

	input    [][]byte // DATA payloads handed out by RecvData
	abortErr error    // after input: returned instead of eof (nil: eof)

	events     []map[string]any
	data       bytes.Buffer
	dataFrames int
	failSendAt int             // SendData fails from this call on (0: never)
	onSend     func(frame int) // called after each delivered DATA payload
	result     json.RawMessage
	failure    *protocol.OpError
	finals     int
}

func newFsFakeStream(input ...[]byte) *fsFakeStream {
	ctx, cancel := context.WithCancel(context.Background())
	return &fsFakeStream{ctx: ctx, cancel: cancel, input: input}
}

func (f *fsFakeStream) Respond(v any) error {
	f.finals++
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if f.finals == 1 {
		f.result = b
	}
	return nil
}

func (f *fsFakeStream) Fail(err *protocol.OpError) error {
	f.finals++
	if f.finals == 1 {
		f.failure = err
	}
	return nil
}

func (f *fsFakeStream) Event(v any) error {
	b, _ := json.Marshal(v)
	var m map[string]any
	json.Unmarshal(b, &m)
	f.events = append(f.events, m)
	return nil
}

func (f *fsFakeStream) SendData(b []byte) error {
	f.dataFrames++
	if f.failSendAt > 0 && f.dataFrames >= f.failSendAt {
		return &protocol.OpError{Code: protocol.CodeFsAborted, Message: "stream cancelled"}
	}
	f.data.Write(b)
	if f.onSend != nil {
		f.onSend(f.dataFrames)
	}
	return nil
}

func (f *fsFakeStream) RecvData() ([]byte, bool, error) {
	if len(f.input) > 0 {
		d := f.input[0]
		f.input = f.input[1:]
		return d, false, nil
	}
	if f.abortErr != nil {
		return nil, false, f.abortErr
	}
	return nil, true, nil
}

func (f *fsFakeStream) Context() context.Context { return f.ctx }

// fsHandler is an fs op's typed handler as the op table serves it.
func fsHandler[R any](h func(protocol.Stream, *R)) protocol.Handler {
	return protocol.TypedHandler(protocol.CodeFsBadRequest, h)
}

// run calls h with the JSON request req on a fresh fake stream.
func fsCall(t *testing.T, h protocol.Handler, req any, input ...[]byte) *fsFakeStream {
	t.Helper()
	s := newFsFakeStream(input...)
	return fsCallOn(t, s, h, req)
}

func fsCallOn(t *testing.T, s *fsFakeStream, h protocol.Handler, req any) *fsFakeStream {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	h(s, b)
	if s.finals != 1 && s.failSendAt == 0 {
		t.Fatalf("handler sent %d final frames, want 1", s.finals)
	}
	return s
}

// ok asserts success and decodes the RESPONSE into out (may be nil).
func (f *fsFakeStream) ok(t *testing.T, out any) {
	t.Helper()
	if f.failure != nil {
		t.Fatalf("unexpected failure %s: %s", f.failure.Code, f.failure.Message)
	}
	if f.result == nil {
		t.Fatal("no RESPONSE")
	}
	if out != nil {
		if err := json.Unmarshal(f.result, out); err != nil {
			t.Fatal(err)
		}
	}
}

// failed asserts an ERROR with code whose message and path name wantPath.
func (f *fsFakeStream) failed(t *testing.T, code, wantPath string) *protocol.OpError {
	t.Helper()
	if f.failure == nil {
		t.Fatalf("want %s, got RESPONSE %s", code, f.result)
	}
	if f.failure.Code != code {
		t.Fatalf("want %s, got %s: %s", code, f.failure.Code, f.failure.Message)
	}
	if wantPath != "" {
		if !strings.Contains(f.failure.Message, wantPath) {
			t.Fatalf("message %q does not name %q", f.failure.Message, wantPath)
		}
		if f.failure.Path != wantPath {
			t.Fatalf("path field %q, want %q", f.failure.Path, wantPath)
		}
	}
	return f.failure
}

type fsReq = map[string]any
