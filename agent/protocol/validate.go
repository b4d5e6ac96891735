package protocol

// Request validation from the contract: every REQUEST is checked against its
// op's field table (contract_gen.go, generated from protocol/v1.json) before
// its handler runs, so a handler only ever sees fields of the stated types.
// A violation answers ERROR with the op's bad-request code. The check reads
// each field's first byte (and an array's elements or a map's values), so it
// costs one pass over the request's top-level object.

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// FieldKind is a set of JSON types a field accepts.
type FieldKind uint8

const (
	KindString FieldKind = 1 << iota
	KindInt
	KindNumber
	KindBool
	KindObject
	KindArray
	KindMap // an object whose values all have one kind
)

type FieldSchema struct {
	Name     string
	Kinds    FieldKind
	Items    FieldKind // the kind of an array's elements, when kinds has kindArray
	Values   FieldKind // the kind of a map's values, when kinds has kindMap
	Required bool
	Nullable bool
	Enum     []string
}

type RequestSchema struct {
	BadRequest string
	Fields     []FieldSchema
}

// ValidateRequest checks req (the REQUEST payload) against op's schema; an op
// the contract does not know is not checked here (dispatch answers it S219).
func ValidateRequest(op string, req []byte) *OpError {
	schema, ok := RequestSchemas[op]
	if !ok {
		return nil
	}
	return schema.Check(op, req)
}

// Check walks the payload's top-level members once, without reflection or
// allocation (jsonwalk.go); only a key with escapes or an enum string with
// escapes is decoded.
func (s RequestSchema) Check(what string, payload []byte) *OpError {
	if !IsJSONObject(payload) {
		return &OpError{Code: s.BadRequest, Message: fmt.Sprintf("%s: request is not a JSON object", what)}
	}
	var seen uint64 // bit i: s.fields[i] was present
	var bad *OpError
	EachMember(payload, func(key, val []byte) bool {
		i := s.fieldIndex(key)
		if i < 0 {
			return true // unknown fields are ignored
		}
		seen |= 1 << uint(i)
		f := &s.Fields[i]
		if msg := f.check(val); msg != "" {
			bad = &OpError{Code: s.BadRequest, Message: fmt.Sprintf("%s: field %q %s", what, f.Name, msg)}
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	for i := range s.Fields {
		if s.Fields[i].Required && seen&(1<<uint(i)) == 0 {
			return &OpError{Code: s.BadRequest, Message: fmt.Sprintf("%s: field %q is required", what, s.Fields[i].Name)}
		}
	}
	return nil
}

// fieldIndex finds the field a raw member key names, or -1.
func (s RequestSchema) fieldIndex(rawKey []byte) int {
	key := rawKey
	if bytes.IndexByte(rawKey, '\\') >= 0 {
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, rawKey...), '"'), &k) != nil {
			return -1
		}
		key = []byte(k)
	}
	for i := range s.Fields {
		if string(key) == s.Fields[i].Name {
			return i
		}
	}
	return -1
}

// check returns why raw does not fit the field, or "".
func (f *FieldSchema) check(raw []byte) string {
	k := KindOf(raw)
	if k == 0 {
		// null: absent for an optional field (Go's decoder leaves the zero value).
		if f.Nullable || !f.Required {
			return ""
		}
		return "must not be null"
	}
	if k&f.Kinds == 0 {
		return "must be " + kindNames(f.Kinds) + ", got " + kindNames(k&^KindInt)
	}
	switch {
	case k&KindString != 0 && f.Enum != nil:
		if !inEnum(f.Enum, raw) {
			return fmt.Sprintf("must be one of %q, got %s", f.Enum, clip(raw))
		}
	case k&KindArray != 0 && f.Items != 0:
		i, msg := 0, ""
		eachElement(raw, func(e []byte) bool {
			if KindOf(e)&f.Items == 0 {
				msg = fmt.Sprintf("element %d must be %s", i, kindNames(f.Items))
				return false
			}
			i++
			return true
		})
		return msg
	case k&KindObject != 0 && f.Kinds&KindMap != 0 && f.Values != 0:
		msg := ""
		EachMember(raw, func(key, v []byte) bool {
			if KindOf(v)&f.Values == 0 {
				msg = fmt.Sprintf("value of %q must be %s", key, kindNames(f.Values))
				return false
			}
			return true
		})
		return msg
	}
	return ""
}

// inEnum reports whether the JSON string raw is one of list.
func inEnum(list []string, raw []byte) bool {
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		var decoded string
		if json.Unmarshal(raw, &decoded) != nil {
			return false
		}
		s = []byte(decoded)
	}
	for _, v := range list {
		if string(s) == v {
			return true
		}
	}
	return false
}

// KindOf names the JSON type of a value from its first byte (the payload is
// already known to be valid JSON). An integer literal is both int and number;
// an object is also a map. null is 0.
func KindOf(raw []byte) FieldKind {
	for i, b := range raw {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			return KindString
		case '{':
			return KindObject | KindMap
		case '[':
			return KindArray
		case 't', 'f':
			return KindBool
		case 'n':
			return 0
		default:
			for _, c := range raw[i:] {
				if c == '.' || c == 'e' || c == 'E' {
					return KindNumber
				}
			}
			return KindNumber | KindInt
		}
	}
	return 0
}

var kindNameList = []struct {
	k    FieldKind
	name string
}{{KindString, "a string"}, {KindInt, "an integer"}, {KindNumber, "a number"}, {KindBool, "a boolean"}, {KindObject, "an object"}, {KindArray, "an array"}, {KindMap, "an object"}}

func kindNames(k FieldKind) string {
	if k&KindObject != 0 {
		k &^= KindMap
	}
	out := ""
	for _, n := range kindNameList {
		if k&n.k != 0 {
			if out != "" {
				out += " or "
			}
			out += n.name
			k &^= n.k
		}
	}
	if out == "" {
		return "null"
	}
	return out
}

func clip(raw []byte) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}

func IsJSONObject(payload []byte) bool {
	trimmed := bytes.TrimLeft(payload, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed)
}
