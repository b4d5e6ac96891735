package main

import (
	"encoding/json"
	"testing"
)

func TestKindOf(t *testing.T) {
	for raw, want := range map[string]fieldKind{
		`"s"`: kindString, ` 12`: kindInt | kindNumber, `-3`: kindInt | kindNumber, `1.5`: kindNumber, `1e3`: kindNumber,
		`true`: kindBool, `false`: kindBool, `null`: 0, `[]`: kindArray, `{}`: kindObject | kindMap,
	} {
		if got := kindOf(json.RawMessage(raw)); got != want {
			t.Errorf("kindOf(%s) = %b, want %b", raw, got, want)
		}
	}
}

// BenchmarkValidateExecStart is the contract's cost on the hot exec path: one
// check of a typical exec.start request.
func BenchmarkValidateExecStart(b *testing.B) {
	req := []byte(`{"op":"exec.start","argv":["echo","hi"],"env":{"A":"1"},"timeoutMs":0,"id":"c-1","follow":true,"stdin":false,"window":4194304}`)
	for i := 0; i < b.N; i++ {
		if operr := validateRequest(OpExecStart, req); operr != nil {
			b.Fatal(operr.Message)
		}
	}
}

// BenchmarkDecodeExecStart is the handler's own decode of the same request, for scale.
func BenchmarkDecodeExecStart(b *testing.B) {
	req := []byte(`{"op":"exec.start","argv":["echo","hi"],"env":{"A":"1"},"timeoutMs":0,"id":"c-1","follow":true,"stdin":false,"window":4194304}`)
	for i := 0; i < b.N; i++ {
		var r execStartReq
		if err := json.Unmarshal(req, &r); err != nil {
			b.Fatal(err)
		}
	}
}
