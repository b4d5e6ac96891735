package main

// Request validation from the contract: every REQUEST is checked against its
// op's field table (contract_gen.go, generated from protocol/v1.json) before
// its handler runs, so a handler only ever sees fields of the stated types.
// A violation answers ERROR with the op's bad-request code. The check reads
// each field's first byte (and an array's elements), nothing more, so it
// costs one pass over the request's top-level object.

import (
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

// validateRequest checks req (the REQUEST payload, known to be a JSON object)
// against op's schema; an op the contract does not know is not checked here
// (dispatch answers it S219).
func validateRequest(op string, req []byte) *OpError {
	schema, ok := requestSchemas[op]
	if !ok {
		return nil
	}
	return schema.check(op, req)
}

func (s requestSchema) check(what string, payload []byte) *OpError {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil {
		return &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: request is not a JSON object", what)}
	}
	for i := range s.fields {
		f := &s.fields[i]
		raw, present := obj[f.name]
		if !present {
			if f.required {
				return &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: field %q is required", what, f.name)}
			}
			continue
		}
		if msg := f.check(raw); msg != "" {
			return &OpError{Code: s.badRequest, Message: fmt.Sprintf("%s: field %q %s", what, f.name, msg)}
		}
	}
	return nil
}

// check returns why raw does not fit the field, or "".
func (f *fieldSchema) check(raw json.RawMessage) string {
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
		var s string
		if json.Unmarshal(raw, &s) != nil || !contains(f.enum, s) {
			return fmt.Sprintf("must be one of %q, got %s", f.enum, clip(raw))
		}
	case k&kindArray != 0 && f.items != 0:
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return "is not a JSON array"
		}
		for i, e := range elems {
			if kindOf(e)&f.items == 0 {
				return fmt.Sprintf("element %d must be %s", i, kindNames(f.items))
			}
		}
	case k&kindObject != 0 && f.kinds&kindMap != 0 && f.values != 0:
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return "is not a JSON object"
		}
		for key, v := range m {
			if kindOf(v)&f.values == 0 {
				return fmt.Sprintf("value of %q must be %s", key, kindNames(f.values))
			}
		}
	}
	return ""
}

// kindOf names the JSON type of a value from its first byte (the payload is
// already known to be valid JSON). An integer literal is both int and number;
// an object is also a map. null is 0.
func kindOf(raw json.RawMessage) fieldKind {
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

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func clip(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}
