package main

// Fuzz of the agent's side of the wire: REQUEST and HELLO frames built from
// the contract's schemas (contract_gen.go), mutated at the JSON, byte and
// header level and run together through readFrame, the REQUEST object check,
// the contract's request validation and version negotiation. Whatever comes
// in: no panic, no hang, and every rejection is an error the connection
// handles or an ERROR with the op's bad-request code. Fixed seed: a failure
// replays. The work is fixed (about 2 s on a quiet 2-core machine); go test's
// own timeout is what would catch a hang.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand"
	"sort"
	"testing"
	"time"

	"krunbox/agent/config"
	"krunbox/agent/protocol"
)

const fuzzCases = 100000

type fuzzer struct{ r *rand.Rand }

func (f *fuzzer) pick(xs []any) any { return xs[f.r.Intn(len(xs))] }

var fuzzJunk = []any{nil, true, 0, -1, 1.5, 1e300, "", "x", []any{}, []any{1, "a"}, map[string]any{}, "\x00"}

// value is a value of one of the kinds a field accepts.
func (f *fuzzer) value(k protocol.FieldKind, items, values protocol.FieldKind) any {
	var kinds []protocol.FieldKind
	for b := protocol.KindString; b <= protocol.KindMap; b <<= 1 {
		if k&b != 0 {
			kinds = append(kinds, b)
		}
	}
	switch kinds[f.r.Intn(len(kinds))] {
	case protocol.KindString:
		return f.pick([]any{"", "x", "/tmp", "graceful", "force", "SIGTERM"})
	case protocol.KindInt:
		return f.pick([]any{0, 1, 7, 65535, 1 << 40})
	case protocol.KindNumber:
		return f.pick([]any{0, 1.5, 1 << 20})
	case protocol.KindBool:
		return f.r.Intn(2) == 0
	case protocol.KindArray:
		out := []any{}
		for i := f.r.Intn(3); i > 0; i-- {
			out = append(out, f.value(orString(items), 0, 0))
		}
		return out
	case protocol.KindMap:
		return map[string]any{"K": f.value(orString(values), 0, 0)}
	default:
		return map[string]any{}
	}
}

func orString(k protocol.FieldKind) protocol.FieldKind {
	if k == 0 {
		return protocol.KindString
	}
	return k
}

// request is a REQUEST body that fits the schema (before mutation).
func (f *fuzzer) request(op string, s protocol.RequestSchema) map[string]any {
	m := map[string]any{"op": op}
	for _, fs := range s.Fields {
		if !fs.Required && f.r.Intn(2) == 0 {
			continue
		}
		if fs.Enum != nil {
			m[fs.Name] = fs.Enum[f.r.Intn(len(fs.Enum))]
			continue
		}
		m[fs.Name] = f.value(fs.Kinds, fs.Items, fs.Values)
	}
	return m
}

// mutateJSON drops, retypes or adds a field, or replaces the whole body.
func (f *fuzzer) mutateJSON(m map[string]any) any {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	switch f.r.Intn(5) {
	case 0:
		if len(keys) > 0 {
			delete(m, keys[f.r.Intn(len(keys))])
		}
	case 1:
		if len(keys) > 0 {
			m[keys[f.r.Intn(len(keys))]] = f.pick(fuzzJunk)
		}
	case 2:
		m["op"] = f.pick([]any{"exec.nope", "", 7, nil, "fs.stat"})
	case 3:
		return f.pick(fuzzJunk)
	default:
		m["extra"] = f.pick(fuzzJunk)
	}
	return m
}

func (f *fuzzer) mutateBytes(b []byte) []byte {
	b = append([]byte(nil), b...)
	switch f.r.Intn(6) {
	case 0:
		for i := 1 + f.r.Intn(4); i > 0; i-- {
			b[f.r.Intn(len(b))] ^= 1 << uint(f.r.Intn(8))
		}
	case 1:
		b[8] = byte(f.r.Intn(256))
	case 2:
		b[9] = byte(f.r.Intn(256))
	case 3:
		n := len(b) - protocol.FrameHeaderLen - 1 - f.r.Intn(4)
		if f.r.Intn(3) == 0 {
			n = protocol.MaxFramePayload + 1 + f.r.Intn(1000)
		}
		if n < 0 {
			n = 0
		}
		binary.BigEndian.PutUint32(b[0:4], uint32(n))
	case 4:
		b = b[:f.r.Intn(len(b))]
	default:
		at := protocol.FrameHeaderLen + f.r.Intn(len(b)-protocol.FrameHeaderLen+1)
		junk := make([]byte, 1+f.r.Intn(8))
		f.r.Read(junk)
		b = append(b[:at:at], append(junk, b[at:]...)...)
	}
	return b
}

