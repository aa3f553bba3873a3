package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// jsonKeys lists the JSON keys of a struct type's fields.
func jsonKeys(v any) map[string]bool {
	m := map[string]bool{}
	rt := reflect.TypeOf(v)
	for rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	for i := 0; i < rt.NumField(); i++ {
		tag := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
		if tag != "" && tag != "-" {
			m[tag] = true
		}
	}
	return m
}

// extraKeys returns the keys of the JSON object b that v's struct type does
// not declare.
func extraKeys(b []byte, v any) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	known := jsonKeys(v)
	var extra map[string]json.RawMessage
	for k, raw := range all {
		if !known[k] {
			if extra == nil {
				extra = map[string]json.RawMessage{}
			}
			extra[k] = raw
		}
	}
	return extra, nil
}

// marshalWithExtra writes v's fields merged with extra as an indented JSON
// object with sorted keys (as HF's to_json_string does).
func marshalWithExtra(v any, extra map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, raw := range extra {
		if _, ok := m[k]; !ok {
			m[k] = raw
		}
	}
	keys := slices.Sorted(maps.Keys(m))
	var out bytes.Buffer
	out.WriteString("{\n")
	for i, k := range keys {
		kb, _ := json.Marshal(k)
		var val bytes.Buffer
		if err := json.Compact(&val, m[k]); err != nil {
			return nil, fmt.Errorf("key %s: %w", k, err)
		}
		fmt.Fprintf(&out, "  %s: %s", kb, val.Bytes())
		if i < len(keys)-1 {
			out.WriteString(",")
		}
		out.WriteString("\n")
	}
	out.WriteString("}\n")
	return out.Bytes(), nil
}
