package exec

import (
	"encoding/json"
	"testing"

	"krunbox/agent/protocol"
)

// BenchmarkDecodeExecStart is the handler's own decode of the request BenchmarkValidateExecStart (package main) checks, for scale.
func BenchmarkDecodeExecStart(b *testing.B) {
	req := []byte(`{"op":"exec.start","argv":["echo","hi"],"env":{"A":"1"},"timeoutMs":0,"id":"c-1","follow":true,"stdin":false,"window":4194304}`)
	for i := 0; i < b.N; i++ {
		var r protocol.ExecStartRequest
		if err := json.Unmarshal(req, &r); err != nil {
			b.Fatal(err)
		}
	}
}
