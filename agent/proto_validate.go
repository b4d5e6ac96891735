package main

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

// fieldKind is a set of JSON types a field accepts.
type fieldKind uint8

const (
	kindString fieldKind = 1 << iota
	kindInt
	kindNumber
	kindBool
	kindObject
	kindArray
	kindMap // an object whose values all have one kind
)

type fieldSchema struct {
	name     string
	kinds    fieldKind
	items    fieldKind // the kind of an array's elements, when kinds has kindArray
	values   fieldKind // the kind of a map's values, when kinds has kindMap
	required bool
	nullable bool
	enum     []string
}

type requestSchema struct {
	badRequest string
	fields     []fieldSchema
}

// validateRequest checks req (the REQUEST payload) against op's schema; an op
// the contract does not know is not checked here (dispatch answers it S219).
func validateRequest(op string, req []byte) *OpError {
	schema, ok := RequestSchemas[op]
	if !ok {
		return nil
	}
	return schema.check(op, req)
}

// check walks the payload's top-level members once, without reflection or
// allocation (jsonwalk.go); only a key with escapes or an enum string with
// escapes is decoded.
func (s requestSchema) check(what string, payload []byte) *OpError {
	if !isJSONObject(payload) {
		return &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: request is not a JSON object", what)}
	}
	var seen uint64 // bit i: s.fields[i] was present
	var bad *OpError
	eachMember(payload, func(key, val []byte) bool {
		i := s.fieldIndex(key)
		if i < 0 {
			return true // unknown fields are ignored
		}
		seen |= 1 << uint(i)
		f := &s.fields[i]
		if msg := f.check(val); msg != "" {
			bad = &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: field %q %s", what, f.name, msg)}
			return false
		}
		return true
	})
	if bad != nil {
		return bad
	}
	for i := range s.fields {
		if s.fields[i].required && seen&(1<<uint(i)) == 0 {
			return &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: field %q is required", what, s.fields[i].name)}
		}
	}
	return nil
}

// fieldIndex finds the field a raw member key names, or -1.
func (s requestSchema) fieldIndex(rawKey []byte) int {
	key := rawKey
	if bytes.IndexByte(rawKey, '\\') >= 0 {
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, rawKey...), '"'), &k) != nil {
			return -1
		}
		key = []byte(k)
	}
	for i := range s.fields {
		if string(key) == s.fields[i].name {
			return i
		}
	}
	return -1
}

// check returns why raw does not fit the field, or "".
func (f *fieldSchema) check(raw []byte) string {
	k := kindOf(raw)
	if k == 0 {
		// null: absent for an optional field (Go's decoder leaves the zero value).
		if f.nullable || !f.required {
			return ""
		}
		return "must not be null"
	}
	if k&f.kinds == 0 {
		return "must be " + kindNames(f.kinds) + ", got " + kindNames(k&^kindInt)
	}
	switch {
	case k&kindString != 0 && f.enum != nil:
		if !inEnum(f.enum, raw) {
			return fmt.Sprintf("must be one of %q, got %s", f.enum, clip(raw))
		}
	case k&kindArray != 0 && f.items != 0:
		i, msg := 0, ""
		eachElement(raw, func(e []byte) bool {
			if kindOf(e)&f.items == 0 {
				msg = fmt.Sprintf("element %d must be %s", i, kindNames(f.items))
				return false
			}
			i++
			return true
		})
		return msg
	case k&kindObject != 0 && f.kinds&kindMap != 0 && f.values != 0:
		msg := ""
		eachMember(raw, func(key, v []byte) bool {
			if kindOf(v)&f.values == 0 {
				msg = fmt.Sprintf("value of %q must be %s", key, kindNames(f.values))
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

// kindOf names the JSON type of a value from its first byte (the payload is
// already known to be valid JSON). An integer literal is both int and number;
// an object is also a map. null is 0.
func kindOf(raw []byte) fieldKind {
	for i, b := range raw {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			return kindString
		case '{':
			return kindObject | kindMap
		case '[':
			return kindArray
		case 't', 'f':
			return kindBool
		case 'n':
			return 0
		default:
			for _, c := range raw[i:] {
				if c == '.' || c == 'e' || c == 'E' {
					return kindNumber
				}
			}
			return kindNumber | kindInt
		}
	}
	return 0
}

var kindNameList = []struct {
	k    fieldKind
	name string
}{{kindString, "a string"}, {kindInt, "an integer"}, {kindNumber, "a number"}, {kindBool, "a boolean"}, {kindObject, "an object"}, {kindArray, "an array"}, {kindMap, "an object"}}

func kindNames(k fieldKind) string {
	if k&kindObject != 0 {
		k &^= kindMap
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
