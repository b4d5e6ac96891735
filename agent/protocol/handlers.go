package protocol

// The typed side of the op table (OpHandlers in contract_gen.go): a handler
// takes its op's request struct, decoded here once the request passed
// ValidateRequest, so the compiler holds every handler to the contract.

import (
	"encoding/json"
	"fmt"
)

// addTyped enters op in t as h's Handler; a nil h leaves op out (dispatch
// answers it S219).
func addTyped[R any](t map[string]Handler, op, badRequest string, h func(Stream, *R)) {
	if h != nil {
		t[op] = TypedHandler(badRequest, h)
	}
}

// TypedHandler is h as a Handler: it decodes the REQUEST into R and calls h,
// or answers badRequest when the request does not decode.
func TypedHandler[R any](badRequest string, h func(Stream, *R)) Handler {
	return func(s Stream, raw json.RawMessage) {
		var r R
		if err := json.Unmarshal(raw, &r); err != nil {
			_ = s.Fail(decodeError(badRequest, err))
			return
		}
		h(s, &r)
	}
}

// decodeError is a request that passed the schema but does not decode (a
// mode that is no octal number, an integer out of its Go type's range).
func decodeError(code string, err error) *OpError {
	if code != CodeBadArgument {
		return &OpError{Code: code, Message: "invalid request: " + err.Error()}
	}
	// Not a type mismatch: the decoder's own text names what it choked on.
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return BadArgumentError(fmt.Sprintf("field %q", te.Field), fmt.Sprintf("must be %s, got %s", te.Type.String(), te.Value))
	}
	return &OpError{Code: code, Message: err.Error()}
}
