package domain

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// A TransitRegionState is written at every step of every region's
// assignment: a big create writes one for each of its regions in its
// spawn, and each region's last step writes it again. encoding/json's
// reflection was the largest part of that write's cost, and it wrote
// every zero-valued server reference in full. MarshalState writes the
// same JSON object by hand and leaves out what is zero (or empty): a
// reader of any version decodes it into a new procedure, where a missing
// key is the zero value, so the state read back is the same, and 0.1.0
// reads it (no new format: the type's version stays 1). Its keys are
// json.Marshal's, in the struct's order.

// MarshalState implements procedure.StateMarshaler. The state is read
// back as any JSON state is, by the registry's encoding/json.
func (p *TransitRegionState) MarshalState() ([]byte, error) {
	b := make([]byte, 0, 160+len(p.Region)+len(p.Address))
	b = append(b, '{')
	b = appendJSONField(b, "region", p.Region)
	b = appendJSONField(b, "namespace", p.Namespace)
	b = appendJSONField(b, "table", p.Table)
	b = appendJSONField(b, "kind", p.Kind)
	b = appendJSONField(b, "target", p.Target)
	b = appendJSONRef(b, "from", p.From)
	b = appendJSONBool(b, "bounded", p.Bounded)
	b = appendJSONField(b, "undo_state", p.UndoState)
	b = appendJSONRef(b, "server", p.Server)
	b = appendJSONField(b, "address", p.Address)
	b = appendJSONField(b, "source", p.Source)
	if len(p.Excluded) > 0 {
		b = appendJSONKey(b, "excluded")
		b = append(b, '[')
		for i, ex := range p.Excluded {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, ex)
		}
		b = append(b, ']')
	}
	b = appendJSONInt(b, "attempts", p.Attempts)
	b = appendJSONInt(b, "rounds", p.Rounds)
	b = appendJSONRef(b, "opened", p.Opened)
	b = appendJSONBool(b, "undone", p.Undone)
	b = appendJSONBool(b, "prepared", p.Prepared)
	return append(b, '}'), nil
}

// appendJSONKey appends key (a constant that needs no escaping) and its
// colon, after a comma unless it is the object's first.
func appendJSONKey(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

func appendJSONField(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return appendJSONString(appendJSONKey(b, key), v)
}

func appendJSONBool(b []byte, key string, v bool) []byte {
	if !v {
		return b
	}
	return append(appendJSONKey(b, key), "true"...)
}

func appendJSONInt(b []byte, key string, v int) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(appendJSONKey(b, key), int64(v), 10)
}

// appendJSONRef appends a server reference as json.Marshal writes it,
// unless it is zero (no server, start code 0).
func appendJSONRef(b []byte, key string, r ServerRef) []byte {
	if r == (ServerRef{}) {
		return b
	}
	b = append(appendJSONKey(b, key), `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"start_code":`...)
	b = strconv.AppendUint(b, r.StartCode, 10)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string: as is between quotes when
// it is printable ASCII that needs no escape (names and addresses always
// are), through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
