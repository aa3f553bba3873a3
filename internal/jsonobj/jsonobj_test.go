package jsonobj

import (
	"errors"
	"reflect"
	"testing"
)

func keys(objs []Object) [][]string {
	var out [][]string
	for _, o := range objs {
		var ks []string
		for k := range o {
			ks = append(ks, k)
		}
		out = append(out, ks)
	}
	return out
}

func TestAll(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [][]string
	}{
		{`{"a":1}`, [][]string{{"a"}}},
		{"prose ```json\n{\"a\": {\"b\": 1}}\n``` more {\"c\": 2}", [][]string{{"a"}, {"c"}}},
		{`{"a": {"b":1} unclosed`, [][]string{{"b"}}},         // the outer '{' starts no object
		{`{"s": "{\"x\":1}" bad} {"c":2}`, [][]string{{"c"}}}, // a '{' inside a string of a broken object
		{`no braces`, nil},
		{`{"a":1}}{`, [][]string{{"a"}}},
	} {
		if got := keys(All(c.in)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("All(%q) keys = %v, want %v", c.in, got, c.want)
		}
		first, err := First(c.in)
		if c.want == nil {
			if !errors.Is(err, ErrNoJSON) {
				t.Errorf("First(%q) error = %v, want ErrNoJSON", c.in, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(keys([]Object{first}), c.want[:1]) {
			t.Errorf("First(%q) = %v, %v", c.in, first, err)
		}
	}
}

func TestRepaired(t *testing.T) {
	o, err := Repaired("text {'a': .5, 'b': [1, 2,],} tail")
	if err != nil || string(o["a"]) != "0.5" {
		t.Fatalf("Repaired = %v, %v", o, err)
	}
	for _, in := range []string{"none", "} before {", `{"a":1} {"b":2}`} {
		if _, err := Repaired(in); !errors.Is(err, ErrNoJSON) {
			t.Errorf("Repaired(%q) error = %v, want ErrNoJSON", in, err)
		}
	}
}
