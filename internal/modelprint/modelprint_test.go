package modelprint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A model directory's print notices a replaced weights file of the same
// size and an edited config, but not a touched (same bytes, new time) file.
func TestDirNoticesReplacedWeights(t *testing.T) {
	dir := t.TempDir()
	weights := make([]byte, 3<<20)
	for i := range weights {
		weights[i] = byte(i * 7)
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("config.json", []byte(`{"hidden_size": 64}`))
	write("model.safetensors", weights)
	was, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Same bytes, new modification time: no change.
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "model.safetensors"), later, later)
	if now, _ := Dir(dir); len(Diff(was, now)) != 0 {
		t.Errorf("a touched file changed the print: %v", Diff(was, now))
	}
	// Other weights of the same size (every byte differs), a config edit
	// and a new file.
	other := make([]byte, len(weights))
	for i := range other {
		other[i] = weights[i] + 1
	}
	write("model.safetensors", other)
	write("config.json", []byte(`{"hidden_size": 65}`))
	write("tokenizer.json", []byte(`{}`))
	now, err := Dir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range Diff(was, now) {
		names = append(names, strings.SplitN(d, ":", 2)[0])
	}
	if diff := cmp.Diff([]string{"config.json", "model.safetensors", "tokenizer.json"}, names); diff != "" {
		t.Errorf("changed files (-want +got):\n%s\n%v", diff, Diff(was, now))
	}
}