func TestFuzzAgentDecoder(t *testing.T) {
	f := &fuzzer{r: rand.New(rand.NewSource(0x6b72756e))}
	srv := newAgent(&config.Config{}).server // its handlers are looked up, never run
	ops := make([]string, 0, len(protocol.RequestSchemas))
	for op := range protocol.RequestSchemas {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	badRequest := map[string]bool{}
	for _, s := range protocol.RequestSchemas {
		badRequest[s.BadRequest] = true
	}
	started := time.Now()
	var framesOut, accepted, rejected, dropped int
	for framesOut < fuzzCases {
		// A batch as one byte stream: a lying length may swallow the rest, as on a socket.
		var stream bytes.Buffer
		for i := 0; i < 8; i++ {
			var payload []byte
			typ := protocol.FtRequest
			if f.r.Intn(10) == 0 {
				typ = protocol.FtHello
				h := map[string]any{"versions": []any{1, 2}, "versionMin": 1, "versionMax": 1, "token": "t"}
				payload, _ = json.Marshal(f.mutateJSON(h))
			} else {
				op := ops[f.r.Intn(len(ops))]
				var body any = f.request(op, protocol.RequestSchemas[op])
				if f.r.Intn(2) == 0 {
					body = f.mutateJSON(body.(map[string]any))
				}
				payload, _ = json.Marshal(body)
			}
			frame := protocol.EncodeFrame(uint32(1+2*f.r.Intn(4)), typ, 0, payload)
			if f.r.Intn(2) == 0 {
				frame = f.mutateBytes(frame)
			}
			stream.Write(frame)
		}
		r := bytes.NewReader(stream.Bytes())
		for {
			fr, err := protocol.ReadFrame(r)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, protocol.ErrFrameTooLarge) && !errors.Is(err, protocol.ErrUnknownFrameType) {
					t.Fatalf("readFrame: unexpected error %v", err)
				}
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				// The connection would close here; the rest of the batch goes with it.
				dropped++
				framesOut++
				break
			}
			framesOut++
			switch fr.Type {
			case protocol.FtHello:
				var h protocol.HelloRequest
				if operr := protocol.HelloRequestSchema.Check("HELLO", fr.Payload); operr != nil {
					if operr.Code != protocol.CodeNoCommonVersion {
						t.Fatalf("HELLO rejected with %s", operr.Code)
					}
					rejected++
				} else if json.Unmarshal(fr.Payload, &h) == nil {
					_ = h.ChooseVersion()
					_ = h.Offered()
					accepted++
				} else {
					rejected++
				}
			case protocol.FtRequest:
				if !protocol.IsJSONObject(fr.Payload) {
					dropped++ // the connection closes (PROTOCOL.md)
					continue
				}
				walkerAgrees(t, fr.Payload)
				head := protocol.ReadRequestHead(fr.Payload)
				_, operr := srv.dispatchable(head.Op, fr.Payload)
				if operr == nil {
					accepted++
					continue
				}
				want := protocol.RequestSchemas[head.Op].BadRequest
				if _, known := protocol.RequestSchemas[head.Op]; !known {
					want = protocol.CodeUnsupported // or S001 for a missing op: lookupHandler's answers
					if head.Op == "" {
						want = protocol.CodeBadArgument
					}
				}
				if operr.Code != want || operr.Message == "" {
					t.Fatalf("%q rejected with %s (%q), want %s", head.Op, operr.Code, operr.Message, want)
				}
				rejected++
			default:
				dropped++ // route() handles other types without looking at their payload
			}
			protocol.RecycleData(fr.Payload)
		}
	}
	elapsed := time.Since(started)
	t.Logf("%d frames: %d accepted, %d rejected with a code, %d closed or dropped the connection, in %v", framesOut, accepted, rejected, dropped, elapsed)
	if accepted < fuzzCases/10 || rejected < fuzzCases/10 {
		t.Fatalf("the mix did not exercise both sides: %d accepted, %d rejected", accepted, rejected)
	}
}

// walkerAgrees checks the allocation-free walker (jsonwalk.go) against
// encoding/json on the same object: the same keys, values of the same kinds.
func walkerAgrees(t *testing.T, obj []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(obj, &want); err != nil {
		t.Fatalf("isJSONObject accepted what encoding/json refuses: %q", obj)
	}
	got := map[string][]byte{}
	protocol.EachMember(obj, func(key, val []byte) bool {
		var k string
		if err := json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k); err != nil {
			t.Fatalf("walker key %q does not decode: %v", key, err)
		}
		got[k] = val
		return true
	})
	if len(got) != len(want) {
		t.Fatalf("walker found %d members, encoding/json %d, in %q", len(got), len(want), obj)
	}
	for k, v := range want {
		if protocol.KindOf(got[k]) != protocol.KindOf(v) || string(bytes.TrimSpace(got[k])) != string(bytes.TrimSpace(v)) {
			t.Fatalf("member %q: walker %q, encoding/json %q", k, got[k], v)
		}
	}
}
