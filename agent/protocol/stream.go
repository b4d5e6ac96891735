package protocol

import (
	"context"
	"encoding/json"
	"fmt"
)

// Stream is one request stream on one connection, as an operation handler sees it.
// The connection code (server.go) implements it; handlers (exec*.go, fs*.go) only use it.
type Stream interface {
	// Respond sends the final RESPONSE (with END). Only the first Respond/Fail counts.
	Respond(v any) error
	// Fail sends the final ERROR frame {code, message, path?}.
	Fail(err *OpError) error
	// Event sends a non-final EVENT frame.
	Event(v any) error
	// SendData sends DATA bytes to the host, split into frames, blocking for WINDOW credit.
	// It returns an error when the stream was cancelled or the connection closed.
	SendData(b []byte) error
	// RecvData returns the next DATA payload from the host; eof is true after the host's END.
	// It grants the host more credit as data is consumed. On CANCEL or connection loss it
	// returns an *OpError with code S218.
	RecvData() (data []byte, eof bool, err error)
	// Context is cancelled on CANCEL for this stream or when the connection closes.
	Context() context.Context
}

// OpError is an error with a stable S-code (see ERRORS.md) that becomes an ERROR frame.
type OpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
	Errno   string `json:"errno,omitempty"`
}

func (e *OpError) Error() string { return e.Code + ": " + e.Message }

// Handler serves one REQUEST; req is the whole REQUEST JSON object (including "op").
type Handler func(s Stream, req json.RawMessage)

// dataFrameSender is the connection stream's zero-copy path for DATA (server_stream.go).
type dataFrameSender interface {
	sendDataFrame(fb *[]byte, n int) error
}

// SendPooledData sends the first n payload bytes of a pooled frame buffer on
// s: handed to the connection's writer where the stream allows (it pools the
// buffer once written), else copied through SendData and pooled here.
func SendPooledData(s Stream, fb *[]byte, n int) error {
	if direct, ok := s.(dataFrameSender); ok {
		return direct.sendDataFrame(fb, n)
	}
	err := s.SendData((*fb)[FrameHeaderLen : FrameHeaderLen+n])
	DataFramePool.Put(fb)
	return err
}

// BadArg is the bad-argument error every op answers for a wrong field value.
func BadArg(format string, a ...any) *OpError {
	return &OpError{Code: CodeBadArgument, Message: fmt.Sprintf(format, a...)}
}
