package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// PyJSON re-serializes a JSON value the way transformers' chat-template
// `tojson` filter (Python's json.dumps with ensure_ascii=False) writes it
// after json.loads: object keys in their original order, ", " and ": "
// separators, non-ASCII characters unescaped, integers as integers and other
// numbers as Python float reprs (1.0, 1e-05, 1e+16).
func PyJSON(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := pyValue(dec, &b); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("trailing data after the JSON value")
	}
	return b.String(), nil
}

func pyValue(dec *json.Decoder, b *strings.Builder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			b.WriteByte('{')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				k, err := dec.Token()
				if err != nil {
					return err
				}
				pyString(b, k.(string))
				b.WriteString(": ")
				if err := pyValue(dec, b); err != nil {
					return err
				}
			}
			b.WriteByte('}')
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if err := pyValue(dec, b); err != nil {
					return err
				}
			}
			b.WriteByte(']')
		}
		_, err := dec.Token() // the closing delimiter
		return err
	case string:
		pyString(b, v)
	case json.Number:
		s, err := pyNumber(string(v))
		if err != nil {
			return err
		}
		b.WriteString(s)
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	}
	return nil
}

func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyNumber formats a JSON number literal as Python prints what json.loads
// made of it.
func pyNumber(lit string) (string, error) {
	if !strings.ContainsAny(lit, ".eE") {
		n, ok := new(big.Int).SetString(lit, 10)
		if !ok {
			return "", fmt.Errorf("bad integer %q", lit)
		}
		return n.String(), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	switch {
	case err != nil && math.IsInf(f, 1):
		return "Infinity", nil // Python's float() overflows to inf, and json.dumps writes it so
	case err != nil && math.IsInf(f, -1):
		return "-Infinity", nil
	case err != nil:
		return "", fmt.Errorf("number %q: %w", lit, err)
	}
	if f == 0 { // keeps the sign: -0.0
		if strings.HasPrefix(lit, "-") {
			return "-0.0", nil
		}
		return "0.0", nil
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	exp, err := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if err != nil {
		return "", err
	}
	if exp < -4 || exp >= 16 {
		return e, nil
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s, nil
}
