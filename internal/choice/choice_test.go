package choice

import "testing"

type color string

func TestParse(t *testing.T) {
	if c, err := Parse("color", "red", color("red"), "green"); err != nil || c != "red" {
		t.Errorf("Parse(red) = %q, %v", c, err)
	}
	for _, tc := range []struct {
		choices []color
		want    string
	}{
		{[]color{"red"}, `color "blue": want red`},
		{[]color{"red", "green"}, `color "blue": want red or green`},
		{[]color{"red", "green", "cyan"}, `color "blue": want red, green or cyan`},
	} {
		if _, err := Parse("color", "blue", tc.choices...); err == nil || err.Error() != tc.want {
			t.Errorf("Parse(blue, %v): error %v, want %s", tc.choices, err, tc.want)
		}
	}
}
