package main

import (
	"encoding/json"
	"testing"

	"krunbox/agent/protocol"
)

func TestKindOf(t *testing.T) {
	for raw, want := range map[string]protocol.FieldKind{
		`"s"`: protocol.KindString, ` 12`: protocol.KindInt | protocol.KindNumber, `-3`: protocol.KindInt | protocol.KindNumber, `1.5`: protocol.KindNumber, `1e3`: protocol.KindNumber,
		`true`: protocol.KindBool, `false`: protocol.KindBool, `null`: 0, `[]`: protocol.KindArray, `{}`: protocol.KindObject | protocol.KindMap,
	} {
		if got := protocol.KindOf(json.RawMessage(raw)); got != want {
			t.Errorf("kindOf(%s) = %b, want %b", raw, got, want)
		}
	}
}

// BenchmarkValidateExecStart is the contract's cost on the hot exec path: one
// check of a typical exec.start request.
func BenchmarkValidateExecStart(b *testing.B) {
	req := []byte(`{"op":"exec.start","argv":["echo","hi"],"env":{"A":"1"},"timeoutMs":0,"id":"c-1","follow":true,"stdin":false,"window":4194304}`)
	for i := 0; i < b.N; i++ {
		if operr := protocol.ValidateRequest(protocol.OpExecStart, req); operr != nil {
			b.Fatal(operr.Message)
		}
	}
}
