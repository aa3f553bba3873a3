package dedup

import (
	"errors"
	"strings"
	"testing"
)

// Invisible characters neither make a prompt nor tell two prompts apart:
// a prompt of format characters (zero-width space, joiners, BOM, bidi
// controls) or lone combining marks is empty, and one inside a word changes
// neither the exact hash nor the shingles.
func TestInvisibleCharacters(t *testing.T) {
	for _, s := range []string{"\u200b", "\u200d\u200c", "\ufeff", "\u200f\u202e", " \u2066\u2069 ", "\u0301\u0301", "\u00ad", "\u2060"} {
		if Visible(s) {
			t.Errorf("Visible(%q) = true", s)
		}
	}
	for _, s := range []string{"a", "é", "7", "?", "😀", "\ue000", "\u200bx"} {
		if !Visible(s) {
			t.Errorf("Visible(%q) = false", s)
		}
	}
	plain := "Explain how photosynthesis turns sunlight into chemical energy in plants"
	variants := []string{
		strings.Replace(plain, "photosynthesis", "photo\u200bsynthesis", 1),
		strings.Replace(plain, "sunlight", "sun\u200dlight", 1),
		"\ufeff" + plain,
		strings.Replace(plain, "chemical", "chem\u00adical", 1),
		"\u202e" + plain + "\u202c",
		strings.Replace(plain, "energy", "ener\u2060gy", 1),
	}
	for _, v := range variants {
		if PromptID(v) != PromptID(plain) {
			t.Errorf("%q and the plain prompt have different prompt ids", v)
		}
		o := DefaultParams().Shingle
		if a, b := o.Words(Normalize(v), nil), o.Words(Normalize(plain), nil); strings.Join(a, " ") != strings.Join(b, " ") {
			t.Errorf("%q shingles as %v, the plain prompt as %v", v, a, b)
		}
	}

	// In the stage: six spellings of one prompt leave one row, and a prompt
	// of invisible characters is rejected like a blank one.
	dir := t.TempDir()
	run := t.TempDir()
	in := writeJSONL(t, dir, append([]string{plain, "What is the capital of France?"}, variants...))
	if err := runStage(t, run, map[string]string{KeyInput: in}); err != nil {
		t.Fatal(err)
	}
	if got := readPrompts(t, run); len(got) != 2 {
		t.Errorf("%d prompts kept, want 2 (one per prompt, its invisible variants removed)", len(got))
	}
	blank := writeJSONL(t, t.TempDir(), []string{"What is the capital of France?", "\u200b\u200d\ufeff\u200f \u0301"})
	err := runStage(t, t.TempDir(), map[string]string{KeyInput: blank})
	if !errors.Is(err, ErrBlankPrompt) || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("invisible prompt: %v, want ErrBlankPrompt naming row 1", err)
	}
}
